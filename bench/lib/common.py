"""What every part of the scheduler bench shares: where the repository is, how it logs, and the GPU resource its
pods ask for."""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GPU = "nvidia.com/gpu"
SLOTS_PER_GPU = 10  # a fractional GPU's splitCount (tests/inventories.py)
SHARES = (100, 250, 300, 500, 700)  # milli-GPU of fgpu's pods, in turn


def log(msg: str) -> None:
    """Progress goes to stderr, so stdout carries only the tables."""
    print(msg, file=sys.stderr, flush=True)
