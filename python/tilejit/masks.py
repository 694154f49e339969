"""Block masks: which (q tile, kv tile) pairs attention visits, built once from a program's mask
by mask analysis (no element of the mask is evaluated) and reusable across layers and calls with
the same shapes and buffer values.
"""

from __future__ import annotations

import contextlib
import ctypes
from typing import Any, Mapping, NamedTuple, Optional

from . import _capi
from ._bindings import Bindings
from ._capi import Handle
from ._operands import Placement
from .programs import Program


class BlockMaskCounts(NamedTuple):
    """Tiles that are full (mask skipped), partial (mask evaluated) and empty (never visited)."""

    full: int
    partial: int
    empty: int


class BlockMaskShape(NamedTuple):
    """The mask's extents (batch or heads 1 where the mask does not read b or h) and tiles."""

    batch: int
    heads: int
    seq_q: int
    seq_kv: int
    block_q: int
    block_kv: int


class BlockMask:
    """A built block mask (owns its tj_block_mask and keeps its bindings alive)."""

    def __init__(self, handle: Any, program: Program, bindings: Bindings) -> None:
        self._handle = handle
        self.program = program
        self._bindings = bindings

    @property
    def handle(self) -> Any:
        return self._handle

    @property
    def counts(self) -> BlockMaskCounts:
        full, partial, empty = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
        _capi.call("tj_block_mask_counts", self._handle, ctypes.byref(full),
                   ctypes.byref(partial), ctypes.byref(empty))
        return BlockMaskCounts(full.value, partial.value, empty.value)

    @property
    def shape(self) -> BlockMaskShape:
        s = _capi.BlockMaskShape()
        _capi.call("tj_block_mask_get_shape", self._handle, ctypes.byref(s))
        return BlockMaskShape(s.batch, s.heads, s.seq_q, s.seq_kv, s.block_q, s.block_kv)

    def __repr__(self) -> str:
        c = self.counts
        return (f"<tilejit.BlockMask {self.program.name} {tuple(self.shape)}: {c.full} full, "
                f"{c.partial} partial, {c.empty} empty>")

    def __del__(self) -> None:
        handle, self._handle = getattr(self, "_handle", None), None
        if handle and _capi is not None:
            _capi.destroy("tj_block_mask_destroy", handle)


def block_mask(program: Program, batch: int, heads: int, seq_q: int, seq_kv: int,
               buffers: Optional[Mapping[str, Any]] = None,
               params: Optional[Mapping[str, Any]] = None, block_q: int = 0,
               block_kv: int = 0) -> BlockMask:
    """Builds the block mask of an attention program for tensors of batch B, Hq heads and the
    given sequence lengths.

    buffers and params bind what the mask captures (by name). Buffers in host memory are
    analysed on the CPU; buffers on a GPU are analysed there, on the current stream of their
    device, which the call synchronises. block_q, block_kv: tile sizes; 0 picks the GPU
    kernels' 128 x 64 (the CPU backend takes any, and a mask passed to a GPU call must use the
    defaults)."""
    first = next(iter((buffers or {}).values()), None)
    placement = Placement(first, "buffer") if first is not None else None
    bindings = Bindings(buffers, params, placement)
    shape = _capi.BlockMaskShape(batch, heads, seq_q, seq_kv, block_q, block_kv)
    handle = Handle()
    stream = placement.stream_handle if placement is not None else None
    scope = placement.scope() if placement is not None else contextlib.nullcontext()
    with scope:
        _capi.call("tj_block_mask_create", program.handle, bindings.handle, ctypes.byref(shape),
                   stream, ctypes.byref(handle))
    return BlockMask(handle, program, bindings)

