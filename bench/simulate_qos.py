"""Issue 35's simulator target: allocation against SLO attainment of protected pods, per policy, on the openb
default trace: `--protected-share` of its sharing pods protected with bound `--slo`, graded against slowdowns
perturbed by simgpu's measured co-location error (operator/sim/qos_timeline.py).

    .venv/bin/python bench/simulate_qos.py [--seeds 0-9] [--workers 2] [--json docs/qos_tradeoff.json] \
        [--plot docs/qos_tradeoff.png]

The FGD protocol (pods arrive until 100% of GPU capacity and never leave; arrivals count as time): per policy,
the allocation and attainment at 50..100% of capacity arrived, means over seeds (attainment pooled over the
seeds' protected pod-arrivals). The timeline mode cannot reach 100% arrival on this trace (its arrivals,
however compressed, offer at most 44.6% of capacity: nothing waits), so `fgpu simulate --mode timeline
--protected-share` reports it, not this script.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

POLICIES = ("random", "bestfit", "fgd", "fgpu", "naive", "fgpu+qos", "fgpu+qos@1", "fgpu+qos@0.9", "fgpu+qos@0.75",
            "fgpu+qos@0.5")


def one(job: tuple) -> dict:
    from fgpu_operator.sim.qos_timeline import replay_qos, residuals
    from fgpu_operator.sim.trace import load_nodes, load_pods

    name, seed, share, bound, trace, grade = job
    return replay_qos(load_nodes(None), load_pods(trace), name, share, bound, seed, residuals(gpu=grade))


def cross_checked(policies: list[str], fit: str) -> list[str]:
    """`fgpu+qos` allowing the largest error of `fit`'s residuals alone (fgpu+qos~E), for a grading by the
    other GPU's: the allowance is then not read off the errors it is graded with."""
    from fgpu_operator.sim.qos_timeline import residuals

    error = float(residuals(gpu=fit).max())
    return [f"fgpu+qos~{error:.4f}" if p == "fgpu+qos" else p for p in policies]


def seeds_of(text: str) -> list[int]:
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",")]


def summarise(rows: list[dict], policies: list[str]) -> list[dict]:
    """Per policy and arrived percentage: mean allocation, attainment pooled (weights: protected time)."""
    out = []
    for p in policies:
        mine = [r for r in rows if r["policy"] == p]
        for pct in sorted({pt["arrived_pct"] for r in mine for pt in r["points"]}):
            pts = [pt for r in mine for pt in r["points"] if pt["arrived_pct"] == pct]
            out.append({"policy": p, "arrived_pct": pct, "seeds": len(pts),
                        "alloc_pct": sum(pt["alloc_pct"] for pt in pts) / len(pts),
                        "attainment": sum(pt["attainment"] for pt in pts) / len(pts),
                        "attainment_total": sum(pt["attainment_total"] for pt in pts) / len(pts),
                        "attainment_min": min(pt["attainment"] for pt in pts)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--protected-share", type=float, default=0.3)
    ap.add_argument("--slo", type=float, default=1.2)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--trace", default="default", help="a bundled openb trace (default, gpushare80, ...)")
    ap.add_argument("--grade", default="", help="grade with this GPU's residuals only (H100, H200; default all)")
    ap.add_argument("--allowance-from", default="",
                    help="fgpu+qos allows the largest error of this GPU's residuals only (cross-check with --grade)")
    ap.add_argument("--json")
    ap.add_argument("--plot")
    ap.add_argument("--replot", type=Path, metavar="JSON", help="only draw --plot from a sweep's --json")
    args = ap.parse_args(argv)
    if args.replot:
        replot(args.replot, Path(args.plot), args.protected_share, args.slo)
        return 0
    policies = args.policies.split(",")
    if args.allowance_from:
        policies = cross_checked(policies, args.allowance_from)
    jobs = [(p, s, args.protected_share, args.slo, args.trace, args.grade) for p in policies
            for s in seeds_of(args.seeds)]
    t0 = time.time()
    with ProcessPoolExecutor(args.workers) as pool:
        rows = list(pool.map(one, jobs))
    wall = time.time() - t0
    summary = summarise(rows, policies)
    print(f"openb {args.trace}, FGD protocol, {len(seeds_of(args.seeds))} seeds, {args.protected_share:.0%} of "
          f"sharing pods protected, bound {args.slo:g}x; attainment mean over seeds (min seed), graded against "
          f"slowdowns perturbed by {args.grade or 'all'} residuals (on the added slowdown; on the whole slowdown "
          "in the last column)")
    print(f"{'policy':<14} {'arrived':>7} {'seeds':>5} {'alloc %':>8} {'attainment':>11} {'(min seed)':>10} "
          f"{'whole-s':>8}")
    for s in summary:
        print(f"{s['policy']:<14} {s['arrived_pct']:>6}% {s['seeds']:>5} {s['alloc_pct']:>8.2f} "
              f"{100 * s['attainment']:>10.2f}% {100 * s['attainment_min']:>9.2f}% {100 * s['attainment_total']:>7.2f}%")
    print(f"{len(jobs)} runs, {wall:.0f} s wall with {args.workers} workers")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "runs": rows, "wall_s": wall}, indent=1))
    if args.plot:
        plot(summary, Path(args.plot), args.protected_share, args.slo)
    return 0


