"""Fused linear cross-entropy over a loss program's vocabulary layout, without materialising
the [N, V] logits.

Inputs: hidden states e ``[N, D]``; one entry per segment of the program, in its order: the
weight ``[V_s, D]``, or a pair ``(weight, bias [V_s])`` for a segment declared with a bias;
targets ``[N]`` global ids (or the program's ignore_index), int32 or (host) int64. The program
says the terms (logit mod, label smoothing, z-loss, KL) and the reduction.

Host memory runs on the CPU backend (f32, bf16 or f16). CUDA memory runs the GPU kernels (bf16
or f16, D a multiple of 8; int64 targets are converted to int32); the forward synchronises its
stream once (the kept-row count sizes the backward's grids) and the gradients come back from
the library with d_e and the biases' gradients in float32, the weights' in their own 16-bit
dtype (the float32 result rounded once to nearest even, as a cast would: half the memory of
float32 ones); autograd converts the rest to the inputs' dtypes.
"""

from __future__ import annotations

import ctypes
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

from . import _arrays, _capi, _deferred_free
from ._bindings import Bindings
from ._capi import Handle
from ._dlpack import Exported, optional_ref
from ._operands import Placement
from .errors import InvalidArgumentError
from .programs import Program, Segment
from .vocab import VocabOrderArg, set_vocab_order

SegmentArg = Union[Any, Tuple[Any, Optional[Any]]]


def _split_segment(i: int, segment: SegmentArg) -> Tuple[Any, Optional[Any]]:
    if isinstance(segment, (tuple, list)):
        if len(segment) != 2:
            raise InvalidArgumentError(
                f"segments[{i}] must be a weight or a (weight, bias) pair, got {len(segment)} "
                f"items")
        return segment[0], segment[1]
    return segment, None


