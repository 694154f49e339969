"""A training step with tilejit and torch autograd: token embedding -> one attention layer with a
document mask over packed sequences -> a fused linear cross-entropy over a two-segment
vocabulary (text ids, then action tokens at an offset, with dead ids between them).

The first step's loss and gradients are checked against the same model written in plain torch
in fp64 (a dense mask and the concatenated logits); then a few optimiser steps on the batch
show the loss going down. Runs on the CPU backend with small sizes; --device cuda runs the GPU
kernels in bf16 (head dim 64). Exits 77 when torch is missing, 1 when the check fails.

    PYTHONPATH=python python3 examples/python/train_step.py [--steps 5] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import copy
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("train_step: needs torch (pip install torch)")
    sys.exit(77)

import tilejit

TEXT_VOCAB, DEAD, ACTIONS = 1000, 10, 24  # ids [0, 1000) text, [1010, 1034) actions
ACTION_BEGIN = TEXT_VOCAB + DEAD
IGNORE = -100

ATTENTION = tilejit.programs.document_causal()  # buffer doc : i32[B, S]
LOSS = tilejit.program(f"""
loss lm_head {{
  segment text : [0, {TEXT_VOCAB}) weight W_text
  segment action : [{ACTION_BEGIN}, {ACTION_BEGIN + ACTIONS}) weight W_action bias b_action
  ignore_index = {IGNORE}
}}
""", "lm_head.tj")


class TinyModel(torch.nn.Module):
    """Embedding, one pre-norm attention block, and a two-segment output head."""

    def __init__(self, dim: int, heads: int, head_dim: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        vocab = ACTION_BEGIN + ACTIONS
        self.embed = torch.nn.Embedding(vocab, dim)
        self.qkv = torch.nn.Linear(dim, 3 * heads * head_dim, bias=False)
        self.proj = torch.nn.Linear(heads * head_dim, dim, bias=False)
        self.norm = torch.nn.LayerNorm(dim)
        self.w_text = torch.nn.Parameter(0.05 * torch.randn(TEXT_VOCAB, dim))
        self.w_action = torch.nn.Parameter(0.05 * torch.randn(ACTIONS, dim))
        self.b_action = torch.nn.Parameter(torch.zeros(ACTIONS))

    def hidden(self, tokens: torch.Tensor, attend) -> torch.Tensor:
        batch, seq = tokens.shape
        x = self.embed(tokens)
        qkv = self.qkv(self.norm(x)).view(batch, seq, 3, self.heads, self.head_dim)
        # [B, S, H, D] memory attended as [B, H, S, D] views: no copies.
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        o = attend(q, k, v).transpose(1, 2).reshape(batch, seq, -1)
        return (x + self.proj(o)).reshape(batch * seq, -1)

    def loss(self, tokens: torch.Tensor, doc: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The tilejit path: attention program + fused loss, both with autograd."""
        h = self.hidden(tokens, lambda q, k, v: tilejit.attention(q, k, v, ATTENTION,
                                                                  buffers={"doc": doc}))
        segments = [self.w_text, (self.w_action, self.b_action)]
        return tilejit.linear_cross_entropy(h, segments, targets, LOSS)

    def reference_loss(self, tokens: torch.Tensor, doc: torch.Tensor,
                       targets: torch.Tensor) -> torch.Tensor:
        """The same model in plain torch: a dense [B, 1, S, S] mask and [N, V] logits."""
        seq = tokens.shape[1]
        causal = torch.ones(seq, seq, dtype=torch.bool, device=doc.device).tril()
        mask = (doc[:, None, :, None] == doc[:, None, None, :]) & causal

        def attend(q, k, v):
            s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
            return torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v

        h = self.hidden(tokens, attend)
        logits = torch.cat([h @ self.w_text.T, h @ self.w_action.T + self.b_action], 1)
        live = torch.cat([torch.arange(TEXT_VOCAB), ACTION_BEGIN + torch.arange(ACTIONS)])
        kept = targets != IGNORE
        col = torch.searchsorted(live.to(targets.device), torch.where(kept, targets, 0))
        return F.cross_entropy(logits, torch.where(kept, col, IGNORE), ignore_index=IGNORE)


def packed_batch(batch: int, seq: int, docs: int, device: str, gen: torch.Generator):
    """Token ids, document ids and next-token targets for packed documents: the last position of
    each document has no target (ignored); a few positions are action tokens."""
    cuts = torch.stack([torch.randperm(seq - 1, generator=gen)[:docs - 1] + 1
                        for _ in range(batch)]).sort(1).values
    doc = torch.searchsorted(cuts, torch.arange(seq).expand(batch, seq).contiguous(), right=True)
    tokens = torch.randint(0, TEXT_VOCAB, (batch, seq), generator=gen)
    actions = torch.rand(batch, seq, generator=gen) < 0.1
    tokens[actions] = ACTION_BEGIN + torch.randint(0, ACTIONS, (int(actions.sum()),),
                                                   generator=gen)
    targets = torch.full_like(tokens, IGNORE)
    same_doc = doc[:, 1:] == doc[:, :-1]
    targets[:, :-1] = torch.where(same_doc, tokens[:, 1:], IGNORE)
    return (tokens.to(device), doc.to(torch.int32).to(device), targets.reshape(-1).to(device))


def check_against_reference(model: TinyModel, batch) -> bool:
    """The first step's loss and every parameter's gradient, tilejit vs plain torch fp64."""
    loss = model.loss(*batch)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    reference = copy.deepcopy(model).double()  # the same weights, in fp64
    want = reference.reference_loss(*batch)
    want_grads = torch.autograd.grad(want, list(reference.parameters()))
    worst = max((g.double() - w).abs().max().item() / (w.abs().max().item() + 1e-12)
                for g, w in zip(grads, want_grads))
    print(f"step 0: loss {loss.item():.6f}, fp64 reference {want.item():.6f}, "
          f"worst relative gradient error {worst:.1e}")
    return abs(loss.item() - want.item()) < 1e-4 * max(1.0, abs(want.item())) and worst < 1e-3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    on_gpu = args.device == "cuda"
    # The GPU kernels take bf16 or f16 with head dim 64 or 128; the CPU backend takes any.
    model = TinyModel(dim=128 if on_gpu else 48, heads=2, head_dim=64 if on_gpu else 16)
    batch = packed_batch(2, 256 if on_gpu else 64, 4, args.device, gen)
    if on_gpu:
        model = model.to(args.device, torch.bfloat16)
    elif not check_against_reference(model, batch):
        print("train_step: tilejit and the fp64 reference disagree")
        return 1

    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step in range(args.steps):
        optimiser.zero_grad(set_to_none=True)
        loss = model.loss(*batch)
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
        print(f"step {step + 1}: loss {losses[-1]:.4f}")
    if args.steps > 1 and not losses[-1] < losses[0]:
        print("train_step: the loss did not go down")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
