"""Programs: attention variants and loss layouts, from the text form or the standard library.

    import tilejit
    doc = tilejit.programs.document_causal()          # the standard library
    p = tilejit.program('''
        attention doc_softcap {
          buffer doc : i32[B, S]
          param cap : f32
          mask = doc[b, q] == doc[b, kv] && q >= kv
          score = cap * tanh(score / cap)
        }''')

A Program is immutable; it is parsed and validated once, and its kernels are compiled on first
use and cached (memory and disk) by the library. One function here per standard program; the
text of each is in the source tree's examples/programs/<name>.tj and in ``Program.text``.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, NamedTuple, Optional, Tuple, Union

from . import _capi
from ._capi import Handle

ATTENTION = "attention"
LOSS = "loss"


class Segment(NamedTuple):
    """One vocabulary segment of a loss program: global ids ``[begin, end)``, and the names its
    weight ``[end - begin, D]`` and bias (None: no bias) are bound by."""

    name: str
    begin: int
    end: int
    weight: str
    bias: Optional[str]

    @property
    def size(self) -> int:
        return self.end - self.begin


class Program:
    """A parsed, validated tilejit program (an attention variant or a loss layout)."""

    def __init__(self, handle: Any) -> None:
        """Wraps a tj_program handle (owned from then on); use program() or the stdlib
        functions of this module instead."""
        self._handle = handle
        kind = ctypes.c_int()
        _capi.call("tj_program_kind_of", handle, ctypes.byref(kind))
        self.kind: str = ATTENTION if kind.value == _capi.PROGRAM_ATTENTION else LOSS
        self.name: str = self._string("tj_program_name")
        self.text: str = self._string("tj_program_text")
        self.hash: str = self._string("tj_program_hash")

    def _string(self, function: str) -> str:
        out = ctypes.c_char_p()
        _capi.call(function, self._handle, ctypes.byref(out))
        return _capi.decode(out.value or b"")

    @property
    def handle(self) -> Any:
        """The tj_program handle (valid while this object lives)."""
        return self._handle

    @property
    def segment_count(self) -> int:
        """A loss program's number of vocabulary segments (InvalidArgumentError otherwise)."""
        count = ctypes.c_int32()
        _capi.call("tj_program_segment_count", self._handle, ctypes.byref(count))
        return count.value

    @property
    def reduction(self) -> str:
        """A loss program's reduction: "mean", "sum" or "none" (InvalidArgumentError for an
        attention program)."""
        value = ctypes.c_int()
        _capi.call("tj_program_reduction", self._handle, ctypes.byref(value))
        return _capi.REDUCTION_NAMES[value.value]

    @property
    def segments(self) -> Tuple[Segment, ...]:
        """A loss program's segments in its order, the order of the weights a loss call takes
        (InvalidArgumentError for an attention program)."""
        segments = []
        for i in range(self.segment_count):
            info = _capi.SegmentInfo()
            _capi.call("tj_program_segment", self._handle, i, ctypes.byref(info))
            segments.append(Segment(_capi.decode(info.name), info.begin, info.end,
                                    _capi.decode(info.weight),
                                    _capi.decode(info.bias) if info.bias else None))
        return tuple(segments)

    def __repr__(self) -> str:
        return f"<tilejit.Program {self.kind} {self.name} {self.hash[:12]}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Program) and other.hash == self.hash

    def __hash__(self) -> int:
        return hash(self.hash)

    def __del__(self) -> None:
        handle, self._handle = getattr(self, "_handle", None), None
        if handle and _capi is not None:
            _capi.destroy("tj_program_destroy", handle)


def program(text: str, filename: Optional[str] = None) -> Program:
    """Parses and validates a program in the text form. `filename` only labels error messages.

    Raises ParseError (with ``file:line:col``) for text the parser rejects and ValidationError
    for a program it accepted but lowering rejects."""
    handle = Handle()
    _capi.call("tj_program_from_text", text.encode("utf-8"),
               filename.encode("utf-8") if filename else None, ctypes.byref(handle))
    return Program(handle)


def load(path: Union[str, "os.PathLike[str]"]) -> Program:
    """Reads and parses a .tj file (error messages carry its path)."""
    with open(path, encoding="utf-8") as f:
        return program(f.read(), os.fspath(path))


def stdlib(name: str) -> Program:
    """A standard program by name (InvalidArgumentError listing the names for an unknown one)."""
    handle = Handle()
    _capi.call("tj_program_from_stdlib", name.encode("utf-8"), ctypes.byref(handle))
    return Program(handle)


# ---- the standard library: one function per program ---------------------------------------


def causal() -> Program:
    """Causal attention: ``mask = q >= kv``."""
    return stdlib("causal")


def sliding_window() -> Program:
    """Sliding-window causal attention; param ``window : i32`` (positions seen, itself
    included)."""
    return stdlib("sliding_window")


def prefix_lm() -> Program:
    """Prefix-LM: bidirectional over the first ``prefix[b]`` positions, causal after; buffer
    ``prefix : i32[B]``."""
    return stdlib("prefix_lm")


def document_causal() -> Program:
    """Document packing: causal attention within a document; buffer ``doc : i32[B, S]`` (the
    document id of each position)."""
    return stdlib("document_causal")


def chunked_causal() -> Program:
    """Causal within fixed chunks, nothing across; param ``chunk : i32``."""
    return stdlib("chunked_causal")


def image_block_or_causal() -> Program:
    """Causal text plus bidirectional attention inside ``[img_start, img_end)``; params
    ``img_start``, ``img_end : i32``."""
    return stdlib("image_block_or_causal")


def alibi_causal() -> Program:
    """Causal attention with ALiBi: ``score + slopes[h] * (kv - q)``; buffer
    ``slopes : f32[H]``."""
    return stdlib("alibi_causal")


def softcap_causal() -> Program:
    """Causal attention with score soft-capping ``cap * tanh(score / cap)``; param
    ``cap : f32``."""
    return stdlib("softcap_causal")


def doc_softcap() -> Program:
    """Document-packed causal attention with soft-capping; buffer ``doc : i32[B, S]``, param
    ``cap : f32``."""
    return stdlib("doc_softcap")


def gemma2_softcap() -> Program:
    """Gemma 2 loss head: one 256000-id segment (weight ``W``), logit soft-capping; param
    ``cap : f32``."""
    return stdlib("gemma2_softcap")


def llama3() -> Program:
    """Llama 3 loss head: cross-entropy over one 128256-id segment (weight ``W``), mean."""
    return stdlib("llama3")


def two_segments() -> Program:
    """A base head ``W_base`` over [0, 151936) plus ``W_extra`` over [152066, 153090); the ids
    between are dead."""
    return stdlib("two_segments")


def distill() -> Program:
    """CE with label smoothing and z-loss blended with KL against a teacher (weights ``W`` and
    ``W_teacher`` over 248320 ids); the KL term runs on the CPU backend only."""
    return stdlib("distill")


STANDARD_PROGRAMS = (
    "causal", "sliding_window", "prefix_lm", "document_causal", "chunked_causal",
    "image_block_or_causal", "alibi_causal", "softcap_causal", "doc_softcap", "gemma2_softcap",
    "llama3", "two_segments", "distill",
)
