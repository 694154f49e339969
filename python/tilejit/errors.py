"""tilejit's exceptions: one class per tj_status of the C ABI, all under TilejitError.

The message is the library's own, verbatim: it names the C function, the program and the
tensor, buffer or param at fault (a parse error reads ``file:line:col: ...`` and shows the
line). ``status`` holds the tj_status name (``"TJ_ERR_PARSE"``, ...).
"""

from __future__ import annotations

from typing import Dict, Type


class TilejitError(Exception):
    """Base of every error tilejit raises; ``status`` is the C ABI's tj_status name."""

    status: str = "TJ_ERR_UNKNOWN"


class InvalidArgumentError(TilejitError, ValueError):
    """A bad tensor, binding, option or handle (TJ_ERR_INVALID_ARGUMENT)."""

    status = "TJ_ERR_INVALID_ARGUMENT"


class ParseError(TilejitError, ValueError):
    """Program text rejected: syntax, names, types or layout (TJ_ERR_PARSE)."""

    status = "TJ_ERR_PARSE"


class ValidationError(TilejitError, ValueError):
    """A program the parser accepted but lowering rejects (TJ_ERR_VALIDATION)."""

    status = "TJ_ERR_VALIDATION"


class CompileError(TilejitError):
    """NVRTC rejected a generated kernel; the message holds its log (TJ_ERR_COMPILE)."""

    status = "TJ_ERR_COMPILE"


class CudaError(TilejitError):
    """A CUDA driver call failed (TJ_ERR_CUDA)."""

    status = "TJ_ERR_CUDA"


class UnsupportedError(TilejitError):
    """Valid, but not supported (yet) where it would run (TJ_ERR_UNSUPPORTED)."""

    status = "TJ_ERR_UNSUPPORTED"


class OfflineMissError(TilejitError):
    """TILEJIT_OFFLINE=1 and the kernel is not in the cache bundle (TJ_ERR_OFFLINE_MISS)."""

    status = "TJ_ERR_OFFLINE_MISS"


class BundleMismatchError(TilejitError):
    """The cache bundle was built by another tilejit or NVRTC (TJ_ERR_BUNDLE_MISMATCH)."""

    status = "TJ_ERR_BUNDLE_MISMATCH"


class NoDeviceError(TilejitError):
    """Device tensors, but no usable GPU (TJ_ERR_NO_DEVICE)."""

    status = "TJ_ERR_NO_DEVICE"


class OutOfMemoryError(TilejitError, MemoryError):
    """An allocation failed (TJ_ERR_OUT_OF_MEMORY)."""

    status = "TJ_ERR_OUT_OF_MEMORY"


class InternalError(TilejitError):
    """A broken invariant inside tilejit: please report it (TJ_ERR_INTERNAL)."""

    status = "TJ_ERR_INTERNAL"


# tj_status values (capi/tilejit.h) to classes.
ERROR_OF_STATUS: Dict[int, Type[TilejitError]] = {
    1: InvalidArgumentError,
    2: ParseError,
    3: ValidationError,
    4: CompileError,
    5: CudaError,
    6: UnsupportedError,
    7: OfflineMissError,
    8: BundleMismatchError,
    9: NoDeviceError,
    10: OutOfMemoryError,
    11: InternalError,
}
