"""Benchmark for `fgpu simulate`: replay speed per policy, and the openb variant sweep.

    python bench/simulate.py                      # timing table: one replay per policy, default trace, one core
    python bench/simulate.py --sweep --workers 16 # 17 openb traces x all policies x seeds 42-51
                                                  #   -> docs/simulate_sweep.md (+ docs/simulate.png)

The timing target (issue 4): every policy, FGD included, replays the default trace (seed 42) in <= 10 s on one
core; the reference Go simulator needs about 10 minutes. The sweep's traces are the FGD paper's 17 workloads
(kubernetes-scheduler-simulator experiments/run_scripts/generate_run_scripts.py), bundled with fgpu (or read from --data).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from fgpu_operator.placement.policies import POLICY_NAMES
from fgpu_operator.sim.report import PAPER_ALLOC_AT_100, plot
from fgpu_operator.sim.runner import jobs_for, run_jobs, summarise
from fgpu_operator.sim.trace import load_nodes, load_pods

TARGET_SECONDS = 10.0
PAPER_TRACES = ("default", "cpu050", "cpu100", "cpu200", "cpu250", "gpushare40", "gpushare60", "gpushare80",
                "gpushare100", "gpuspec10", "gpuspec20", "gpuspec25", "gpuspec33", "multigpu20", "multigpu30",
                "multigpu40", "multigpu50")


def timing(policies: list[str], seed: int) -> int:
    from fgpu_operator.sim.replay import replay

    nodes, trace = load_nodes(None), load_pods(None)
    print(f"one replay of the default trace (seed {seed}, tune 1.3: {len(trace.pods)} trace pods -> about "
          f"{round(len(trace.pods) * 1.33, -2):.0f} arrivals), one process")
    print(f"{'policy':<11} {'seconds':>8} {'pods/s':>8} {'alloc@100 %':>12}  target <= {TARGET_SECONDS:.0f} s")
    worst = 0.0
    for policy in policies:
        started = time.perf_counter()
        result = replay(nodes, trace, policy, seed)
        seconds = time.perf_counter() - started
        worst = max(worst, seconds)
        alloc = result.binned()[0][100]
        verdict = "ok" if seconds <= TARGET_SECONDS else "SLOW"
        print(f"{policy:<11} {seconds:>8.2f} {result.pods / seconds:>8.0f} {alloc:>12.2f}  {verdict}")
    return 0 if worst <= TARGET_SECONDS else 1


def sweep(data: Path | None, policies: list[str], seeds: list[int], workers: int, out: Path) -> int:
    if data is None:  # the traces fgpu bundles (operator/data/openb): every one the sweep needs
        files, nodes = list(PAPER_TRACES), None
    else:
        files = [str(data / f"openb_pod_list_{name}.csv") for name in PAPER_TRACES]
        missing = [f for f in files if not Path(f).is_file()]
        if missing:
            print(f"missing trace files: {', '.join(missing)}", file=sys.stderr)
            return 2
        nodes = str(data / "openb_node_list_gpu_node.csv")
    jobs = jobs_for(nodes, files, policies, seeds, 1.3)
    started = time.perf_counter()
    done = [0]

    def tick(result):
        done[0] += 1
        if done[0] % 50 == 0 or done[0] == len(jobs):
            print(f"  {done[0]}/{len(jobs)} replays, {time.perf_counter() - started:.0f} s", file=sys.stderr)

    summaries = summarise(run_jobs(jobs, workers, tick))
    wall = time.perf_counter() - started
    by = {(s.trace, s.policy): s for s in summaries}
    lines = [f"GPU allocation ratio (%) at 100% arrival, mean over seeds {seeds[0]}-{seeds[-1]} "
             f"(FGD paper protocol, tune 1.3; {len(jobs)} replays in {wall / 60:.1f} min on {workers} processes). "
             "Best per trace in bold; last column: fgpu minus fgd (percentage points).", "",
             "| trace | " + " | ".join(policies) + " | fgpu-fgd |",
             "|---|" + "---:|" * (len(policies) + 1)]
    for trace in PAPER_TRACES:
        vals = {p: by[(trace, p)].alloc_at_100 for p in policies}
        best = max(vals.values())
        cells = [f"**{v:.2f}**" if v == best else f"{v:.2f}" for v in vals.values()]
        diff = vals.get("fgpu", float("nan")) - vals.get("fgd", float("nan"))
        lines.append(f"| {trace} | " + " | ".join(cells) + f" | {diff:+.2f} |")
    lines += ["", "Paper (default trace): " + ", ".join(f"{k} {v:.2f}" for k, v in PAPER_ALLOC_AT_100.items())]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps({"results": [s.as_json() for s in summaries]}))
    plot([by[("default", p)] for p in policies], out.with_name("simulate.png"))
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", action="store_true", help="run the 17-trace sweep instead of the timing table")
    parser.add_argument("--data", type=Path, default=None,
                        help="folder with the openb CSVs (default: the traces bundled in operator/data/openb)")
    parser.add_argument("--policy", action="append", help="policies (default: all)")
    parser.add_argument("--seeds", default="42-51", help="seed range for the sweep (default 42-51)")
    parser.add_argument("--seed", type=int, default=42, help="seed for the timing table (default 42)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("docs/simulate_sweep.md"))
    args = parser.parse_args(argv)
    policies = args.policy or list(POLICY_NAMES)
    if args.sweep:
        lo, _, hi = args.seeds.partition("-")
        seeds = list(range(int(lo), int(hi or lo) + 1))
        return sweep(args.data, policies, seeds, args.workers, args.out)
    return timing(policies, args.seed)


if __name__ == "__main__":
    sys.exit(main())
