"""A vocabulary order kept across steps for the fused loss's GPU gradient filtering."""

from __future__ import annotations

import ctypes
from typing import Any, Dict, Sequence, Union

from . import _capi
from .errors import InvalidArgumentError

TJ_VOCAB_NATURAL, TJ_VOCAB_AVERAGE_LOGIT, TJ_VOCAB_STATE = 0, 1, 2


class VocabOrder:
    """Each segment's ids ordered by their average logit over a forward's rows, built on the
    first forward that uses it and rebuilt every ``refresh_every`` forwards. The likely ids then
    share tiles, and the GPU backward skips the tiles whose probabilities are all below the
    filtering threshold (on a trained head's data, 70-80% of them). An order that leaves too many
    tiles alive pauses filtering until its next rebuild. Pass one object to every step's
    ``linear_cross_entropy(..., vocab_order=order)``; the CPU executor visits every id."""

    def __init__(self, refresh_every: int = 8) -> None:
        self._handle = _capi.Handle()
        _capi.call("tj_vocab_order_create", int(refresh_every), ctypes.byref(self._handle))

    @classmethod
    def fixed(cls, rows_in_order: Sequence[Any]) -> "VocabOrder":
        """The caller's order, never rebuilt: per segment of the program, its weight rows in
        visiting order (a permutation of its rows; a list or a host array), e.g. the ids by their
        frequency in the training data: no pre-pass, ordered from the first step."""
        rows = [[int(v) for v in (r.tolist() if hasattr(r, "tolist") else r)]
                for r in rows_in_order]
        arrays = [(ctypes.c_int32 * len(r))(*r) for r in rows]
        pointers = (ctypes.POINTER(ctypes.c_int32) * max(len(arrays), 1))(
            *[ctypes.cast(a, ctypes.POINTER(ctypes.c_int32)) for a in arrays])
        sizes = (ctypes.c_int64 * max(len(rows), 1))(*[len(r) for r in rows])
        order = cls.__new__(cls)
        order._handle = _capi.Handle()
        _capi.call("tj_vocab_order_create_fixed", pointers, sizes, len(rows),
                   ctypes.byref(order._handle))
        return order

    @property
    def handle(self) -> Any:
        return self._handle

    def stats(self) -> Dict[str, float]:
        """forwards (that used it), ordered_forwards (of which filtered in the order), rebuilds
        (pre-pass runs) and last_survival (the last backward's fraction of visited tiles; -1
        before any)."""
        forwards, ordered, rebuilds = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
        survival = ctypes.c_double()
        _capi.call("tj_vocab_order_stats", self._handle, ctypes.byref(forwards),
                   ctypes.byref(ordered), ctypes.byref(rebuilds), ctypes.byref(survival))
        return {"forwards": forwards.value, "ordered_forwards": ordered.value,
                "rebuilds": rebuilds.value, "last_survival": survival.value}

    def __del__(self) -> None:
        handle, self._handle = getattr(self, "_handle", None), None
        if handle and _capi is not None:
            _capi.destroy("tj_vocab_order_destroy", handle)


VocabOrderArg = Union[None, str, VocabOrder]


def set_vocab_order(options: Any, vocab_order: VocabOrderArg) -> None:
    """Fills a tj_linear_ce_options' vocab_ordering / vocab_order: None (natural order),
    "average_logit" (a pre-pass on each forward's rows) or a VocabOrder (kept across steps)."""
    if vocab_order is None:
        options.vocab_ordering = TJ_VOCAB_NATURAL
    elif isinstance(vocab_order, VocabOrder):
        options.vocab_ordering = TJ_VOCAB_STATE
        options.vocab_order = vocab_order.handle
    elif vocab_order == "average_logit":
        options.vocab_ordering = TJ_VOCAB_AVERAGE_LOGIT
    else:
        raise InvalidArgumentError(
            f"vocab_order is {vocab_order!r}: None, 'average_logit' or a tilejit.VocabOrder")
