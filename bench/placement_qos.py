"""What the QoS filter costs a placement decision (issue 35's target: p99 at 1,000 nodes x 8 GPUs no more
than 1.5x today's).

A cluster of NODES nodes with 8 H100 each (fractional sharing) is filled to about FILL of its GPU capacity
with shares from the live target workload's sizes, PROTECTED of them high priority with bound 1.2; then
DECISIONS pods arrive one by one (the same mix) while as many random placed pods leave, so the cluster stays
in steady state and every decision finds the nodes the previous one changed. Each policy runs the identical
sequence with the filter off (`today`) and on (`+QoS`); the table gives the decision time of
`Framework.schedule` alone (the core's work per pod; no Kubernetes I/O), and how often each placed.

    .venv/bin/python bench/placement_qos.py [--nodes 1000] [--decisions 2000] [--policies fgpu,fgd,binpack]
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from fgpu_operator.placement import Cluster, Framework, NodeSpec, Request, Unschedulable
from fgpu_operator.placement.fragmentation import TargetWorkload
from fgpu_operator.placement.live import DEFAULT_SHAPES
from fgpu_operator.placement.policies import make_policy
from rich.console import Console
from rich.table import Table

SHARES = (100, 200, 250, 300, 500, 700)
FILL = 0.7


def arrivals(rng: np.random.Generator, count: int, protected: float) -> list[tuple[int, bool]]:
    return [(int(rng.choice(SHARES)), bool(rng.random() < protected)) for _ in range(count)]


def request(i: int, milli: int, high: bool, guard: bool) -> Request:
    return Request(f"p{i}", 1000, 1024, num_gpu=1, gpu_milli=milli, priority=0 if high else 1,
                   slo=1.2 if high else 0.0, guard_slo=guard)


def run(policy: str, nodes: int, decisions: int, protected: float, guard: bool, seed: int) -> dict:
    cluster = Cluster([NodeSpec(f"node-{i:04d}", 128000, 1 << 20, 8, "H100") for i in range(nodes)])
    fw = Framework(cluster, make_policy(policy, TargetWorkload.from_shapes(DEFAULT_SHAPES)),
                   np.random.default_rng(seed))
    rng = np.random.default_rng(seed)
    placed = []
    target = FILL * nodes * 8 * 1000
    fill = arrivals(rng, int(target / np.mean(SHARES) * 1.2), protected)
    used = 0
    for i, (milli, high) in enumerate(fill):
        if used >= target:
            break
        out = fw.schedule(request(i, milli, high, guard), explained=False)
        if not isinstance(out, Unschedulable):
            placed.append(out)
            used += milli
    times, ok = [], 0
    for j, (milli, high) in enumerate(arrivals(rng, decisions, protected)):
        r = request(len(fill) + j, milli, high, guard)
        t0 = time.perf_counter()
        out = fw.schedule(r)
        times.append(time.perf_counter() - t0)
        if not isinstance(out, Unschedulable):
            ok += 1
            placed.append(out)
        fw.release(placed.pop(int(rng.integers(len(placed)))))
    t = np.array(times) * 1000
    return {"p50": float(np.percentile(t, 50)), "p99": float(np.percentile(t, 99)), "mean": float(t.mean()),
            "placed": ok / decisions}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--decisions", type=int, default=2000)
    ap.add_argument("--protected", type=float, default=0.3)
    ap.add_argument("--policies", default="fgpu,fgd,binpack")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    console = Console()
    table = Table(title=f"decision time, {args.nodes} nodes x 8 H100, {args.decisions} decisions, "
                        f"{args.protected:.0%} protected (bound 1.2), ~{FILL:.0%} full")
    for col in ("policy", "QoS filter", "p50 ms", "p99 ms", "mean ms", "placed", "p99 vs today"):
        table.add_column(col, justify="left" if col in ("policy", "QoS filter") else "right")
    for policy in args.policies.split(","):
        base = run(policy, args.nodes, args.decisions, args.protected, False, args.seed)
        qos = run(policy, args.nodes, args.decisions, args.protected, True, args.seed)
        for name, row in (("off (today)", base), ("on", qos)):
            table.add_row(policy, name, f"{row['p50']:.2f}", f"{row['p99']:.2f}", f"{row['mean']:.2f}",
                          f"{row['placed']:.1%}", f"{row['p99'] / base['p99']:.2f}x")
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
