"""ctypes declarations of tilejit's C ABI (capi/tilejit.h) and the status check.

Every tj_ function that can fail is called through ``call(name, *args)``, which raises the
TilejitError subclass of the returned tj_status with the library's message verbatim.
"""

from __future__ import annotations

import ctypes
from ctypes import (POINTER, Structure, c_char_p, c_float, c_int, c_int32, c_int64, c_void_p)
from typing import Any

from . import _library
from .errors import ERROR_OF_STATUS, TilejitError

TJ_OK = 0
TJ_HOST = -1
TJ_MAX_NDIM = 8

# tj_dtype codes.
DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_I32, DTYPE_I64, DTYPE_U8, DTYPE_BOOL = range(7)
DTYPE_NAMES = {
    DTYPE_F32: "f32",
    DTYPE_F16: "f16",
    DTYPE_BF16: "bf16",
    DTYPE_I32: "i32",
    DTYPE_I64: "i64",
    DTYPE_U8: "u8",
    DTYPE_BOOL: "bool",
}

PROGRAM_ATTENTION = 1
PROGRAM_LOSS = 2

# tj_reduction values.
REDUCTION_NAMES = {0: "none", 1: "sum", 2: "mean"}


class Tensor(Structure):
    """tj_tensor: a strided view; shape and strides point at int64 arrays the caller keeps."""

    _fields_ = [
        ("data", c_void_p),
        ("dtype", c_int32),
        ("ndim", c_int32),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("device", c_int32),
    ]


class SegmentInfo(Structure):
    """tj_segment_info: a loss program's segment; the strings belong to the program."""

    _fields_ = [
        ("name", c_char_p),
        ("begin", c_int64),
        ("end", c_int64),
        ("weight", c_char_p),
        ("bias", c_char_p),
    ]


class BlockMaskShape(Structure):
    _fields_ = [(n, c_int32) for n in ("batch", "heads", "seq_q", "seq_kv", "block_q", "block_kv")]


class AttentionOptions(Structure):
    _fields_ = [("scale", c_float), ("has_scale", c_int32), ("deterministic", c_int32)]


class LinearCeOptions(Structure):
    _fields_ = [
        ("filter_threshold", c_float),
        ("deterministic", c_int32),
        ("grad_buffer_bytes", c_int64),
        ("vocab_ordering", c_int32),
        ("vocab_order", c_void_p),
    ]


class SegmentTensors(Structure):
    _fields_ = [("weight", POINTER(Tensor)), ("bias", POINTER(Tensor))]


class LinearCeInputs(Structure):
    _fields_ = [
        ("hidden", POINTER(Tensor)),
        ("targets", POINTER(Tensor)),
        ("segments", POINTER(SegmentTensors)),
        ("num_segments", c_int32),
        ("teacher_hidden", POINTER(Tensor)),
    ]


class LinearCeOutputs(Structure):
    _fields_ = [
        ("loss", POINTER(Tensor)),
        ("row_loss", POINTER(Tensor)),
        ("lse", POINTER(Tensor)),
        ("d_weight", POINTER(POINTER(Tensor))),
        ("num_d_weight", c_int32),
    ]


class SegmentGradients(Structure):
    _fields_ = [("d_weight", POINTER(Tensor)), ("d_bias", POINTER(Tensor))]


# Opaque handles travel as void pointers.
Handle = c_void_p
TensorPtr = POINTER(Tensor)

