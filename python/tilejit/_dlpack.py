"""Arrays in through DLPack: any object with ``__dlpack__`` / ``__dlpack_device__`` (numpy
>= 1.22, torch, cupy, jax, ...) becomes a tj_tensor without a copy.

The DLPack capsule is parsed with ctypes (both the legacy ``dltensor`` and the versioned
``dltensor_versioned`` layouts). An ``Exported`` keeps its capsule, and so the producer's
memory, alive; when it is collected the capsule's destructor releases the producer's tensor.
Strides are in elements, as both DLPack and tj_tensor count them.
"""

from __future__ import annotations

import ctypes
import sys
from ctypes import POINTER, Structure, c_char_p, c_int32, c_int64, c_uint8, c_uint16, c_uint32
from ctypes import c_uint64, c_void_p
from typing import Any, Optional, Tuple

from . import _capi
from .errors import InvalidArgumentError, UnsupportedError

# DLDeviceType values.
KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
_HOST_DEVICES = (KDL_CPU, KDL_CUDA_HOST)
_CUDA_DEVICES = (KDL_CUDA, KDL_CUDA_MANAGED)

# (DLDataTypeCode, bits) -> tj_dtype.
_DTYPES = {
    (2, 32): _capi.DTYPE_F32,
    (2, 16): _capi.DTYPE_F16,
    (4, 16): _capi.DTYPE_BF16,
    (0, 32): _capi.DTYPE_I32,
    (0, 64): _capi.DTYPE_I64,
    (1, 8): _capi.DTYPE_U8,
    (6, 8): _capi.DTYPE_BOOL,
}
_DLPACK_TYPE_NAMES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 5: "complex", 6: "bool"}


