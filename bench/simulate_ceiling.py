"""How close do policies get to the best any scheduler could do at 100% arrival (default trace)?

    python bench/simulate_ceiling.py                          # seeds 42-51, bounds only (seconds per seed)
    python bench/simulate_ceiling.py --policies fgd,fgpu      # + each policy's allocation at that seed

For each seed the pods that arrive before 100% of capacity (the replay's own order) are packed offline and
exactly (`fgpu_operator.sim.ceiling`): "all placed" bounds every scheduler that places each sharing pod that
arrives; "any subset" also lets it turn sharing pods away so whole-GPU pods take their GPUs. Issue 4 asked
for >= 96.5% from the fgpu policy; this is the evidence for why placement alone cannot get there.
"""
from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from fgpu_operator.sim.ceiling import arrivals_until, ceiling
from fgpu_operator.sim.replay import replay
from fgpu_operator.sim.trace import load_nodes, load_pods

GOAL_PCT = 96.5


def bound_row(args: tuple[str | None, int]) -> dict:
    pods, seed = args
    nodes, trace = load_nodes(None), load_pods(pods)
    arrived, total = arrivals_until(nodes, trace, seed)
    c = ceiling(arrived, total)
    n81 = sum(1 for r in arrived if r.is_share and r.gpu_milli == 810)
    return dict(seed=seed, share_pods=c.share_pods, n81=n81, share_gpus=c.share_gpus, min_gpus=c.min_share_gpus,
                idle_all=c.idle_all_placed, all_pct=c.alloc_all_placed_pct, idle_any=c.idle_any_subset,
                any_pct=c.alloc_any_subset_pct, refused81=c.refused.get(810, 0), exact=c.exact)


def policy_alloc(args: tuple[str | None, str, int]) -> tuple[str, int, float]:
    pods, policy, seed = args
    result = replay(load_nodes(None), load_pods(pods), policy, seed)
    return policy, seed, result.binned()[0][100]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="42-51", help="A-B (default 42-51)")
    ap.add_argument("--pods", default=None, help="pod CSV (default: the bundled openb default trace)")
    ap.add_argument("--policies", default="", help="comma list of policies to replay beside the bounds")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = list(range(int(lo), int(hi or lo) + 1))
    policies = [p for p in args.policies.split(",") if p]
    with ProcessPoolExecutor(args.workers) as pool:
        rows = list(pool.map(bound_row, [(args.pods, s) for s in seeds]))
        allocs = {(p, s): a for p, s, a in pool.map(policy_alloc, [(args.pods, p, s) for p in policies
                                                                   for s in seeds])}
    head = (f"{'seed':>4} {'share pods':>10} {'0.81 pods':>9} {'share GPUs':>10} {'min GPUs':>8} "
            f"{'idle, all placed':>16} {'ceiling %':>9} {'idle, any subset':>16} {'ceiling %':>9} {'0.81 refused':>12}")
    head += "".join(f" {p + ' %':>9}" for p in policies)
    print("Offline packing bounds at 100% arrival (GPUs; no nodes, CPU, memory or arrival order - all in the "
          "scheduler's favour)")
    print(head)
    for r in rows:
        line = (f"{r['seed']:>4} {r['share_pods']:>10} {r['n81']:>9} {r['share_gpus']:>10.1f} {r['min_gpus']:>8} "
                f"{r['idle_all']:>16.1f} {r['all_pct']:>9.2f} {r['idle_any']:>16.1f} {r['any_pct']:>9.2f} "
                f"{r['refused81']:>12}" + ("" if r["exact"] else "  (time limit: proven bound)"))
        print(line + "".join(f" {allocs[(p, r['seed'])]:>9.2f}" for p in policies))
    mean = lambda key: float(np.mean([r[key] for r in rows]))  # noqa: E731
    summary = f"mean {'':>54} {mean('idle_all'):>16.1f} {mean('all_pct'):>9.2f} {mean('idle_any'):>16.1f} " \
              f"{mean('any_pct'):>9.2f} {mean('refused81'):>12.0f}"
    print(summary + "".join(f" {np.mean([allocs[(p, s)] for s in seeds]):>9.2f}" for p in policies))
    print(f"goal {GOAL_PCT}%: above the all-placed ceiling on {sum(r['all_pct'] < GOAL_PCT for r in rows)}/"
          f"{len(rows)} seeds; reaching it needs refusing feasible sharing pods and near-optimal packing")
    if "fgd" in policies and "fgpu" in policies:
        gap = [(allocs[("fgpu", s)] - allocs[("fgd", s)]) / (r["all_pct"] - allocs[("fgd", s)])
               for s, r in zip(seeds, rows, strict=True)]
        print(f"fgpu closes {100 * np.mean(gap):.0f}% of FGD's gap to the all-placed ceiling (mean over seeds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
