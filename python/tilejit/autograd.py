"""torch.autograd support (imported only when torch is): attention with gradients for q, k, v
and the fused linear cross-entropy with gradients for e and every segment weight and bias, both
computed by the library's backward kernels.

tilejit.attention and tilejit.linear_cross_entropy route torch tensors here; calling these
functions directly is the same. They work under ``torch.no_grad`` (a plain forward, nothing
saved) and on non-contiguous tensors (passed with their strides; a copy is made only where the C
ABI needs a contiguous last dimension or, on the GPU, 16-byte aligned rows). Captured buffers and
the targets get no gradient; lse and row_loss are outputs without gradient (except row_loss as
the loss itself under reduction none).

torch.compile: both entry points are wrapped with ``torch.compiler.disable`` (torch >= 2.1), so
a compiled model treats each call as an opaque op: Dynamo breaks the graph around it and runs it
eagerly, and autograd still reaches the library's backward. (``torch.library.custom_op`` would
keep the graph whole, but needs programs, bindings and block masks encoded as tensors and
strings, and a fake-tensor implementation of every output: not done.)

On the GPU, calls run on the current stream of the tensors' device, and the backward on the
stream autograd runs it on. What synchronises the host is the library's: the loss forward reads
back its kept-row count once, and building a block mask from buffers in device memory waits for
its stream (the mask comes back to host memory); attention without a block_mask builds one per
call (shared by its forward and backward), so pass one built once per batch to keep a step free
of host synchronisation (python/tests/test_torch_cuda.py checks that such a step returns while
its stream is still busy).
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from . import _arrays
from .attention import AttentionCall
from .loss import LinearCrossEntropyForward, SegmentArg, _split_segment
from .masks import BlockMask, block_mask
from .programs import Program
from .vocab import VocabOrderArg


class _AttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, call: AttentionCall, q: torch.Tensor, k: torch.Tensor,
                v: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        out, lse = call.forward(q, k, v)
        ctx.call = call
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, d_out: torch.Tensor, _d_lse: Any) -> Tuple[Any, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        call: AttentionCall = ctx.call
        call.placement.refresh_stream()
        dq, dk, dv = call.backward(q, k, v, out, lse, _arrays.cast(d_out, q))
        return None, dq, dk, dv


@torch.compiler.disable
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, program: Program,
              buffers: Optional[Mapping[str, Any]] = None,
              params: Optional[Mapping[str, Any]] = None, block_mask: Optional[BlockMask] = None,
              scale: Optional[float] = None, return_lse: bool = False,
              deterministic: bool = False) -> Union[torch.Tensor, Tuple[torch.Tensor, ...]]:
    """tilejit.attention on torch tensors, differentiable in q, k and v (see tilejit.attention
    for the arguments). Without a block mask, one is built once and shared by the forward and
    the backward."""
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if needs_grad and block_mask is None and q.dim() == 4 and k.dim() == 4:
        block_mask = _mask_for(q, k, program, buffers, params)
    call = AttentionCall(q, program, buffers, params, block_mask, scale, deterministic)
    if needs_grad:
        out, lse = _AttentionFunction.apply(call, q, k, v)
    else:
        out, lse = call.forward(q, k, v)
    return (out, lse) if return_lse else out


def _mask_for(q: torch.Tensor, k: torch.Tensor, program: Program,
              buffers: Optional[Mapping[str, Any]],
              params: Optional[Mapping[str, Any]]) -> BlockMask:
    batch, heads, seq_q, _ = q.shape
    return block_mask(program, batch, heads, seq_q, k.shape[2], buffers, params)


class _LinearCrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, make_run: Any, e: torch.Tensor,
                *weights_and_biases: Optional[torch.Tensor]) -> Tuple[torch.Tensor, ...]:
        run: LinearCrossEntropyForward = make_run(e, weights_and_biases)
        ctx.run = run
        ctx.e_dtype = e.dtype
        ctx.dtypes = [t.dtype if t is not None else None for t in weights_and_biases]
        loss = run.loss
        # Under reduction none the loss is row_loss itself: the second output is a copy.
        row_loss = run.row_loss.clone() if run.reduction == "none" else run.row_loss
        ctx.mark_non_differentiable(row_loss, run.lse)
        return loss, row_loss, run.lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_loss: torch.Tensor, _g_rows: Any, _g_lse: Any) -> Tuple[Any, ...]:
        run: LinearCrossEntropyForward = ctx.run
        run.placement.refresh_stream()
        d_e, grads = run.backward(grad_loss)
        flat: List[Optional[torch.Tensor]] = []
        for dw, db in grads:
            flat.extend((dw, db))
        flat = [g.to(dt) if g is not None and dt is not None else None
                for g, dt in zip(flat, ctx.dtypes)]
        needs = ctx.needs_input_grad
        return (None, d_e.to(ctx.e_dtype) if needs[1] else None,
                *[g if needs[2 + i] else None for i, g in enumerate(flat)])


@torch.compiler.disable
def linear_cross_entropy(e: torch.Tensor, segments: Sequence[SegmentArg], targets: torch.Tensor,
                         program: Program, buffers: Optional[Mapping[str, Any]] = None,
                         params: Optional[Mapping[str, Any]] = None,
                         filter_threshold: Optional[float] = None, return_rows: bool = False,
                         teacher_hidden: Optional[torch.Tensor] = None,
                         grad_buffer_bytes: int = 0, vocab_order: VocabOrderArg = None
                         ) -> Union[torch.Tensor, Tuple[torch.Tensor, ...]]:
    """tilejit.linear_cross_entropy on torch tensors, differentiable in e and in every
    segment's weight and bias (see tilejit.linear_cross_entropy for the arguments)."""
    pairs = [_split_segment(i, s) for i, s in enumerate(segments)]
    flat: List[Optional[torch.Tensor]] = []
    for w, b in pairs:
        flat.extend((w, b))

    # With an order on the GPU, the weights' gradients are allocated with the forward, which
    # builds its position-order weight copy in them: a step then needs that much less memory.
    weight_grads = torch.is_grad_enabled() and any(w.requires_grad for w, _ in pairs)

    def make_run(e_in: torch.Tensor, tensors: Sequence[Optional[torch.Tensor]]) -> Any:
        segs = [(tensors[2 * i], tensors[2 * i + 1]) if pairs[i][1] is not None
                else tensors[2 * i] for i in range(len(pairs))]
        return LinearCrossEntropyForward(e_in, segs, targets, program, buffers, params,
                                         filter_threshold, teacher_hidden, grad_buffer_bytes,
                                         vocab_order, weight_grads and vocab_order is not None)

    tensors = [e] + [t for t in flat if t is not None]
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        loss, row_loss, lse = _LinearCrossEntropyFunction.apply(make_run, e, *flat)
    else:
        run = make_run(e, flat)
        loss, row_loss, lse = run.loss, run.row_loss, run.lse
    return (loss, row_loss, lse) if return_rows else loss
