"""check_pip_install.py PACKAGE_DIR LIBRARY WORK_DIR

pip-installs a copy of the package folder (python/) into WORK_DIR/site with this interpreter,
offline (--no-index --no-build-isolation) with LIBRARY as the prebuilt libtilejit_c, then imports
the installed package from outside any source tree (no TILEJIT_LIBRARY; only WORK_DIR/site on
PYTHONPATH): it must load the library installed inside it and compute a causal attention that
matches a direct fp64 computation. Exits 77 (skipped) when this interpreter cannot build a wheel
offline (no pip, or setuptools without bdist_wheel support).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SKIP = 77

USE_INSTALLED = r"""
import importlib.metadata
import pathlib
import sys

import numpy as np
import tilejit

package = pathlib.Path(tilejit.__file__).resolve().parent
library = pathlib.Path(tilejit.library_path()).resolve()
assert library.parent == package, f"loaded {library}, not the copy inside {package}"
assert package.parent == pathlib.Path(sys.argv[1]).resolve(), package
assert importlib.metadata.version("tilejit") == tilejit.__version__
rng = np.random.default_rng()
q, k, v = (rng.standard_normal((1, 2, 13, 8)).astype(np.float32) for _ in range(3))
out = np.full_like(q, np.nan)
out[...] = tilejit.attention(q, k, v, tilejit.programs.causal())
s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(8)
s = np.where(np.tril(np.ones((13, 13), bool)), s, -np.inf)
p = np.exp(s - s.max(-1, keepdims=True))
p /= p.sum(-1, keepdims=True)
err = float(np.abs(out - p @ v.astype(np.float64)).max())
assert err < 1e-4, err
print(f"installed tilejit {tilejit.__version__} at {package}: causal attention max error {err:.1e}")
"""

CAN_BUILD_WHEELS = r"""
import setuptools
try:
    import wheel  # noqa: F401  (setuptools < 70.1 builds wheels through it)
except ImportError:
    major, minor = (int(x) for x in setuptools.__version__.split(".")[:2])
    assert (major, minor) >= (70, 1), f"setuptools {setuptools.__version__} without wheel"
"""


def run(cmd, **kwargs) -> subprocess.CompletedProcess:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], **kwargs)


def main() -> int:
    package, library, work = (Path(a).resolve() for a in sys.argv[1:4])
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    python = sys.executable
    if run([python, "-m", "pip", "--version"]).returncode != 0:
        print("skipped: this interpreter has no pip")
        return SKIP
    if run([python, "-c", CAN_BUILD_WHEELS]).returncode != 0:
        print("skipped: this interpreter cannot build a wheel offline (install wheel, or "
              "setuptools >= 70.1)")
        return SKIP

    source = work / "src"
    shutil.copytree(package, source,
                    ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info"))
    site = work / "site"
    env = {k: v for k, v in os.environ.items() if k not in ("TILEJIT_LIBRARY", "PYTHONPATH")}
    env["TILEJIT_PREBUILT_LIBRARY"] = str(library)
    env["PIP_NO_INDEX"] = "1"
    run([python, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
         "--target", site, source], env=env, cwd=work, check=True)
    del env["TILEJIT_PREBUILT_LIBRARY"]
    env["PYTHONPATH"] = str(site)
    run([python, "-c", USE_INSTALLED, site], env=env, cwd=work, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
