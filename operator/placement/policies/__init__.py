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
from .kubedra import KubeDraPolicy
from .packing import GpuPackingPolicy
from .random import RandomPolicy
from .spread import BinpackPolicy, SpreadPolicy

POLICIES: dict[str, Callable[[TargetWorkload], object]] = {
    "random": lambda w: RandomPolicy(),
    "dotprod": lambda w: DotProductPolicy(),
    "clustering": lambda w: GpuClusteringPolicy(),
    "packing": lambda w: GpuPackingPolicy(),
    "bestfit": lambda w: BestFitPolicy(),
    "fgd": FgdPolicy,
    "fgpu": FgpuPolicy,
    "binpack": lambda w: BinpackPolicy(),
    "spread": lambda w: SpreadPolicy(),
    "kube-dra": lambda w: KubeDraPolicy(),
}
#: What `fgpu simulate --policy all` replays: the paper's policies in its order, then ours.
POLICY_NAMES: tuple[str, ...] = ("random", "dotprod", "clustering", "packing", "bestfit", "fgd", "fgpu")
#: Node policies a live cluster offers (cluster-wide default and per pod): HAMi's two, FGD, ours.
LIVE_POLICIES: tuple[str, ...] = ("binpack", "spread", "fgd", "fgpu")
DEFAULT_POLICY = "fgpu"
#: `fgpu simulate --allocator NAME`: another scheduler's allocation rule, replayed beside the policies.
ALLOCATORS: tuple[str, ...] = ("kube-dra",)


def make_policy(name: str, workload: TargetWorkload):
    try:
        factory = POLICIES[name]
    except KeyError:
        raise PlacementInputError(f"unknown policy {name!r}", field="policy", allowed=tuple(POLICIES)) from None
    return factory(workload)
