"""tilejit from Python: attention and fused linear cross-entropy programs on any DLPack arrays
(numpy, torch, cupy, ...), with torch.autograd support.

    import numpy as np, tilejit
    q = k = v = np.random.randn(1, 4, 128, 64).astype(np.float32)
    doc = np.repeat(np.arange(4, dtype=np.int32), 32)[None]
    out = tilejit.attention(q, k, v, tilejit.programs.document_causal(), buffers={"doc": doc})

A pure-Python package over the C ABI (capi/tilejit.h) through ctypes. libtilejit_c is loaded
from ``$TILEJIT_LIBRARY``, else from next to this package (the copy ``pip install`` puts
there), else from the source tree's CMake build folders (see tilejit._library).
"""

from __future__ import annotations

from . import programs
from ._capi import gpu_available, version, workspace_pool_held_bytes
from ._deferred_free import trim_workspace_pool
from ._library import loaded_path as library_path
from .attention import attention, attention_backward, attention_forward
from .errors import (BundleMismatchError, CompileError, CudaError, InternalError,
                     InvalidArgumentError, NoDeviceError, OfflineMissError, OutOfMemoryError,
                     ParseError, TilejitError, UnsupportedError, ValidationError)
from .loss import LinearCrossEntropyForward, linear_cross_entropy, linear_cross_entropy_forward
from .masks import BlockMask, BlockMaskCounts, BlockMaskShape, block_mask
from .programs import Program, load, program
from .vocab import VocabOrder

__version__ = version()

__all__ = [
    "BlockMask", "BlockMaskCounts", "BlockMaskShape", "BundleMismatchError", "CompileError",
    "CudaError", "InternalError", "InvalidArgumentError", "LinearCrossEntropyForward",
    "NoDeviceError", "OfflineMissError", "OutOfMemoryError", "ParseError", "Program",
    "TilejitError", "UnsupportedError", "ValidationError", "VocabOrder", "attention", "attention_backward",
    "attention_forward", "block_mask", "gpu_available", "library_path", "linear_cross_entropy",
    "linear_cross_entropy_forward", "load", "program", "programs", "trim_workspace_pool", "version",
    "workspace_pool_held_bytes",
]