class _DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class _DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class _DLTensor(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", _DLDevice),
        ("ndim", c_int32),
        ("dtype", _DLDataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("byte_offset", c_uint64),
    ]


class _DLManagedTensor(Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", c_void_p), ("deleter", c_void_p)]


class _DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class _DLManagedTensorVersioned(Structure):
    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", c_void_p),
        ("deleter", c_void_p),
        ("flags", c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.argtypes = [ctypes.py_object, c_char_p]
_get_pointer.restype = c_void_p
_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.argtypes = [ctypes.py_object]
_get_name.restype = c_char_p


def _dtype_label(code: int, bits: int, lanes: int) -> str:
    label = f"{_DLPACK_TYPE_NAMES.get(code, f'code{code}')}{bits}"
    return label if lanes == 1 else f"{label}x{lanes}"


def device_of(obj: Any, name: str) -> int:
    """_capi.TJ_HOST for host memory, else the CUDA ordinal of `obj`'s memory."""
    if not hasattr(obj, "__dlpack_device__"):
        raise InvalidArgumentError(
            f"tensor '{name}' is a {type(obj).__module__}.{type(obj).__qualname__}, which does "
            f"not speak DLPack (no __dlpack__ / __dlpack_device__)")
    device_type, device_id = obj.__dlpack_device__()
    if int(device_type) in _HOST_DEVICES:
        return _capi.TJ_HOST
    if int(device_type) in _CUDA_DEVICES:
        return int(device_id)
    raise UnsupportedError(
        f"tensor '{name}' is on DLPack device type {int(device_type)}; tilejit takes host "
        f"memory (CPU) and CUDA devices")


def _capsule_of(obj: Any, device: int, stream: Optional[int]) -> Any:
    kwargs = {"stream": stream} if device != _capi.TJ_HOST and stream is not None else {}
    try:
        return obj.__dlpack__(max_version=(1, 0), **kwargs)
    except TypeError:  # a producer that predates DLPack 1.0's max_version
        return obj.__dlpack__(**kwargs)


class _InterfaceAlias:
    """An object numpy turns back into an array over the same memory (__array_interface__)."""

    def __init__(self, interface: dict) -> None:
        self.__array_interface__ = interface


def _dlpack_0x_alias(obj: Any) -> Optional[Tuple[Any, bool]]:
    """numpy before 2.1 speaks DLPack 0.x, which cannot mark an array read-only and has no bool:
    it refuses both. For such a numpy array: (a writable alias of the same memory, strides and
    all (the library only reads its inputs), True when it is bool, then aliased as uint8);
    None for anything else."""
    try:
        import numpy as np
    except ImportError:
        return None
    if not isinstance(obj, np.ndarray):
        return None
    is_bool = obj.dtype == np.bool_
    view = obj.view(np.uint8) if is_bool else obj
    interface = dict(view.__array_interface__)
    interface["data"] = (interface["data"][0], False)  # writable
    alias = np.asarray(_InterfaceAlias(interface))
    return alias, bool(is_bool)


# Set on the first torch tensor seen: (torch, the plain tensor types, {dtype: (tj_dtype, label)}).
_TORCH: Optional[Tuple[Any, Tuple[type, ...], dict]] = None


def _torch_types() -> Optional[Tuple[Any, Tuple[type, ...], dict]]:
    global _TORCH
    if _TORCH is None:
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        _TORCH = (torch, (torch.Tensor, torch.nn.Parameter),
                  {torch.float32: (_capi.DTYPE_F32, "float32"),
                   torch.float16: (_capi.DTYPE_F16, "float16"),
                   torch.bfloat16: (_capi.DTYPE_BF16, "bfloat16"),
                   torch.int32: (_capi.DTYPE_I32, "int32"),
                   torch.int64: (_capi.DTYPE_I64, "int64"),
                   torch.uint8: (_capi.DTYPE_U8, "uint8"),
                   torch.bool: (_capi.DTYPE_BOOL, "bool8")})
    return _TORCH


def _from_torch(exported: "Exported", obj: Any) -> bool:
    """Fills `exported` from a plain strided torch tensor's own attributes, without a DLPack
    capsule (which costs tens of microseconds per tensor in torch's __dlpack__): the same
    pointer, shape, strides and device the capsule would carry. The tensor itself keeps its
    memory alive. False, with nothing filled, for anything else (other libraries, tensor
    subclasses, negative views, dtypes tilejit does not take (complex ones, whose conjugate
    views DLPack refuses, among them), devices other than CUDA and the CPU): those go through
    DLPack, which reports what is wrong with them."""
    known = _torch_types()
    if known is None or type(obj) not in known[1]:
        return False
    torch, _, dtypes = known
    dtype = dtypes.get(obj.dtype)
    if dtype is None or obj.layout is not torch.strided or obj.is_neg():
        return False
    if obj.is_cuda:
        exported.device = obj.get_device()
    elif obj.is_cpu:
        exported.device = _capi.TJ_HOST
    else:
        return False
    exported.capsule_name = b""
    exported.shape = tuple(obj.shape)
    exported.strides = tuple(obj.stride())
    exported.dtype, exported.dtype_label = dtype
    exported._set_tensor(obj.data_ptr(), dtype[0])
    return True


_I64_ARRAYS = [c_int64 * n for n in range(1, 9)]  # the ctypes array types of ranks 0 (one) to 8


class Exported:
    """One array as a tj_tensor. ``tensor`` points at arrays this object owns, and the capsule
    keeps the producer's memory alive: hold the Exported for as long as the library may read or
    write through it."""

    def __init__(self, obj: Any, name: str, stream: Optional[int] = None) -> None:
        self.source = obj
        self.name = name
        if _from_torch(self, obj):
            return
        self.device = device_of(obj, name)
        as_bool = False
        try:
            self.capsule = _capsule_of(obj, self.device, stream)
        except BufferError:
            fallback = _dlpack_0x_alias(obj)
            if fallback is None:
                raise
            self._alias, as_bool = fallback  # kept: the capsule views its memory
            self.capsule = _capsule_of(self._alias, self.device, stream)
        capsule_name = _get_name(self.capsule)
        self.capsule_name: bytes = capsule_name
        if capsule_name == b"dltensor_versioned":
            managed = _DLManagedTensorVersioned.from_address(
                _get_pointer(self.capsule, capsule_name))
        elif capsule_name == b"dltensor":
            managed = _DLManagedTensor.from_address(_get_pointer(self.capsule, capsule_name))
        else:
            raise InvalidArgumentError(
                f"tensor '{name}': __dlpack__ returned a capsule named {capsule_name!r}")
        dl = managed.dl_tensor
        ndim = int(dl.ndim)
        self.shape: Tuple[int, ...] = tuple(dl.shape[i] for i in range(ndim))
        if dl.strides:
            self.strides: Tuple[int, ...] = tuple(dl.strides[i] for i in range(ndim))
        else:
            self.strides = contiguous_strides(self.shape)
        code, bits, lanes = int(dl.dtype.code), int(dl.dtype.bits), int(dl.dtype.lanes)
        if as_bool:
            code = 6  # kDLBool, exported as its uint8 bytes
        self.dtype_label = _dtype_label(code, bits, lanes)
        dtype = _DTYPES.get((code, bits)) if lanes == 1 else None
        if dtype is None:
            raise InvalidArgumentError(
                f"tensor '{name}' has dtype {self.dtype_label}, which tilejit does not take "
                f"(f32, f16, bf16 for values; i32, i64, u8, bool for indices and flags)")
        self.dtype: int = dtype
        data = (dl.data or 0) + int(dl.byte_offset)
        self._set_tensor(data, dtype)

    def _set_tensor(self, data: int, dtype: int) -> None:
        ndim = len(self.shape)
        array = _I64_ARRAYS[ndim - 1] if 0 < ndim <= 8 else c_int64 * max(ndim, 1)
        self._shape = array(*self.shape)
        self._strides = array(*self.strides)
        self.tensor = _capi.Tensor(data or None, dtype, ndim, self._shape, self._strides,
                                   self.device)

    @property
    def ref(self) -> Any:
        """A pointer to the tj_tensor, for the C calls."""
        return ctypes.pointer(self.tensor)

    @property
    def data_pointer(self) -> int:
        return self.tensor.data or 0

    def last_dim_contiguous(self) -> bool:
        return not self.shape or self.strides[-1] == 1 or self.shape[-1] == 1

    def gpu_rows_aligned(self) -> bool:
        """What the GPU kernels need of a matrix or [B, H, S, D] operand: stride-1 rows whose
        starts are 16-byte aligned (strides a multiple of 8 elements, aligned data)."""
        if not self.last_dim_contiguous():
            return False
        outer = all(n <= 1 or s % 8 == 0 for n, s in zip(self.shape[:-1], self.strides[:-1]))
        return outer and self.data_pointer % 16 == 0


def contiguous_strides(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def optional_ref(exported: Optional[Exported]) -> Any:
    """The tj_tensor pointer of an optional argument (NULL when absent)."""
    return exported.ref if exported is not None else None
