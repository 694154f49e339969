"""What the tests share: importing tilejit from this source tree when it is not installed, fresh
random generators, and outputs poisoned before each call (every array tilejit allocates starts
as NaN, or -777 for integers, so an element the library fails to write shows up)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence
from unittest import mock

import numpy as np

try:
    import tilejit
except ImportError:  # run from the source tree without PYTHONPATH
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import tilejit

from tilejit import _arrays


# A new seed each run; TILEJIT_TEST_SEED repeats one.
SEED = int(os.environ.get("TILEJIT_TEST_SEED", time.time_ns() % (2**31)))
print(f"tilejit tests: seed {SEED} (TILEJIT_TEST_SEED={SEED} repeats it)", file=sys.stderr)


def fresh_rng(stream: int = 0) -> np.random.Generator:
    """A generator seeded from this run's seed and `stream` (one per test)."""
    return np.random.default_rng([SEED, stream])


def _poison(array: Any) -> Any:
    kind = str(array.dtype)
    value = float("nan") if "float" in kind else -777 if "int" in kind else None
    if value is None:
        return array
    if _arrays.is_torch(array):
        array.fill_(value)  # a kernel on the current stream on a GPU: no host synchronisation
    else:
        array[...] = value
    return array


@contextlib.contextmanager
def poisoned_outputs() -> Iterator[None]:
    """Every output tilejit allocates inside the block starts poisoned."""
    real = _arrays.empty

    def empty(like: Any, shape: Sequence[int], dtype: Optional[str] = None) -> Any:
        return _poison(real(like, shape, dtype))

    with mock.patch.object(_arrays, "empty", empty):
        yield


__all__ = ["fresh_rng", "poisoned_outputs", "tilejit"]
