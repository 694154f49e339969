"""Attention with a tilejit program: ``O = softmax(mask(score_mod(scale * Q K^T))) V``.

Shapes: q ``[B, Hq, Sq, D]``, k and v ``[B, Hkv, Skv, D]`` with Hq a multiple of Hkv (GQA,
MQA); out like q; lse ``[B, Hq, Sq]`` float32 (natural log; ``-inf`` on rows the mask empties).
Memory laid out ``[B, S, H, D]`` is passed as a permuted view (``x.transpose(1, 2)``): any
strides are taken as they are, and only a last dimension that is not contiguous (or, on the GPU,
rows that are not 16-byte aligned) is copied to a contiguous layout.

Where it runs follows the tensors: host memory (numpy, CPU torch tensors) runs on the CPU
backend (f32, bf16 or f16, any head dim); CUDA memory runs the JIT-compiled kernels (bf16 or
f16, head dim 64 or 128) on the current stream of the tensors' device, with no host
synchronisation. Outputs are allocated by the inputs' library on their device.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple, Union

from . import _capi
from ._bindings import Bindings
from ._dlpack import Exported
from ._operands import Placement
from .masks import BlockMask
from .programs import Program


class AttentionCall:
    """One program with its bindings, block mask and options, placed like `q`: the forward and
    the backward of a step share it (autograd keeps it between the two)."""

    def __init__(self, q: Any, program: Program, buffers: Optional[Mapping[str, Any]] = None,
                 params: Optional[Mapping[str, Any]] = None,
                 block_mask: Optional[BlockMask] = None, scale: Optional[float] = None,
                 deterministic: bool = False) -> None:
        self.program = program
        self.placement = Placement(q, "q")
        self.bindings = Bindings(buffers, params, self.placement)
        self.block_mask = block_mask
        self.options = _capi.AttentionOptions(
            float(scale) if scale is not None else 0.0, scale is not None, bool(deterministic))

    def _mask_handle(self) -> Any:
        return self.block_mask.handle if self.block_mask is not None else None

    def forward(self, q: Any, k: Any, v: Any) -> Tuple[Any, Any]:
        """(out, lse) for q, k, v."""
        p = self.placement
        eq, ek, ev = (p.export(x, n, rows=True) for x, n in ((q, "q"), (k, "k"), (v, "v")))
        out, e_out = p.output(eq.shape, "out")
        lse, e_lse = p.output(eq.shape[:3], "lse", "float32")
        with p.scope():
            _capi.call("tj_attention_forward", self.program.handle, eq.ref, ek.ref, ev.ref,
                       self.bindings.handle, self._mask_handle(), self.options, e_out.ref,
                       e_lse.ref, p.stream_handle)
        return out, lse

    def backward(self, q: Any, k: Any, v: Any, out: Any, lse: Any,
                 d_out: Any) -> Tuple[Any, Any, Any]:
        """(dq, dk, dv) from the forward's inputs, out and lse, and the output gradient."""
        p = self.placement
        named = ((q, "q"), (k, "k"), (v, "v"), (out, "out"), (d_out, "d_out"))
        eq, ek, ev, e_out, e_dout = (p.export(x, n, rows=True) for x, n in named)
        e_lse: Exported = p.export(lse, "lse")
        dq, e_dq = p.output(eq.shape, "dq")
        dk, e_dk = p.output(ek.shape, "dk")
        dv, e_dv = p.output(ev.shape, "dv")
        with p.scope():
            _capi.call("tj_attention_backward", self.program.handle, eq.ref, ek.ref, ev.ref,
                       e_out.ref, e_lse.ref, e_dout.ref, self.bindings.handle,
                       self._mask_handle(), self.options, e_dq.ref, e_dk.ref, e_dv.ref,
                       p.stream_handle)
        return dq, dk, dv


def attention(q: Any, k: Any, v: Any, program: Program,
              buffers: Optional[Mapping[str, Any]] = None,
              params: Optional[Mapping[str, Any]] = None, block_mask: Optional[BlockMask] = None,
              scale: Optional[float] = None, return_lse: bool = False,
              deterministic: bool = False) -> Union[Any, Tuple[Any, Any]]:
    """Attention of q, k, v under an attention program.

    buffers, params: values for what the program captures, by name (arrays; ints and floats).
    block_mask: a mask built once with tilejit.block_mask() for these shapes and buffer values
    (None: built for this call). scale: multiplies <q, k> (default 1/sqrt(D)).
    return_lse: also return the log-sum-exp [B, Hq, Sq] (float32). deterministic: GPU backward
    without atomics (the CPU backend always is).

    torch tensors go through tilejit.autograd: when they require grad (with grad mode on) the
    result has a grad_fn computing dq, dk, dv with the library's backward. Captured buffers get
    no gradient. Returns out, or (out, lse)."""
    from . import _torch_dispatch
    if _torch_dispatch.uses_torch(q, k, v):
        from . import autograd
        return autograd.attention(q, k, v, program, buffers, params, block_mask, scale,
                                  return_lse, deterministic)
    out, lse = attention_forward(q, k, v, program, buffers, params, block_mask, scale,
                                 deterministic)
    return (out, lse) if return_lse else out


def attention_forward(q: Any, k: Any, v: Any, program: Program,
                      buffers: Optional[Mapping[str, Any]] = None,
                      params: Optional[Mapping[str, Any]] = None,
                      block_mask: Optional[BlockMask] = None, scale: Optional[float] = None,
                      deterministic: bool = False) -> Tuple[Any, Any]:
    """(out, lse) without autograd: what tilejit.attention computes, for any DLPack arrays."""
    call = AttentionCall(q, program, buffers, params, block_mask, scale, deterministic)
    return call.forward(q, k, v)


def attention_backward(q: Any, k: Any, v: Any, out: Any, lse: Any, d_out: Any, program: Program,
                       buffers: Optional[Mapping[str, Any]] = None,
                       params: Optional[Mapping[str, Any]] = None,
                       block_mask: Optional[BlockMask] = None, scale: Optional[float] = None,
                       deterministic: bool = False) -> Tuple[Any, Any, Any]:
    """(dq, dk, dv) given the forward's inputs, its out and lse, and d_out (shaped like out, in
    q's dtype), without autograd. buffers, params, block_mask and scale must be the forward's."""
    call = AttentionCall(q, program, buffers, params, block_mask, scale, deterministic)
    return call.backward(q, k, v, out, lse, d_out)
