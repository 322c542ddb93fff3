"""Issue 35's simulator target: allocation against SLO attainment of protected pods, per policy, on the openb
default trace (timeline mode), `--protected-share` of its sharing pods protected with bound `--slo`, graded
against slowdowns perturbed by simgpu's measured co-location error (operator/sim/qos_timeline.py).

    .venv/bin/python bench/simulate_qos.py [--seeds 0-9] [--loads 0.3,0.44] [--workers 2] \
        [--json docs/qos_tradeoff.json] [--plot docs/qos_tradeoff.png]

Prints one row per (policy, load): allocation (time-weighted % of cluster GPUs over the busy period; mean
over seeds) and attainment (pooled over seeds), and the wall time of the sweep.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

POLICIES = ("random", "bestfit", "fgd", "fgpu", "naive", "fgpu+qos", "fgpu+qos@0.5")


def one(job: tuple) -> dict:
    from fgpu_operator.sim.qos_timeline import residuals, run_qos
    from fgpu_operator.sim.trace import load_nodes, load_pods

    name, seed, load, share, bound = job
    return run_qos(load_nodes(None), load_pods(None, need_times=True), name, share, bound, seed, load, residuals())


def seeds_of(text: str) -> list[int]:
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--loads", default="0.3,0.44")
    ap.add_argument("--protected-share", type=float, default=0.3)
    ap.add_argument("--slo", type=float, default=1.2)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--plot")
    args = ap.parse_args(argv)
    loads = [float(x) for x in args.loads.split(",")]
    jobs = [(p, s, load, args.protected_share, args.slo) for p in args.policies.split(",")
            for load in loads for s in seeds_of(args.seeds)]
    t0 = time.time()
    with ProcessPoolExecutor(args.workers) as pool:
        rows = list(pool.map(one, jobs))
    wall = time.time() - t0
    summary = []
    for p in args.policies.split(","):
        for load in loads:
            mine = [r for r in rows if r["policy"] == p and r["load"] == load]
            hours = sum(r["protected_hours"] for r in mine)
            summary.append({"policy": p, "load": load, "seeds": len(mine),
                            "alloc_pct": sum(r["alloc_pct"] for r in mine) / len(mine),
                            "requested_pct": sum(r["requested_pct"] for r in mine) / len(mine),
                            "attainment": sum(r["attainment"] * r["protected_hours"] for r in mine) / hours
                            if hours else 1.0})
    print(f"{'policy':<14} {'load':>5} {'alloc %':>8} {'requested %':>12} {'attainment':>11}")
    for s in summary:
        print(f"{s['policy']:<14} {s['load']:>5.2f} {s['alloc_pct']:>8.2f} {s['requested_pct']:>12.2f} "
              f"{100 * s['attainment']:>10.2f}%")
    print(f"{len(jobs)} runs, {wall:.0f} s wall with {args.workers} workers")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "runs": rows, "wall_s": wall}, indent=1))
    if args.plot:
        plot(summary, Path(args.plot), args.protected_share, args.slo)
    return 0


def plot(summary: list[dict], path: Path, share: float, bound: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for p in dict.fromkeys(s["policy"] for s in summary):
        pts = sorted((s["alloc_pct"], 100 * s["attainment"]) for s in summary if s["policy"] == p)
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=p)
    ax.set(xlabel="allocated GPUs (% of cluster, time-weighted)", ylabel="SLO attainment of protected pods (%)",
           title=f"openb default, timeline: {share:.0%} of shares protected, bound {bound:g}x (perturbed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
