"""Frees C handles whose GPU work may still be queued: a handle released on a device is freed
only once its stream has passed the point where it was released (an event recorded there), so
releasing never waits on the GPU. Host handles are freed at once.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable, List, Optional, Tuple

from . import _capi
from ._operands import Placement

_pending: List[Tuple[Any, Callable[[], None]]] = []
_lock = threading.Lock()  # handles are released from __del__, on whichever thread collects


def _event_after(placement: Placement) -> Optional[Any]:
    """An event recorded on the stream the placement's last call ran on (None for libraries
    other than torch and cupy)."""
    like, stream = placement.like, placement.stream or 0
    lib = type(like).__module__.split(".", 1)[0]
    if lib == "torch":
        import torch
        event = torch.cuda.Event()
        if stream:
            event.record(torch.cuda.ExternalStream(stream, device=like.device))
        else:
            event.record(torch.cuda.default_stream(like.device))
        return event
    if lib == "cupy":
        import cupy
        with like.device:
            event = cupy.cuda.Event()
            event.record(cupy.cuda.ExternalStream(stream))
            return event
    return None


def collect() -> None:
    """Frees every pending handle whose event has completed."""
    done, waiting = [], []
    with _lock:
        for item in _pending:
            (done if item[0].query() else waiting).append(item)
        _pending[:] = waiting
    for _, free in done:
        free()


def trim_workspace_pool() -> None:
    """Frees the dropped loss states whose queued work is done, then hands back to the device
    what the fused loss's workspace pool keeps and no call in flight uses, e.g. before work that
    needs the memory (the next loss call takes it again). A state freed here returns its scratch
    in its stream's order: what that stream has still queued keeps it until a later trim."""
    collect()
    _capi.call("tj_workspace_pool_trim")


def release(placement: Placement, free: Callable[[], None]) -> None:
    """Calls free() now for host work, else once the placement's stream has reached this point."""
    if sys.is_finalizing():
        return  # the process is ending: the driver and the library go with it
    collect()
    if not placement.on_gpu:
        free()
        return
    event = _event_after(placement)
    if event is None:
        # Only torch and cupy arrays get device outputs, so no call of another library's
        # device arrays ever made a handle to free.
        free()
        return
    with _lock:
        _pending.append((event, free))