class LinearCrossEntropyForward:
    """The forward of a loss program on given tensors: its outputs (``loss``, ``row_loss``,
    ``lse``) and the saved state its backward needs. The state references the inputs, which
    this object keeps alive; it is freed with this object (on the GPU once the stream has
    finished with it)."""

    def __init__(self, e: Any, segments: Sequence[SegmentArg], targets: Any, program: Program,
                 buffers: Optional[Mapping[str, Any]] = None,
                 params: Optional[Mapping[str, Any]] = None,
                 filter_threshold: Optional[float] = None, teacher_hidden: Any = None,
                 grad_buffer_bytes: int = 0, vocab_order: VocabOrderArg = None,
                 weight_grads_at_forward: bool = False) -> None:
        self.program = program
        self.placement = p = Placement(e, "hidden")
        self.bindings = Bindings(buffers, params, p)
        self._state = Handle()
        pairs = [_split_segment(i, s) for i, s in enumerate(segments)]

        if p.on_gpu and _arrays.dtype_name(targets) == "int64":
            targets = _arrays.cast_to(targets, "int32")
        self._hidden = p.export(e, "hidden", rows=True)
        self._targets = p.export(targets, "targets")
        self._teacher = (p.export(teacher_hidden, "teacher_hidden", rows=True)
                         if teacher_hidden is not None else None)
        self._segments: List[Tuple[Exported, Optional[Exported]]] = []
        for i, (w, b) in enumerate(pairs):
            ew = p.export(w, f"segments[{i}].weight", rows=True)
            eb = p.export(b, f"segments[{i}].bias") if b is not None else None
            self._segments.append((ew, eb))
        seg_array = (_capi.SegmentTensors * max(len(pairs), 1))(
            *[_capi.SegmentTensors(ew.ref, optional_ref(eb)) for ew, eb in self._segments])
        inputs = _capi.LinearCeInputs(self._hidden.ref, self._targets.ref,
                                      seg_array if pairs else None, len(pairs),
                                      optional_ref(self._teacher))

        rows = self._hidden.shape[0] if self._hidden.shape else 0
        self._loss, e_loss = p.output((1,), "loss", "float32")
        self.row_loss, e_rows = p.output((rows,), "row_loss", "float32")
        self.lse, e_lse = p.output((rows,), "lse", "float32")
        outputs = _capi.LinearCeOutputs(e_loss.ref, e_rows.ref, e_lse.ref, None, 0)
        # The weights' gradients allocated now and given to the forward (on the GPU it builds a
        # vocabulary order's position-order weight copy in them rather than in its own scratch);
        # the backward writes into them.
        self._early_d_weight: List[Tuple[Any, Exported]] = []
        if weight_grads_at_forward and p.on_gpu:
            for i, segment in enumerate(program.segments):
                weight, _ = self._segment_sources(i, segment)
                self._early_d_weight.append(p.output_like(weight, f"d_segments[{i}].weight", None))
            early = (_capi.TensorPtr * len(self._early_d_weight))(
                *[e_dw.ref for _, e_dw in self._early_d_weight])
            outputs.d_weight = early
            outputs.num_d_weight = len(self._early_d_weight)

        options = _capi.LinearCeOptions()
        _capi.lib.tj_linear_ce_options_init(ctypes.byref(options))
        if filter_threshold is not None:
            options.filter_threshold = float(filter_threshold)
        if grad_buffer_bytes:
            options.grad_buffer_bytes = int(grad_buffer_bytes)
        set_vocab_order(options, vocab_order)
        self._vocab_order = vocab_order  # alive while the state may use it

        with p.scope():
            _capi.call("tj_linear_ce_forward", program.handle, ctypes.byref(inputs),
                       self.bindings.handle, ctypes.byref(options), ctypes.byref(outputs),
                       p.stream_handle, ctypes.byref(self._state))
        # A loss program (the call checked it): its reduction and layout, from the library.
        self.reduction: str = program.reduction
        self._layout = program.segments

    @property
    def loss(self) -> Any:
        """The reduced loss as a 0-d float32 array; for reduction none, the rows' losses [N]."""
        if self.reduction == "none":
            return self.row_loss
        return _arrays.scalar_shape(self._loss)

    @property
    def rows(self) -> Tuple[int, int]:
        """(rows, kept rows): rows in the forward, and those that were not ignore_index."""
        rows, kept = ctypes.c_int64(), ctypes.c_int64()
        _capi.call("tj_linear_ce_state_rows", self._state, ctypes.byref(rows), ctypes.byref(kept))
        return rows.value, kept.value

    def backward(self, grad_loss: Any = None) -> Tuple[Any, List[Tuple[Any, Optional[Any]]]]:
        """(d_e, [(d_weight, d_bias or None) per segment of the program]).

        grad_loss: dL/dloss, a number or one-element array for reductions mean and sum, an [N]
        array for none (None: 1 everywhere). On the host the gradients take the inputs' dtypes;
        on the GPU d_e and the biases' are float32 and the weights' take the weights' dtype. A
        weight or bias bound by name in ``buffers`` rather than passed in ``segments`` gets its
        gradient too (the library computes every segment's)."""
        p = self.placement
        e_grad = self._grad_loss(grad_loss)
        # The forward's gradient buffers serve the first backward only and are handed over: a
        # later one gets its own, and nothing here keeps a returned gradient referenced (an
        # autograd engine then takes it as .grad rather than copying it).
        early, self._early_d_weight = self._early_d_weight, []
        grad_dtype = "float32" if p.on_gpu else None  # the GPU kernels write f32 dE and dbias
        d_e, e_de = p.output_like(self._hidden.source, "d_hidden", grad_dtype)
        grads: List[Tuple[Any, Optional[Any]]] = []
        exported: List[Tuple[Exported, Optional[Exported]]] = []
        for i, segment in enumerate(self._layout):
            weight, bias = self._segment_sources(i, segment)
            # dC in the weights' (= E's) 16-bit dtype on the GPU: rounded once by the kernels
            dw, e_dw = (early[i] if early else
                        p.output_like(weight, f"d_segments[{i}].weight", None))
            db, e_db = (p.output_like(bias, f"d_segments[{i}].bias", grad_dtype)
                        if bias is not None else (None, None))
            grads.append((dw, db))
            exported.append((e_dw, e_db))
        seg_grads = (_capi.SegmentGradients * max(len(exported), 1))(
            *[_capi.SegmentGradients(e_dw.ref, optional_ref(e_db)) for e_dw, e_db in exported])
        with p.scope():
            _capi.call("tj_linear_ce_backward", self._state, e_grad.ref, e_de.ref,
                       seg_grads if exported else None, len(exported), p.stream_handle)
        return d_e, grads

    def _segment_sources(self, i: int, segment: Segment) -> Tuple[Any, Optional[Any]]:
        """Segment i's weight and bias (None when the program gives it none) as the forward
        took them: from ``segments``, else from the buffers under the program's names."""
        given = self._segments[i] if self._segments else None
        weight = given[0].source if given else self.bindings.buffers[segment.weight]
        if segment.bias is None:
            return weight, None
        if given and given[1] is not None:
            return weight, given[1].source
        return weight, self.bindings.buffers[segment.bias]

    def _grad_loss(self, grad_loss: Any) -> Exported:
        p = self.placement
        rows = self._hidden.shape[0] if self._hidden.shape else 0
        shape = (rows,) if self.reduction == "none" else (1,)
        if grad_loss is None or isinstance(grad_loss, (int, float)):
            array, exported = p.output(shape, "grad_loss", "float32")
            array[...] = 1.0 if grad_loss is None else float(grad_loss)
            return exported
        grad = _arrays.cast_to(grad_loss.reshape(shape), "float32")
        return p.export(grad, "grad_loss", rows=True)  # an expanded gradient is copied

    def __del__(self) -> None:
        state, self._state = getattr(self, "_state", None), None
        if state and _capi is not None:
            # The state holds views of the inputs: keep them until it is freed.
            keep = (self.__dict__.copy(),)
            _deferred_free.release(self.placement,
                                   lambda: (_capi.destroy("tj_linear_ce_state_destroy", state),
                                            keep))


