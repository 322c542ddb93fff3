"""`fgpu`: placeholder until tuned; behaves as FGD."""
from __future__ import annotations

from .fgd import FgdPolicy


class FgpuPolicy(FgdPolicy):
    name = "fgpu"
