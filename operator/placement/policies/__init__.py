"""Policy registry: name -> constructor taking the target workload (only FGD-style policies use it)."""
from __future__ import annotations

from collections.abc import Callable

from ..errors import PlacementInputError
from ..fragmentation import TargetWorkload
from .bestfit import BestFitPolicy
from .clustering import GpuClusteringPolicy
from .dotprod import DotProductPolicy
from .fgd import FgdPolicy
from .fgpu import FgpuPolicy
from .packing import GpuPackingPolicy
from .random import RandomPolicy

POLICIES: dict[str, Callable[[TargetWorkload], object]] = {
    "random": lambda w: RandomPolicy(),
    "dotprod": lambda w: DotProductPolicy(),
    "clustering": lambda w: GpuClusteringPolicy(),
    "packing": lambda w: GpuPackingPolicy(),
    "bestfit": lambda w: BestFitPolicy(),
    "fgd": FgdPolicy,
    "fgpu": FgpuPolicy,
}
#: The paper's policies in its order, then ours.
POLICY_NAMES: tuple[str, ...] = tuple(POLICIES)
DEFAULT_POLICY = "fgpu"


def make_policy(name: str, workload: TargetWorkload):
    try:
        factory = POLICIES[name]
    except KeyError:
        raise PlacementInputError(f"unknown policy {name!r}", field="policy", allowed=POLICY_NAMES) from None
    return factory(workload)
