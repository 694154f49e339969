"""fp64 numpy references the tests compare tilejit against: attention forward and backward
(with a score modifier and GQA), brute-force tile classification, and the fused linear
cross-entropy forward and backward over a segmented vocabulary. Written from the semantics in
the design (DESIGN.md "Semantics"), independently of the library."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

# (b, h, q, kv) index grids -> bool mask [B, H, Sq, Skv].
MaskFn = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]
# score modifier: (score, b, h, q, kv) -> (modded score, d modded / d score).
ScoreFn = Callable[..., Tuple[np.ndarray, np.ndarray]]


def identity_score(s: np.ndarray, *_: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    return s, np.ones_like(s)


def softcap_score(cap: float) -> ScoreFn:
    def mod(s: np.ndarray, *_: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        t = np.tanh(s / cap)
        return cap * t, 1.0 - t * t
    return mod


def index_grids(batch: int, heads: int, seq_q: int, seq_kv: int) -> Tuple[np.ndarray, ...]:
    return np.meshgrid(np.arange(batch), np.arange(heads), np.arange(seq_q), np.arange(seq_kv),
                       indexing="ij")


@dataclass
class AttentionReference:
    """Forward and backward of attention in fp64 for one mask and score modifier."""

    mask_fn: MaskFn
    score_fn: ScoreFn = identity_score
    scale: Optional[float] = None

    def _scores(self, q: np.ndarray, k: np.ndarray):
        q, k = q.astype(np.float64), k.astype(np.float64)
        batch, heads_q, seq_q, dim = q.shape
        group = heads_q // k.shape[1]
        kx = np.repeat(k, group, axis=1)
        scale = self.scale if self.scale is not None else 1.0 / np.sqrt(dim)
        raw = scale * np.einsum("bhqd,bhkd->bhqk", q, kx)
        grids = index_grids(batch, heads_q, seq_q, k.shape[2])
        s, ds = self.score_fn(raw, *grids)
        mask = self.mask_fn(*grids)
        return s, ds, mask, scale, group

    def forward(self, q: np.ndarray, k: np.ndarray,
                v: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        s, _, mask, _, group = self._scores(q, k)
        vx = np.repeat(v.astype(np.float64), group, axis=1)
        s = np.where(mask, s, -np.inf)
        m = s.max(axis=-1, keepdims=True)
        empty = ~np.isfinite(m)
        p = np.where(mask, np.exp(s - np.where(empty, 0.0, m)), 0.0)
        total = p.sum(axis=-1, keepdims=True)
        p = np.divide(p, total, out=np.zeros_like(p), where=total > 0)
        out = np.einsum("bhqk,bhkd->bhqd", p, vx)
        with np.errstate(divide="ignore"):
            lse = np.where(empty[..., 0], -np.inf, m[..., 0] + np.log(np.maximum(total[..., 0],
                                                                                1e-300)))
        return out, lse

    def backward(self, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                 d_out: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        s, ds, mask, scale, group = self._scores(q, k)
        q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
        kx, vx = np.repeat(k64, group, axis=1), np.repeat(v64, group, axis=1)
        out, lse = self.forward(q, k, v)
        lse_safe = np.where(np.isfinite(lse), lse, 0.0)[..., None]
        p = np.where(mask, np.exp(np.where(mask, s, 0.0) - lse_safe), 0.0)
        d_out = d_out.astype(np.float64)
        dp = np.einsum("bhqd,bhkd->bhqk", d_out, vx)
        delta = (d_out * out).sum(axis=-1, keepdims=True)
        d_raw = p * (dp - delta) * ds
        dq = scale * np.einsum("bhqk,bhkd->bhqd", d_raw, kx)
        dkx = scale * np.einsum("bhqk,bhqd->bhkd", d_raw, q64)
        dvx = np.einsum("bhqk,bhqd->bhkd", p, d_out)
        fold = lambda x: x.reshape(x.shape[0], -1, group, *x.shape[2:]).sum(axis=2)
        return dq, fold(dkx), fold(dvx)


def brute_force_counts(mask: np.ndarray, block_q: int, block_kv: int) -> Tuple[int, int, int]:
    """(full, partial, empty) tiles of a dense bool mask [B, H, Sq, Skv], tile by tile."""
    full = partial = empty = 0
    batch, heads, seq_q, seq_kv = mask.shape
    for b in range(batch):
        for h in range(heads):
            for q0 in range(0, seq_q, block_q):
                for k0 in range(0, seq_kv, block_kv):
                    tile = mask[b, h, q0:q0 + block_q, k0:k0 + block_kv]
                    kept = int(tile.sum())
                    if kept == tile.size:
                        full += 1
                    elif kept == 0:
                        empty += 1
                    else:
                        partial += 1
    return full, partial, empty


@dataclass
class Segment:
    begin: int
    weight: np.ndarray
    bias: Optional[np.ndarray] = None


@dataclass
class LossReference:
    """Cross-entropy with label smoothing eps and z-loss lam over a segmented vocabulary;
    logit_fn maps raw logits to (modded, d modded / d raw)."""

    segments: List[Segment]
    reduction: str = "mean"
    label_smoothing: float = 0.0
    z_loss: float = 0.0
    ignore_index: int = -100
    logit_fn: ScoreFn = identity_score
    ids: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.ids = np.concatenate(
            [s.begin + np.arange(s.weight.shape[0]) for s in self.segments])

    def _logits(self, e: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        e = e.astype(np.float64)
        raw = np.concatenate([
            e @ s.weight.astype(np.float64).T +
            (s.bias.astype(np.float64) if s.bias is not None else 0.0) for s in self.segments
        ], axis=1)
        return self.logit_fn(raw)

    def forward(self, e: np.ndarray, targets: np.ndarray):
        """(loss, row_loss [N], lse [N]): loss reduced as the program says (reduction none: the
        rows' losses themselves)."""
        z, _ = self._logits(e)
        kept = targets != self.ignore_index
        m = z.max(axis=1, keepdims=True)
        lse = (m + np.log(np.exp(z - m).sum(axis=1, keepdims=True)))[:, 0]
        col = np.searchsorted(self.ids, np.where(kept, targets, self.ids[0]))
        zt = z[np.arange(len(targets)), col]
        eps, lam = self.label_smoothing, self.z_loss
        rows = (1 - eps) * (lse - zt) + eps * (lse - z.mean(axis=1)) + lam * lse * lse
        rows, lse = np.where(kept, rows, 0.0), np.where(kept, lse, 0.0)
        total = rows.sum()
        loss = total / max(kept.sum(), 1) if self.reduction == "mean" else total
        if self.reduction == "none":
            loss = rows
        return loss, rows, lse

    def backward(self, e: np.ndarray, targets: np.ndarray, grad=1.0):
        """(d_e, [(d_weight, d_bias or None)]) for upstream `grad` (a number, or [N] for
        reduction none)."""
        z, dz_draw = self._logits(e)
        kept = targets != self.ignore_index
        _, _, lse = self.forward(e, targets)
        p = np.exp(z - lse[:, None])
        live = z.shape[1]
        onehot = np.zeros_like(z)
        rows = np.nonzero(kept)[0]
        onehot[rows, np.searchsorted(self.ids, targets[rows])] = 1.0
        eps, lam = self.label_smoothing, self.z_loss
        dz = p - (1 - eps) * onehot - eps / live + 2 * lam * lse[:, None] * p
        if self.reduction == "none":
            upstream = np.asarray(grad, dtype=np.float64).reshape(-1)
        else:
            upstream = np.full(len(targets), float(grad))
            if self.reduction == "mean":
                upstream /= max(kept.sum(), 1)
        g = np.where(kept[:, None], dz * dz_draw * upstream[:, None], 0.0)
        e64 = e.astype(np.float64)
        d_e = np.zeros_like(e64)
        grads = []
        col = 0
        for s in self.segments:
            n = s.weight.shape[0]
            gs = g[:, col:col + n]
            d_e += gs @ s.weight.astype(np.float64)
            grads.append((gs.T @ e64, gs.sum(axis=0) if s.bias is not None else None))
            col += n
        return d_e, grads


def kl_reference(e: np.ndarray, w: np.ndarray, teacher_e: np.ndarray, teacher_w: np.ndarray,
                 targets: np.ndarray, alpha: float, temperature: float):
    """(mean loss, d_e, d_w) of (1 - alpha) * CE + alpha * T^2 * KL(teacher || student) at
    temperature T, one segment over [0, V), no ignored rows, mean reduction."""
    z = e.astype(np.float64) @ w.astype(np.float64).T
    tz = teacher_e.astype(np.float64) @ teacher_w.astype(np.float64).T
    log_softmax = lambda x: x - (x.max(1, keepdims=True) + np.log(
        np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)))
    ls, lq, lt = log_softmax(z), log_softmax(z / temperature), log_softmax(tz / temperature)
    rows = np.arange(len(targets))
    ce = -ls[rows, targets]
    kl = (np.exp(lt) * (lt - lq)).sum(1)
    n = len(targets)
    loss = ((1 - alpha) * ce + alpha * temperature**2 * kl).mean()
    onehot = np.zeros_like(z)
    onehot[rows, targets] = 1
    dz = ((1 - alpha) * (np.exp(ls) - onehot) +
          alpha * temperature * (np.exp(lq) - np.exp(lt))) / n
    return loss, dz @ w.astype(np.float64), dz.T @ e.astype(np.float64)