MISS_FLOOR = 0.01  # where the plot draws "no protected time over its bound"


def plot(summary: list[dict], path: Path, share: float, bound: float) -> None:
    """Two views of one sweep. Left, each policy's curve as pods arrive (50..100% of capacity): allocation
    against attainment. Right, at 100% arrived, fgpu+qos@M's curve swept by the filter's margin M (the
    bound it refuses at, 1 + M (B - 1)) against the single points of the policies that have no such knob,
    the live fgpu+qos among them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    names = list(dict.fromkeys(s["policy"] for s in summary))
    for p in names:
        pts = [(s["alloc_pct"], 100 * s["attainment"]) for s in summary if s["policy"] == p]
        left.plot([x for x, _ in pts], [y for _, y in pts], marker="o", ms=3, label=p,
                  lw=2.2 if p == "fgpu+qos" else 1.0)
    last = {s["policy"]: s for s in summary if s["arrived_pct"] == 100}

    def missed(s: dict) -> float:  # % of protected time over the bound; log scale, so 0 is drawn at the floor
        return max(100 * (1 - s["attainment"]), MISS_FLOOR)

    swept = sorted((float(p.split("@")[1]), last[p]) for p in last if p.startswith("fgpu+qos@"))
    if swept:
        right.plot([s["alloc_pct"] for _, s in swept], [missed(s) for _, s in swept], marker="s", color="grey",
                   label="fgpu+qos@M (margin M swept)")
        for m, s in swept:
            right.annotate(f"M={m:g}", (s["alloc_pct"], missed(s)), fontsize=7, xytext=(4, 4),
                           textcoords="offset points")
    for p, s in last.items():
        if not p.startswith("fgpu+qos@"):
            right.scatter(s["alloc_pct"], missed(s), s=70 if p == "fgpu+qos" else 30, label=p, zorder=3)
    right.set_yscale("log")
    right.axhline(1, color="grey", lw=0.8, ls=":")
    for ax in (left, right):
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    left.axhline(99, color="grey", lw=0.8, ls=":")
    left.set(xlabel="GPU allocation (% of cluster) as pods arrive to 100% of capacity",
             ylabel="SLO attainment of protected pods (%)", title="curves by arrival (50, 60, ..., 100% of capacity)")
    right.set(xlabel="GPU allocation at 100% arrived (%)",
              ylabel=f"protected time over its bound (%, log; {MISS_FLOOR:g} = none)",
              title="at 100% arrived: fgpu+qos@M swept by the margin, the others as points")
    fig.suptitle(f"openb, FGD protocol: {share:.0%} of shares protected at {bound:g}x, perturbed grading",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def replot(json_path: Path, path: Path, share: float, bound: float) -> None:
    """The PNG again from a sweep's JSON (--json), without replaying."""
    plot(json.loads(json_path.read_text())["summary"], path, share, bound)


if __name__ == "__main__":
    sys.exit(main())
