"""Would turning feasible pods away lift allocation at 100% arrival? (default trace, fgpu policy)

    python bench/simulate_admission.py                 # seeds 42-51, the rules below
    python bench/simulate_admission.py --seeds 42-43

The bounds (bench/simulate_ceiling.py) say a scheduler that never refuses a pod that fits can allocate at most
~96.34% at 100% arrival (one that places every sharing pod ~96.2%), and one that may refuse pods that fit at
most ~96.9%, by refusing ~236 0.81-GPU pods so that whole-GPU pods take their GPUs. This script tries that online, as an admission check
in front of the fgpu policy: a sharing pod of at least `fmin` milli-GPU that no partly used GPU can hold
(it would open a fresh GPU and leave a sliver few pods can use) is refused

* `reserve R`: while fewer than R of the cluster's GPUs are fully free (a whole-GPU reservation), or
* `after X%` (an oracle no scheduler has): once arrivals pass X% of capacity.

It prints allocation at 100% and 130% arrival and how many pods were refused before 100%.
"""
from __future__ import annotations

import argparse
import itertools
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
from fgpu_operator.placement.model import MILLI, Cluster, Request
from fgpu_operator.sim.replay import replay
from fgpu_operator.sim.trace import load_nodes, load_pods

RULES = [("none", 0, 0.0), ("reserve", 800, 0.05), ("reserve", 800, 0.10), ("reserve", 800, 0.15),
         ("reserve", 800, 0.20), ("reserve", 800, 0.25),
         ("reserve", 600, 0.10), ("reserve", 600, 0.15), ("after", 800, 80.0), ("after", 600, 80.0),
         ("after", 600, 88.0)]


@dataclass
class LargeFractionGate:
    """Refuses large sharing pods that would open a fresh GPU, under `kind` ('reserve' or 'after')."""

    kind: str
    fmin: int
    level: float
    arrived: int = 0
    refused_by_100: int = 0

    def __call__(self, cluster: Cluster, request: Request, feasible: np.ndarray) -> str | None:
        self.arrived += request.total_gpu_milli
        if self.kind == "none" or not request.is_share or request.gpu_milli < self.fmin or not feasible.any():
            return None
        if self.kind == "reserve":
            active = (cluster.gpu_left == MILLI).sum() < self.level * cluster.total_gpus
        else:
            active = self.arrived > self.level / 100 * cluster.total_gpus * MILLI
        left = cluster.gpu_left[feasible]
        if not active or ((left >= request.gpu_milli) & (left < MILLI)).any():
            return None
        if self.arrived <= cluster.total_gpus * MILLI:
            self.refused_by_100 += 1
        return "feasible, refused to keep fresh GPUs for whole-GPU pods"

    @property
    def label(self) -> str:
        if self.kind == "none":
            return "no admission check (fgpu)"
        level = f"{self.level:.0%} GPUs free" if self.kind == "reserve" else f"arrivals past {self.level:.0f}%"
        return f"{self.kind}: >= {self.fmin / MILLI:.2f} GPU, {level}"


def run(args: tuple[tuple[str, int, float], int]) -> tuple[str, int, float, float, int]:
    (kind, fmin, level), seed = args
    gate = LargeFractionGate(kind, fmin, level)
    result = replay(load_nodes(None), load_pods(None), "fgpu", seed, admission=gate)
    alloc = result.binned()[0]
    return gate.label, seed, alloc[100], alloc[130], gate.refused_by_100


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = list(range(int(lo), int(hi or lo) + 1))
    with ProcessPoolExecutor(args.workers) as pool:
        out = list(pool.map(run, itertools.product(RULES, seeds)))
    print(f"fgpu policy + an admission check, default trace, seeds {args.seeds} (means)")
    print(f"{'rule':<42} {'alloc@100 %':>11} {'alloc@130 %':>11} {'pods refused by 100%':>21}")
    for label in dict.fromkeys(o[0] for o in out):
        mine = [o for o in out if o[0] == label]
        print(f"{label:<42} {np.mean([o[2] for o in mine]):>11.2f} {np.mean([o[3] for o in mine]):>11.2f} "
              f"{np.mean([o[4] for o in mine]):>21.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
