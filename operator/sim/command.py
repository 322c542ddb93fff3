"""`fgpu simulate`: replay a GPU-cluster trace through placement policies (FGD paper protocol or timeline)."""
from __future__ import annotations

import argparse
import os
import re

from fgpu_operator.placement.errors import PlacementInputError
from fgpu_operator.placement.policies import DEFAULT_POLICY, POLICY_NAMES

DEFAULT_SEEDS = "42-51"


def parse_seeds(text: str) -> list[int]:
    """'42-51', '42,43,47' or '42' -> ascending seed list; anything else is an error naming the format."""
    text = text.strip()
    if m := re.fullmatch(r"(\d+)\s*-\s*(\d+)", text):
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo > hi:
            raise PlacementInputError(f"{text!r} is out of order (write {hi}-{lo})", field="seeds")
        return list(range(lo, hi + 1))
    if re.fullmatch(r"\d+(\s*,\s*\d+)*", text):
        seeds = [int(s) for s in text.split(",")]
        if seeds != sorted(seeds) or len(set(seeds)) != len(seeds):
            raise PlacementInputError(f"{text!r} must be strictly increasing", field="seeds")
        return seeds
    raise PlacementInputError(f"cannot read {text!r}", field="seeds", allowed=["A-B", "A,B,C", "N"])


def parse_policies(names: list[str] | None) -> list[str]:
    if not names:
        return [DEFAULT_POLICY]
    out: list[str] = []
    for name in names:
        for part in name.split(","):
            part = part.strip()
            chosen = list(POLICY_NAMES) if part == "all" else [part]
            for p in chosen:
                if p not in POLICY_NAMES:
                    raise PlacementInputError(f"unknown policy {p!r}", field="policy",
                                              allowed=[*POLICY_NAMES, "all"])
                if p not in out:
                    out.append(p)
    return out


def register(subparsers) -> None:
    p = subparsers.add_parser("simulate", help="replay a GPU trace through placement policies",
                              description=__doc__)
    p.add_argument("--policy", action="append", metavar="NAME",
                   help=f"policy to run, repeatable, or 'all' (default: {DEFAULT_POLICY}; "
                        f"known: {', '.join(POLICY_NAMES)})")
    p.add_argument("--pods", action="append", metavar="CSV",
                   help="pod trace CSV, repeatable (default: bundled openb default trace)")
    p.add_argument("--nodes", metavar="CSV", help="node list CSV (default: bundled openb GPU node list)")
    seeds = p.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", default=None, metavar="A-B", help=f"seeds (default: {DEFAULT_SEEDS})")
    seeds.add_argument("--seed", type=int, default=None, metavar="N", help="a single seed")
    p.add_argument("--tune", type=float, default=1.3, metavar="RATIO",
                   help="scale the workload to RATIO x cluster GPU capacity (default: 1.3; 0: as is)")
    p.add_argument("--mode", choices=("replay", "timeline"), default="replay",
                   help="replay: FGD paper protocol (pods never depart); timeline: the trace's own times")
    from .timeline_command import parse_load

    p.add_argument("--load", type=parse_load, default=None, metavar="L",
                   help="timeline mode: compress arrival gaps so the offered load is L x cluster GPU capacity "
                        "(default: the trace's own times; see docs/timeline.md)")
    p.add_argument("--ceiling", action="store_true",
                   help="replay mode: also bound what any scheduler could allocate at 100%% arrival (an exact "
                        "offline packing per seed; see docs/placement.md)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--plot", metavar="FILE.png", help="write allocation/fragmentation curves to FILE.png")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, metavar="N",
                   help="processes to use (default: all CPUs)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    policies = parse_policies(args.policy)
    seeds = [args.seed] if args.seed is not None else parse_seeds(args.seeds or DEFAULT_SEEDS)
    if args.tune < 0:
        raise PlacementInputError(f"{args.tune} must not be negative", field="tune")
    if args.workers < 1:
        raise PlacementInputError(f"{args.workers} must be at least 1", field="workers")
    if args.plot and not args.plot.lower().endswith(".png"):
        raise PlacementInputError(f"{args.plot!r} must end in .png", field="plot")
    if args.load is not None and args.mode != "timeline":
        raise PlacementInputError(f"applies only to --mode timeline (got --mode {args.mode})", field="--load")
    if args.ceiling and args.mode != "replay":
        raise PlacementInputError(f"applies only to --mode replay (got --mode {args.mode})", field="--ceiling")
    pods = args.pods or [None]
    if args.mode == "timeline":
        from .timeline_command import run_timeline

        return run_timeline(args, policies, pods)
    return _run_replay(args, policies, seeds, pods)


def _run_replay(args, policies: list[str], seeds: list[int], pods: list[str | None]) -> int:
    from .report import as_json, ceiling_table, plot, table
    from .runner import jobs_for, run_jobs, summarise
    from .trace import load_nodes, load_pods

    nodes = load_nodes(args.nodes)  # validate inputs up front: one clear error before any work starts
    traces = [load_pods(path) for path in pods]
    jobs = jobs_for(args.nodes, pods, policies, seeds, args.tune)
    results = _with_progress(jobs, args.workers, run_jobs)
    summaries = summarise(results)
    ceilings = []
    if args.ceiling:
        from .ceiling import summarise_ceilings

        ceilings = summarise_ceilings(nodes, traces, seeds, args.tune, args.workers)
    if args.plot:
        plot(summaries, args.plot, ceilings)
    if args.json:
        print(as_json(summaries, ceilings))
    else:
        print(table(summaries))
        if ceilings:
            print()
            print(ceiling_table(ceilings))
        if args.plot:
            print(f"plot: {args.plot}")
    return 0


def _with_progress(jobs, workers, run_jobs):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .console import stderr_console

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True, console=stderr_console()) as progress:
        task = progress.add_task(f"replaying {len(jobs)} runs", total=len(jobs))
        return run_jobs(jobs, workers, lambda r: progress.update(
            task, advance=1, description=f"{r.policy} seed {r.seed}"))