def linear_cross_entropy_forward(e: Any, segments: Sequence[SegmentArg], targets: Any,
                                 program: Program, buffers: Optional[Mapping[str, Any]] = None,
                                 params: Optional[Mapping[str, Any]] = None,
                                 filter_threshold: Optional[float] = None,
                                 teacher_hidden: Any = None,
                                 grad_buffer_bytes: int = 0,
                                 vocab_order: VocabOrderArg = None) -> LinearCrossEntropyForward:
    """Runs the forward without autograd and returns it (outputs and ``backward()``), for any
    DLPack arrays."""
    return LinearCrossEntropyForward(e, segments, targets, program, buffers, params,
                                     filter_threshold, teacher_hidden, grad_buffer_bytes,
                                     vocab_order)


def linear_cross_entropy(e: Any, segments: Sequence[SegmentArg], targets: Any, program: Program,
                         buffers: Optional[Mapping[str, Any]] = None,
                         params: Optional[Mapping[str, Any]] = None,
                         filter_threshold: Optional[float] = None, return_rows: bool = False,
                         teacher_hidden: Any = None, grad_buffer_bytes: int = 0,
                         vocab_order: VocabOrderArg = None) -> Union[Any, Tuple[Any, Any, Any]]:
    """The loss of a loss program: ``loss(e @ W_s^T + b_s over the layout, targets)``.

    segments: per segment of the program, its weight or (weight, bias). buffers, params: what
    the program captures (and, for a KL term, the teacher layout's weights by name).
    filter_threshold: backward gradient filtering (None: the dtype's default, exact for f32; 0:
    exact). teacher_hidden: [N, D_t] for a program with a KL term (CPU backend).
    grad_buffer_bytes: bound on the GPU backward's staging buffer (0: the default).
    vocab_order: the order a filtering GPU backward visits each segment's ids in: None (natural),
    "average_logit" (a pre-pass on this call's rows) or a tilejit.VocabOrder kept across steps
    (the fast path on a trained head: most tiles are skipped). Results do not depend on it beyond
    fp32 summation order and which sub-threshold entries filtering drops.

    Returns the loss (0-d float32 for reductions mean and sum, the rows' losses [N] for none);
    with return_rows, (loss, row_loss [N], lse [N]) (0 on ignored rows). torch tensors go
    through tilejit.autograd: when they require grad, the loss has a grad_fn giving gradients
    for e and every segment's weight and bias (row_loss and lse are then constants)."""
    from . import _torch_dispatch
    if _torch_dispatch.uses_torch(e):
        from . import autograd
        return autograd.linear_cross_entropy(e, segments, targets, program, buffers, params,
                                             filter_threshold, return_rows, teacher_hidden,
                                             grad_buffer_bytes, vocab_order)
    run = LinearCrossEntropyForward(e, segments, targets, program, buffers, params,
                                    filter_threshold, teacher_hidden, grad_buffer_bytes,
                                    vocab_order)
    return (run.loss, run.row_loss, run.lse) if return_rows else run.loss