def assert_close(test, actual: np.ndarray, expected: np.ndarray, atol: float, rtol: float,
                 what: str) -> None:
    """unittest-style closeness with the worst element in the message (NaN fails)."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    test.assertEqual(actual.shape, expected.shape, f"{what}: shape")
    both_inf = np.isinf(actual) & np.isinf(expected) & (np.sign(actual) == np.sign(expected))
    with np.errstate(invalid="ignore"):
        err = np.where(both_inf, 0.0, np.abs(actual - expected))
    bound = atol + rtol * np.abs(np.where(both_inf, 0.0, expected))
    bad = ~(err <= bound)
    if bad.any():
        i = tuple(int(n) for n in np.unravel_index(np.argmax(np.where(bad, err - bound, -np.inf)),
                                                      err.shape))
        test.fail(f"{what}: {int(bad.sum())} of {err.size} elements off; worst at {i}: "
                  f"{actual[i]} vs {expected[i]}")


def sorted_documents(rng: np.random.Generator, batch: int, seq: int,
                     max_docs: int) -> np.ndarray:
    """Document ids [B, S], int32, non-decreasing along S (packed documents)."""
    docs = np.zeros((batch, seq), dtype=np.int32)
    for b in range(batch):
        cuts = np.sort(rng.choice(np.arange(1, seq), size=max_docs - 1, replace=False))
        docs[b] = np.searchsorted(cuts, np.arange(seq), side="right")
    return docs


def randn(rng: np.random.Generator, shape: Sequence[int], dtype=np.float32,
          scale: float = 1.0) -> np.ndarray:
    return (scale * rng.standard_normal(shape)).astype(dtype)
