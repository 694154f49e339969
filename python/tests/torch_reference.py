"""fp64 torch references for the torch tests (test_torch.py, test_torch_cuda.py), written from
the semantics in the design (DESIGN.md "Semantics"), independently of the library: dense
attention with the program's mask and score modifier, cross-entropy over materialised logits of
a segmented vocabulary, brute-force tile counts, and the inputs they share (seeded generators,
document ids). Gradients come from torch autograd on these fp64 graphs.

Imported only where torch is (the test modules skip without it)."""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from support import SEED


def generator(stream: int) -> torch.Generator:
    """A CPU generator seeded from this run's seed and `stream` (one per test)."""
    return torch.Generator().manual_seed(SEED * 1000 + stream)


def randn(gen, *shape, dtype=None, device="cpu", scale=1.0, grad=True):
    x = (scale * torch.randn(*shape, generator=gen, dtype=torch.float64))
    x = x.to(dtype=dtype or torch.float32, device=device)
    return x.requires_grad_(grad)


def reference_attention(q, k, v, mask, score_mod: Optional[Callable] = None, scale=None):
    """fp64 attention with torch autograd (mask: bool [.., Sq, Skv], rows never empty)."""
    q, k, v = (x.double() for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (scale if scale is not None else q.shape[-1] ** -0.5) * q @ k.transpose(-1, -2)
    if score_mod is not None:
        s = score_mod(s)
    return torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v


def reference_lse(q, k, mask, score_mod: Optional[Callable] = None, scale=None):
    """The natural-log log-sum-exp [B, Hq, Sq] of the masked, modified scores, in fp64."""
    q, k = q.double(), k.double()
    k = k.repeat_interleave(q.shape[1] // k.shape[1], 1)
    s = (scale if scale is not None else q.shape[-1] ** -0.5) * q @ k.transpose(-1, -2)
    if score_mod is not None:
        s = score_mod(s)
    return torch.logsumexp(s.masked_fill(~mask, float("-inf")), -1)


def reference_loss(e, segments, begins, targets, reduction="mean", ignore_index=-100):
    """fp64 cross-entropy over the live ids of a segmented vocabulary."""
    logits = torch.cat([e.double() @ w.double().T + (b.double() if b is not None else 0)
                        for w, b in segments], 1)
    ids = torch.cat([b0 + torch.arange(w.shape[0]) for b0, (w, _) in zip(begins, segments)])
    kept = targets != ignore_index
    col = torch.searchsorted(ids.to(targets.device), torch.where(kept, targets, ids[0]))
    col = torch.where(kept, col, torch.full_like(col, -100))
    return F.cross_entropy(logits, col, ignore_index=-100, reduction=reduction)


def reference_loss_terms(e, segments: Sequence[Tuple], begins: Sequence[int], targets, *,
                         cap: Optional[float] = None, smoothing: float = 0.0,
                         z_loss: float = 0.0, ignore_index: int = -100,
                         reduction: str = "mean"):
    """(loss, row_loss [N], lse [N]) in fp64 over materialised logits: logit soft-capping
    ``cap * tanh(logit / cap)``, label smoothing uniform over the live ids, z-loss
    ``z_loss * lse^2``; ignored rows give 0; reduction none returns the rows as the loss."""
    raw = torch.cat([e.double() @ w.double().T + (b.double() if b is not None else 0)
                     for w, b in segments], 1)
    z = cap * torch.tanh(raw / cap) if cap else raw
    ids = torch.cat([b0 + torch.arange(w.shape[0], device=e.device)
                     for b0, (w, _) in zip(begins, segments)])
    kept = targets != ignore_index
    col = torch.searchsorted(ids, torch.where(kept, targets, ids[0]).to(ids.dtype))
    lse = torch.logsumexp(z, 1)
    z_target = z.gather(1, col[:, None])[:, 0]
    rows = ((1 - smoothing) * (lse - z_target) + smoothing * (lse - z.mean(1)) +
            z_loss * lse * lse)
    rows = torch.where(kept, rows, torch.zeros_like(rows))
    lse = torch.where(kept, lse, torch.zeros_like(lse))
    if reduction == "none":
        return rows, rows, lse
    total = rows.sum()
    loss = total / kept.sum().clamp_min(1) if reduction == "mean" else total
    return loss, rows, lse


def causal(sq, skv, device="cpu"):
    return torch.arange(sq, device=device)[:, None] >= torch.arange(skv, device=device)[None]


def sorted_docs(gen, batch, seq, docs):
    """Document ids [B, S] int32 (CPU), non-decreasing along S: `docs` packed documents."""
    cuts = torch.stack([torch.randperm(seq - 1, generator=gen)[:docs - 1] + 1
                        for _ in range(batch)]).sort(1).values
    return torch.searchsorted(cuts, torch.arange(seq).expand(batch, seq).contiguous(),
                              right=True).to(torch.int32)


def document_causal_mask(doc, device=None):
    """[B, 1, S, S]: same document and q >= kv."""
    doc = doc.to(device) if device is not None else doc
    seq = doc.shape[1]
    return ((doc[:, None, :, None] == doc[:, None, None, :]) &
            causal(seq, seq, doc.device))


def brute_force_tile_counts(mask, block_q: int, block_kv: int) -> Tuple[int, int, int]:
    """(full, partial, empty) tiles of a dense bool mask [B, H, Sq, Skv], by counting each
    tile's kept elements."""
    b, h, sq, skv = mask.shape
    tq, tk = -(-sq // block_q), -(-skv // block_kv)
    padded = torch.zeros(b, h, tq * block_q, tk * block_kv, dtype=torch.int64,
                         device=mask.device)
    padded[..., :sq, :skv] = mask.to(torch.int64)
    kept = padded.view(b, h, tq, block_q, tk, block_kv).sum((3, 5))
    rows = (torch.arange(tq, device=mask.device) * block_q).clamp(max=sq)
    size_q = (rows + block_q).clamp(max=sq) - rows
    cols = torch.arange(tk, device=mask.device) * block_kv
    size_kv = (cols + block_kv).clamp(max=skv) - cols
    size = size_q[:, None] * size_kv[None, :]
    full = int((kept == size).sum())
    empty = int((kept == 0).sum())
    return full, kept.numel() - full - empty, empty
