"""Builds libtilejit_c for the tilejit package and installs it inside the package.

The library comes from $TILEJIT_PREBUILT_LIBRARY when it is set (a libtilejit_c.so built
elsewhere), else from the project's CMake: only the target tilejit_c is built
($CMAKE_BUILD_PARALLEL_LEVEL jobs) in $TILEJIT_CMAKE_BUILD_DIR (default: <source>/build-python),
which is configured first (Release, no tests) unless it already is. Nothing is downloaded: with
the build requirements present, `pip install --no-build-isolation ./python` works offline.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
SOURCE = Path(os.environ.get("TILEJIT_SOURCE_DIR", HERE.parent))
LIBRARY = "libtilejit_c.so"


def project_version() -> str:
    """The library's version, so the package's never disagrees with it: the CMake project's, or
    that of the prebuilt library (tj_version())."""
    cmake = SOURCE / "CMakeLists.txt"
    if cmake.is_file():
        match = re.search(r"project\(tilejit VERSION ([0-9.]+)", cmake.read_text())
        if match:
            return match.group(1)
    prebuilt = os.environ.get("TILEJIT_PREBUILT_LIBRARY")
    if prebuilt:
        library = ctypes.CDLL(prebuilt)
        library.tj_version.restype = ctypes.c_char_p
        return library.tj_version().decode()
    raise RuntimeError(f"tilejit: no CMakeLists.txt at {SOURCE} and no "
                       f"TILEJIT_PREBUILT_LIBRARY: the version is unknown")


def cmake_build() -> Path:
    """Configures the source tree and builds the tilejit_c target; returns the library."""
    if not (SOURCE / "capi" / "tilejit.h").is_file():
        raise RuntimeError(
            f"tilejit: no source tree at {SOURCE} to build libtilejit_c from; set "
            f"TILEJIT_SOURCE_DIR, or TILEJIT_PREBUILT_LIBRARY to a built {LIBRARY}")
    build = Path(os.environ.get("TILEJIT_CMAKE_BUILD_DIR", SOURCE / "build-python"))
    if not (build / "CMakeCache.txt").exists():  # an existing build keeps its configuration
        configure = ["cmake", "-S", str(SOURCE), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                     "-DTILEJIT_BUILD_TESTS=OFF", "-DTILEJIT_BUILD_BENCH=OFF",
                     "-DTILEJIT_BUILD_EXAMPLES=OFF"]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        subprocess.run(configure, check=True)
    subprocess.run(["cmake", "--build", str(build), "--target", "tilejit_c"], check=True)
    return build / "capi" / LIBRARY


def library_to_install() -> Path:
    prebuilt = os.environ.get("TILEJIT_PREBUILT_LIBRARY")
    path = Path(prebuilt) if prebuilt else cmake_build()
    if not path.is_file():
        raise RuntimeError(f"tilejit: {path} is not a file")
    return path


class BuildPyWithLibrary(build_py):
    """build_py, plus libtilejit_c copied into the built package (the file itself, not the
    versioned symlinks CMake leaves next to it)."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "tilejit" / LIBRARY
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(library_to_install().resolve(), target)
        os.chmod(target, 0o755)


class BinaryDistribution(Distribution):
    """The wheel holds a shared library: tag it for this platform."""

    def has_ext_modules(self) -> bool:
        return True


setup(version=project_version(), cmdclass={"build_py": BuildPyWithLibrary},
      distclass=BinaryDistribution)
