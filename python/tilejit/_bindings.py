"""A program's captured buffers and params as a tj_bindings handle.

Buffers are arrays (any DLPack producer) bound by name, with their own strides; params are
Python numbers: an int binds an i32 (an f32 param takes it too), a float an f32. The library
checks them against the program at each call (an unbound, unknown or mistyped name is an error
naming it). The Bindings keep the buffers' exports alive as long as the handle lives.
"""

from __future__ import annotations

import ctypes
import numbers
from typing import Any, Dict, List, Mapping, Optional

from . import _capi, _dlpack
from ._capi import Handle
from ._operands import Placement
from .errors import InvalidArgumentError

_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1


def _scalar(name: str, value: Any) -> Any:
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()  # numpy scalars, 0-d arrays and tensors
    if isinstance(value, (bool, numbers.Integral)):
        value = int(value)
        if not _I32_MIN <= value <= _I32_MAX:
            raise InvalidArgumentError(f"param '{name}' = {value} does not fit in i32")
        return value
    if isinstance(value, numbers.Real):
        return float(value)
    raise InvalidArgumentError(
        f"param '{name}' must be an int or a float, got {type(value).__qualname__}")


class Bindings:
    """A tj_bindings handle holding `buffers` and `params` (owned; freed with this object)."""

    def __init__(self, buffers: Optional[Mapping[str, Any]], params: Optional[Mapping[str, Any]],
                 placement: Optional[Placement] = None) -> None:
        self._handle = Handle()
        _capi.call("tj_bindings_create", ctypes.byref(self._handle))
        self.buffers: Dict[str, Any] = dict(buffers or {})
        self.params: Dict[str, Any] = dict(params or {})
        self._kept: List[_dlpack.Exported] = []
        for name, value in self.buffers.items():
            exported = (placement.export(value, name) if placement is not None else
                        _dlpack.Exported(value, name))
            self._kept.append(exported)
            _capi.call("tj_bindings_set_buffer", self._handle, name.encode("utf-8"),
                       exported.ref)
        for name, value in self.params.items():
            scalar = _scalar(name, value)
            setter = "tj_bindings_set_i32" if isinstance(scalar, int) else "tj_bindings_set_f32"
            _capi.call(setter, self._handle, name.encode("utf-8"), scalar)

    @property
    def handle(self) -> Any:
        return self._handle

    def __del__(self) -> None:
        handle, self._handle = getattr(self, "_handle", None), None
        if handle and _capi is not None:
            _capi.destroy("tj_bindings_destroy", handle)
