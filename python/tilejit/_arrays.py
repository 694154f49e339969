"""What tilejit needs from the array library its inputs come from: outputs allocated by that
library on the inputs' device, contiguous copies where the C ABI needs them, and the stream and
device to run on (the current torch or cupy stream of the input's device).

The library is told by the input's type (its top-level module): torch, numpy and cupy are known;
any other host array (seen through DLPack) gets numpy outputs and numpy copies.
"""

from __future__ import annotations

import contextlib
from typing import Any, ContextManager, Optional, Sequence

from .errors import UnsupportedError


def library_of(x: Any) -> str:
    """The top-level module of x's type: "torch", "numpy", "cupy", ..."""
    return type(x).__module__.split(".", 1)[0]


def is_torch(x: Any) -> bool:
    return library_of(x) == "torch"


def _module(x: Any) -> Any:
    name = library_of(x)
    if name == "torch":
        import torch
        return torch
    if name == "cupy":
        import cupy
        return cupy
    import numpy
    return numpy


def _on_host(x: Any) -> bool:
    return int(x.__dlpack_device__()[0]) in (1, 3)


def empty(like: Any, shape: Sequence[int], dtype: Optional[str] = None) -> Any:
    """An uninitialised array of `shape`, from like's library and on like's device. dtype: a name
    every library spells the same ("float32", "int32"), or None for like's own dtype."""
    shape = tuple(int(n) for n in shape)
    name = library_of(like)
    if name == "torch":
        import torch
        dt = like.dtype if dtype is None else getattr(torch, dtype)
        return torch.empty(shape, dtype=dt, device=like.device)
    if name == "cupy":
        import cupy
        with like.device:
            return cupy.empty(shape, dtype=like.dtype if dtype is None else dtype)
    import numpy
    if name != "numpy":
        like = _host_numpy(like)
    return numpy.empty(shape, dtype=like.dtype if dtype is None else dtype)


def _host_numpy(x: Any) -> Any:
    """A host array of another library as a numpy view (through DLPack)."""
    import numpy
    if not _on_host(x):
        raise UnsupportedError(
            f"tilejit cannot allocate outputs for a {type(x).__qualname__} from "
            f"{library_of(x)} on a device: pass torch or cupy arrays")
    return numpy.from_dlpack(x)


def contiguous(x: Any, name: str) -> Any:
    """A row-major copy of x in its own library (x itself when it already is one)."""
    lib = library_of(x)
    if lib == "torch":
        return x.contiguous()
    if lib in ("numpy", "cupy"):
        return _module(x).ascontiguousarray(x)
    if _on_host(x):
        import numpy
        return numpy.ascontiguousarray(_host_numpy(x))
    raise UnsupportedError(
        f"tensor '{name}' needs a contiguous last dimension, and tilejit cannot copy a "
        f"{type(x).__qualname__} from {lib} on a device: make it contiguous first")


def cast(x: Any, like: Any) -> Any:
    """x converted to like's dtype (x itself when it already has it)."""
    if x.dtype == like.dtype:
        return x
    if is_torch(x):
        return x.to(like.dtype)
    return x.astype(like.dtype)


def cast_to(x: Any, dtype: str) -> Any:
    """x converted to the dtype named `dtype` ("int32", ...)."""
    if is_torch(x):
        import torch
        return x.to(getattr(torch, dtype))
    return x.astype(dtype)


def dtype_name(x: Any) -> str:
    """x's dtype as its library prints it, without the module prefix ("float32")."""
    return str(x.dtype).rsplit(".", 1)[-1]


def detached(x: Any) -> Any:
    """x without autograd history (torch refuses to export tensors that require grad)."""
    return x.detach() if is_torch(x) else x


def stream_of(x: Any) -> Optional[int]:
    """The stream to run on for device arrays: the current torch (or cupy) stream of x's device,
    as a CUstream handle; None for host arrays and other libraries (the legacy default)."""
    lib = library_of(x)
    if lib == "torch" and x.is_cuda:
        import torch
        return int(torch.cuda.current_stream(x.get_device()).cuda_stream)
    if lib == "cupy":
        import cupy
        with x.device:
            return int(cupy.cuda.get_current_stream().ptr)
    return None


def dlpack_stream(stream: Optional[int]) -> Optional[int]:
    """The DLPack `stream` argument that names `stream` (DLPack spells the legacy default 1)."""
    if stream is None:
        return None
    return stream if stream != 0 else 1


def device_scope(x: Any) -> ContextManager[Any]:
    """Makes x's CUDA device current for the call (the C ABI runs in the current context)."""
    lib = library_of(x)
    if lib == "torch" and x.is_cuda:
        import torch
        return torch.cuda.device(x.device)
    if lib == "cupy":
        return x.device
    return contextlib.nullcontext()


def scalar_shape(x: Any) -> Any:
    """A one-element array as a 0-d array (a loss value)."""
    return x.reshape(())