_STATUS_FUNCTIONS = {
    "tj_program_from_text": [c_char_p, c_char_p, POINTER(Handle)],
    "tj_program_from_stdlib": [c_char_p, POINTER(Handle)],
    "tj_program_kind_of": [Handle, POINTER(c_int)],
    "tj_program_name": [Handle, POINTER(c_char_p)],
    "tj_program_text": [Handle, POINTER(c_char_p)],
    "tj_program_hash": [Handle, POINTER(c_char_p)],
    "tj_program_segment_count": [Handle, POINTER(c_int32)],
    "tj_program_reduction": [Handle, POINTER(c_int)],
    "tj_program_segment": [Handle, c_int32, POINTER(SegmentInfo)],
    "tj_bindings_create": [POINTER(Handle)],
    "tj_bindings_set_buffer": [Handle, c_char_p, TensorPtr],
    "tj_bindings_set_f32": [Handle, c_char_p, c_float],
    "tj_bindings_set_i32": [Handle, c_char_p, c_int32],
    "tj_block_mask_create": [Handle, Handle, POINTER(BlockMaskShape), c_void_p, POINTER(Handle)],
    "tj_block_mask_counts": [Handle, POINTER(c_int64), POINTER(c_int64), POINTER(c_int64)],
    "tj_block_mask_get_shape": [Handle, POINTER(BlockMaskShape)],
    "tj_attention_forward": [
        Handle, TensorPtr, TensorPtr, TensorPtr, Handle, Handle, POINTER(AttentionOptions),
        TensorPtr, TensorPtr, c_void_p,
    ],
    "tj_attention_backward": [
        Handle, TensorPtr, TensorPtr, TensorPtr, TensorPtr, TensorPtr, TensorPtr, Handle, Handle,
        POINTER(AttentionOptions), TensorPtr, TensorPtr, TensorPtr, c_void_p,
    ],
    "tj_linear_ce_forward": [
        Handle, POINTER(LinearCeInputs), Handle, POINTER(LinearCeOptions),
        POINTER(LinearCeOutputs), c_void_p, POINTER(Handle),
    ],
    "tj_linear_ce_backward": [
        Handle, TensorPtr, TensorPtr, POINTER(SegmentGradients), c_int32, c_void_p,
    ],
    "tj_linear_ce_state_rows": [Handle, POINTER(c_int64), POINTER(c_int64)],
    "tj_vocab_order_create": [c_int32, POINTER(Handle)],
    "tj_vocab_order_create_fixed": [
        POINTER(POINTER(c_int32)), POINTER(c_int64), c_int32, POINTER(Handle),
    ],
    "tj_vocab_order_stats": [
        Handle, POINTER(c_int64), POINTER(c_int64), POINTER(c_int64), POINTER(ctypes.c_double),
    ],
}

_DESTROY_FUNCTIONS = (
    "tj_program_destroy",
    "tj_bindings_destroy",
    "tj_block_mask_destroy",
    "tj_linear_ce_state_destroy",
    "tj_vocab_order_destroy",
)


def _function(lib: ctypes.CDLL, name: str) -> Any:
    try:
        return getattr(lib, name)
    except AttributeError:
        raise OSError(
            f"{_library.loaded_path()} has no {name}: it is older than this tilejit package "
            f"(rebuild the CMake target tilejit_c, or set ${_library.LIBRARY_ENV} to a current "
            f"build's library)") from None


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    for name, argtypes in _STATUS_FUNCTIONS.items():
        fn = _function(lib, name)
        fn.argtypes = argtypes
        fn.restype = c_int
    for name in _DESTROY_FUNCTIONS:
        fn = getattr(lib, name)
        fn.argtypes = [Handle]
        fn.restype = None
    for name in ("tj_last_error", "tj_version"):
        getattr(lib, name).argtypes = []
        getattr(lib, name).restype = c_char_p
    lib.tj_status_name.argtypes = [c_int]
    lib.tj_status_name.restype = c_char_p
    lib.tj_gpu_available.argtypes = []
    lib.tj_gpu_available.restype = c_int
    lib.tj_workspace_pool_held.argtypes = [POINTER(ctypes.c_uint64)]
    lib.tj_workspace_pool_held.restype = c_int
    lib.tj_workspace_pool_trim.argtypes = []
    lib.tj_workspace_pool_trim.restype = c_int
    lib.tj_linear_ce_options_init.argtypes = [POINTER(LinearCeOptions)]
    lib.tj_linear_ce_options_init.restype = None
    return lib


lib = _declare(_library.load())


def decode(text: bytes) -> str:
    return text.decode("utf-8", errors="replace")


def call(name: str, *args: Any) -> None:
    """Calls the tj_ function `name`; raises its status's TilejitError subclass on failure."""
    status = getattr(lib, name)(*args)
    if status == TJ_OK:
        return
    message = decode(lib.tj_last_error())
    error = ERROR_OF_STATUS.get(status, TilejitError)
    raise error(message)


def destroy(name: str, handle: Any) -> None:
    """Frees a handle with tj_<kind>_destroy (ignores None, as the C functions ignore NULL)."""
    if handle:
        getattr(lib, name)(handle)


def version() -> str:
    """The library's version, e.g. ``"0.1.0"``."""
    return decode(lib.tj_version())


def gpu_available() -> bool:
    """True when a CUDA driver and at least one device are usable by the library."""
    return bool(lib.tj_gpu_available())


def workspace_pool_held_bytes() -> int:
    """Bytes the fused loss's GPU workspace pool holds from the device (0 without a GPU): what
    live loss states use and what it keeps for the next call. ``TILEJIT_WORKSPACE_KEEP_MB`` caps
    what it keeps at synchronisations; see ``tilejit.trim_workspace_pool``. The pool's memory is not
    torch's: torch's allocator cannot reuse it until it is handed back."""
    held = ctypes.c_uint64(0)
    call("tj_workspace_pool_held", ctypes.byref(held))
    return int(held.value)


