"""Whether a call goes through tilejit.autograd: any of its tensors is a torch tensor. torch is
never imported here (a process without torch never loads it)."""

from __future__ import annotations

import sys
from typing import Any


def uses_torch(*tensors: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and any(isinstance(t, torch.Tensor) for t in tensors)
