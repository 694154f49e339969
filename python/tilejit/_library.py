"""Finds and loads libtilejit_c, the shared library behind tilejit's C ABI (capi/tilejit.h).

The search order:

1. ``$TILEJIT_LIBRARY``: the path of the library file (an error when it does not exist);
2. next to this package (``tilejit/libtilejit_c.so``): the copy ``pip install`` puts there;
3. the CMake build trees of the source checkout this package sits in (``build/``, then any
   other ``build*/`` folder, the most recently built first).
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path
from typing import List, Optional

LIBRARY_ENV = "TILEJIT_LIBRARY"

if sys.platform == "darwin":
    LIBRARY_FILE = "libtilejit_c.dylib"
else:
    LIBRARY_FILE = "libtilejit_c.so"


def _build_tree_candidates() -> List[Path]:
    """libtilejit_c in the build folders of the checkout that holds this package, best first."""
    repo = Path(__file__).resolve().parent.parent.parent
    if not (repo / "capi" / "tilejit.h").is_file():
        return []
    found = [p / "capi" / LIBRARY_FILE for p in repo.glob("build*") if p.is_dir()]
    found = [p for p in found if p.is_file()]
    # build/ is the project's default build folder; otherwise the newest build wins.
    found.sort(key=lambda p: (p.parent.parent.name != "build", -p.stat().st_mtime))
    return found


def find_library() -> Path:
    """The path of the libtilejit_c to load; raises OSError saying where it looked."""
    explicit = os.environ.get(LIBRARY_ENV)
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise OSError(f"${LIBRARY_ENV} is {explicit!r}, which is not a file")
        return path
    packaged = Path(__file__).resolve().parent / LIBRARY_FILE
    if packaged.is_file():
        return packaged
    built = _build_tree_candidates()
    if built:
        return built[0]
    raise OSError(
        f"tilejit cannot find {LIBRARY_FILE}: set ${LIBRARY_ENV} to its path, install the "
        f"package with pip (which builds it), or build the CMake target tilejit_c "
        f"(looked next to {Path(__file__).resolve().parent} and in the source tree's build*/capi/)"
    )


_loaded: Optional[ctypes.CDLL] = None
_loaded_path: Optional[Path] = None


def load() -> ctypes.CDLL:
    """Loads the library once per process and returns it."""
    global _loaded, _loaded_path
    if _loaded is None:
        path = find_library()
        _loaded = ctypes.CDLL(str(path))
        _loaded_path = path
    return _loaded


def loaded_path() -> Optional[Path]:
    """Where the loaded library came from (None before the first load)."""
    return _loaded_path
