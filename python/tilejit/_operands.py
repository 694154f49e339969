"""Where a call runs, and its tensors as tj_tensors placed there.

A ``Placement`` follows the call's primary input (q, or the hidden states): its device, the
current stream of that device (torch or cupy), and its array library, which allocates the
outputs. Inputs are passed with their own strides; a contiguous copy is made only where the C
ABI requires one (a last dimension that is not contiguous, or on the GPU rows that are not
16-byte aligned).
"""

from __future__ import annotations

from typing import Any, ContextManager, Optional, Sequence, Tuple

from . import _arrays, _dlpack


class Placement:
    """The device, stream and array library of one call, taken from `primary`."""

    def __init__(self, primary: Any, name: str) -> None:
        self.like = primary
        self.device = _dlpack.device_of(primary, name)
        self.stream: Optional[int] = _arrays.stream_of(primary) if self.on_gpu else None

    def refresh_stream(self) -> None:
        """Takes the current stream again (a backward runs on the stream autograd gives it)."""
        if self.on_gpu:
            self.stream = _arrays.stream_of(self.like)

    @property
    def on_gpu(self) -> bool:
        return self.device >= 0

    @property
    def stream_handle(self) -> Optional[int]:
        """The CUstream for the C call (None: NULL, the legacy default stream or the CPU)."""
        return self.stream or None

    def scope(self) -> ContextManager[Any]:
        """Makes the call's CUDA device current while the C call runs."""
        return _arrays.device_scope(self.like)

    def export(self, x: Any, name: str, rows: bool = False) -> _dlpack.Exported:
        """x as a tj_tensor. rows: the C ABI needs a contiguous last dimension (and on the GPU
        16-byte aligned rows); x is copied to a contiguous layout only when it has neither."""
        x = _arrays.detached(x)
        exported = _dlpack.Exported(x, name, _arrays.dlpack_stream(self.stream))
        if rows and not self._layout_ok(exported):
            exported = _dlpack.Exported(_arrays.contiguous(x, name), name,
                                        _arrays.dlpack_stream(self.stream))
        return exported

    def output(self, shape: Sequence[int], name: str,
               dtype: Optional[str] = None) -> Tuple[Any, _dlpack.Exported]:
        """A new array from the primary input's library on its device (dtype None: the primary
        input's), and its tj_tensor."""
        array = _arrays.empty(self.like, shape, dtype)
        return array, _dlpack.Exported(array, name, _arrays.dlpack_stream(self.stream))

    def output_like(self, like: Any, name: str,
                    dtype: Optional[str] = None) -> Tuple[Any, _dlpack.Exported]:
        """As output(), shaped like `like` (with like's dtype when dtype is None)."""
        array = _arrays.empty(like, tuple(like.shape), dtype)
        return array, _dlpack.Exported(array, name, _arrays.dlpack_stream(self.stream))

    def _layout_ok(self, exported: _dlpack.Exported) -> bool:
        if exported.device >= 0:
            return exported.gpu_rows_aligned()
        return exported.last_dim_contiguous()
