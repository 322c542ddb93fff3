"""Preemption decision time at scale: how long `plan_preemption` takes to pick victims on a full cluster.

    python bench/preemption_time.py                 # 1,000 nodes x 8 H100s, table of median / p95 / max ms
    python bench/preemption_time.py --nodes 200 --repeat 50

The cluster: every GPU full of low-priority pods (priority 0): fractional shares of random sizes from the
openb trace's common ones (0.1-0.5) filling each GPU, or one whole-GPU pod, or, on a quarter of the nodes, MIG
instances (3g.40gb + 2g.20gb + 2 x 1g.10gb per GPU, every one held). A quarter of the GPUs hold a pod of
the preemptor's own priority, which may never be a victim. Preemptors (priority 1000): a 0.6 share, one whole
GPU, 8 whole GPUs on one node, a 3g.40gb instance. Each decision is timed alone (the cluster is restored
after each, as the planner guarantees); the first one warms caches and is dropped.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from fgpu_operator.placement.model import Cluster, GpuInfo, MigSlot, NodeSpec, Request
from fgpu_operator.placement.preemption import Candidate, Running, plan_preemption

SHARES = (100, 200, 250, 300, 460, 500)
LAYOUT = (("3g.40gb", 4), ("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3))


def build(nodes: int, gpus: int, seed: int) -> tuple[Cluster, list[Running]]:
    rng = np.random.default_rng(seed)
    specs = []
    for n in range(nodes):
        name = f"node-{n:04d}"
        if n % 4 == 3:
            g = tuple(GpuInfo(f"{name}/{i}", "H100", mig=tuple(
                MigSlot(f"{name}/{i}/{p}@{s}", p, start=s) for p, s in LAYOUT)) for i in range(gpus))
            specs.append(NodeSpec(name, 256000, 2097152, gpus, "H100", gpus=g))
        else:
            specs.append(NodeSpec(name, 256000, 2097152, gpus, "H100"))
    cluster = Cluster(specs)
    running: list[Running] = []
    k = 0

    def put(request: Request, node: int, gpus=(), mig=(), priority=0) -> None:
        nonlocal k
        running.append(Running(f"p{k}", cluster.reserve(request, node, gpus, mig), priority, float(k)))
        k += 1

    for n, spec in enumerate(specs):
        for g in range(gpus):
            mine = 1000 if rng.random() < 0.25 else 0  # a quarter of the GPUs hold an unevictable peer
            if spec.gpus:
                for m in spec.gpus[g].mig:
                    put(Request(f"m{k}", 1000, 1024, 1, mig_profile=m.profile), n, (), (m.uuid,), mine)
                continue
            if rng.random() < 0.2:
                put(Request(f"w{k}", 2000, 4096, 1, 1000), n, (g,), priority=mine)
                continue
            left = 1000
            while left > 0:
                milli = min(left, int(rng.choice(SHARES)))
                put(Request(f"s{k}", 1000, 2048, 1, milli), n, (g,), priority=mine if left == 1000 else 0)
                left -= milli
    return cluster, running


PREEMPTORS = {
    "0.6 share": Request("hi-share", 1000, 2048, 1, 600),
    "1 whole GPU": Request("hi-whole", 2000, 4096, 1, 1000),
    "8 whole GPUs": Request("hi-eight", 16000, 32768, 8, 1000),
    "MIG 3g.40gb": Request("hi-mig", 1000, 2048, 1, mig_profile="3g.40gb"),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if not (1 <= args.nodes <= 100_000 and 1 <= args.gpus <= 16 and 2 <= args.repeat <= 10_000):
        print("--nodes 1..100000, --gpus 1..16, --repeat 2..10000", file=sys.stderr)
        return 2
    started = time.perf_counter()
    cluster, running = build(args.nodes, args.gpus, args.seed)
    print(f"{args.nodes} nodes x {args.gpus} H100s, {len(running)} running pods "
          f"(built in {time.perf_counter() - started:.1f} s); {args.repeat} decisions each, first dropped")
    print(f"{'preemptor':<14} {'median ms':>10} {'p95 ms':>8} {'max ms':>8}  victims  chosen")
    for label, request in PREEMPTORS.items():
        times, plan = [], None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            plan = plan_preemption(cluster, request, 1000, running)
            times.append((time.perf_counter() - t0) * 1000)
        times = sorted(times[1:])
        p95 = times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))]
        if isinstance(plan, Candidate):
            what = f"{len(plan.victims):>7}  {cluster.nodes[plan.node].name} {plan.gpus or plan.mig or 'node'}"
        else:
            what = f"{'-':>7}  {plan}"
        print(f"{label:<14} {statistics.median(times):>10.1f} {p95:>8.1f} {max(times):>8.1f}  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
