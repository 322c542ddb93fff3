"""`fgpu simulate`: replay a GPU-cluster trace through placement policies (FGD paper protocol or timeline)."""
from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from fgpu_operator.placement.errors import PlacementInputError
from fgpu_operator.placement.policies import ALLOCATORS, DEFAULT_POLICY, POLICY_NAMES

from fgpu_contracts.cli import check_writable, number
from fgpu_contracts.extras import need

DEFAULT_SEEDS = "42-51"
DEFAULT_TUNE = 1.3
MAX_SEEDS = 1000
#: Above 1.3 x capacity the replay only appends pods past the last arrival bin it reports (130%); 10 bounds
#: the work (and refuses inf, which would append pods forever).
MAX_TUNE = 10.0
SEED_OPTION = number(int, lo=0, hi=2**32 - 1, why="numpy's seed range")


def parse_seeds(text: str) -> list[int]:
    """'42-51', '42,43,47' or '42' -> ascending seed list; anything else is an error naming the format."""
    text = text.strip()
    if m := re.fullmatch(r"(\d+)\s*-\s*(\d+)", text):
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo > hi:
            raise PlacementInputError(f"{text!r} is out of order (write {hi}-{lo})", field="--seeds")
        seeds = list(range(lo, min(hi, lo + MAX_SEEDS) + 1))
    elif re.fullmatch(r"\d+(\s*,\s*\d+)*", text):
        seeds = [int(s) for s in text.split(",")]
        if seeds != sorted(seeds) or len(set(seeds)) != len(seeds):
            raise PlacementInputError(f"{text!r} must be strictly increasing", field="--seeds")
    else:
        raise PlacementInputError(f"cannot read {text!r}", field="--seeds", allowed=["A-B", "A,B,C", "N"])
    if len(seeds) > MAX_SEEDS or seeds[-1] > 2**32 - 1:
        raise PlacementInputError(f"{text!r} is too many or too large", field="--seeds",
                                  allowed=[f"at most {MAX_SEEDS} seeds, each 0..{2**32 - 1}"])
    return seeds


def trace_labels(paths: list[str | None]) -> list[str]:
    """One label per --pods file: its trace name (openb_pod_list_X.csv -> X), or, where two files share a
    name, enough of their paths to tell them apart (a/default, b/default). The same file twice is an error."""
    from .trace import pods_path, trace_name

    files = [pods_path(p) for p in paths]
    seen: dict[Path, str] = {}
    for given, f in zip(paths, files, strict=True):
        key = f.resolve()
        if key in seen:
            raise PlacementInputError(f"{given or 'the bundled default trace'} is given twice (also as {seen[key]})",
                                      field="--pods", allowed=["each trace once"])
        seen[key] = str(given or "the bundled default trace")
    labels = [trace_name(f) for f in files]
    for name in {label for label in labels if labels.count(label) > 1}:
        same = [i for i, label in enumerate(labels) if label == name]
        for depth in range(1, 256):  # the files differ, so some depth of their folders tells them apart
            named = {i: "/".join((*files[i].resolve().parent.parts[-depth:], name)) for i in same}
            if len(set(named.values())) == len(same):
                break
        for i in same:
            labels[i] = named[i]
    return labels


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
                    raise PlacementInputError(f"unknown policy {p!r}", field="--policy",
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
    p.add_argument("--allocator", action="append", metavar="NAME", choices=ALLOCATORS,
                   help="also replay another scheduler's allocation rule beside the policies, repeatable "
                        f"(known: {', '.join(ALLOCATORS)}: kube-scheduler's DRA allocator; see docs/dra.md)")
    from .trace import BUNDLED_TRACES

    p.add_argument("--pods", action="append", metavar="CSV",
                   help="pod trace CSV (or .csv.gz), or the name of a bundled openb trace, repeatable (default: "
                        f"default; bundled: {', '.join(BUNDLED_TRACES)})")
    p.add_argument("--nodes", metavar="CSV", help="node list CSV (default: bundled openb GPU node list)")
    seeds = p.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", default=None, metavar="A-B",
                       help=f"replay mode: seeds, A-B or A,B,C (default: {DEFAULT_SEEDS})")
    seeds.add_argument("--seed", type=SEED_OPTION, default=None, metavar="N",
                       help="a single seed (timeline mode: its tie-breaking seed, default 42)")
    p.add_argument("--tune", type=number(float, lo=0, hi=MAX_TUNE), default=None, metavar="RATIO",
                   help=f"replay mode: scale the workload to RATIO x cluster GPU capacity (default: {DEFAULT_TUNE}; "
                        f"0: as is; at most {MAX_TUNE:g})")
    p.add_argument("--mode", choices=("replay", "timeline"), default="replay",
                   help="replay: FGD paper protocol (pods never depart); timeline: the trace's own times")
    from .timeline_command import parse_load

    p.add_argument("--load", type=parse_load, default=None, metavar="L",
                   help="timeline mode: compress arrival gaps so the offered load is L x cluster GPU capacity, "
                        "e.g. 0.4 (default: the trace's own times, which offer the bundled trace only 0.59%%; "
                        "see docs/timeline.md)")
    p.add_argument("--protected-share", type=number(float, lo=0, hi=1), default=None, metavar="S",
                   help="timeline mode: protect S of the sharing pods (high priority, bound --slo) and report "
                        "SLO attainment beside allocation; policies also fgpu+qos[@margin|~error] and naive "
                        "(docs/qos.md)")
    p.add_argument("--slo", type=number(float, lo=1, hi=100, lo_open=True), default=1.2, metavar="B",
                   help="with --protected-share: the protected pods' slowdown bound (default 1.2)")
    from .timeline_command import register_cluster_options

    register_cluster_options(p)
    p.add_argument("--ceiling", action="store_true",
                   help="replay mode: also bound what a scheduler could allocate at 100%% arrival, per class: "
                        "places every sharing pod / never refuses a pod that fits / any (integer programs per "
                        "seed, seconds to minutes each; see docs/placement.md)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--plot", metavar="FILE.png", help="write allocation/fragmentation curves to FILE.png")
    p.add_argument("--workers", type=number(int, lo=1, hi=1024), default=os.cpu_count() or 1, metavar="N",
                   help="processes to use (default: all CPUs)")
    p.set_defaults(func=run, extra="plan")


def run(args: argparse.Namespace) -> int:
    """Every option is checked here, before any file is read or any replay runs."""
    if args.protected_share is not None:
        if args.mode != "timeline":
            raise PlacementInputError(f"applies only to --mode timeline (got --mode {args.mode})",
                                      field="--protected-share")
        from .qos_timeline import parse_qos_policies

        policies = parse_qos_policies(args.policy)
    else:
        policies = parse_policies(args.policy)
    policies += [a for a in dict.fromkeys(args.allocator or []) if a not in policies]
    seeds = [args.seed] if args.seed is not None else parse_seeds(args.seeds or DEFAULT_SEEDS)
    if args.plot:
        if not args.plot.lower().endswith(".png"):
            raise PlacementInputError(f"{args.plot!r} must end in .png", field="--plot")
        check_writable(args.plot, "--plot")
    if args.load is not None and args.mode != "timeline":
        raise PlacementInputError(f"applies only to --mode timeline (got --mode {args.mode})", field="--load")
    if args.mode != "timeline":
        from .timeline_command import check_timeline_only

        check_timeline_only(args)
    if args.ceiling and args.mode != "replay":
        raise PlacementInputError(f"applies only to --mode replay (got --mode {args.mode})", field="--ceiling")
    if args.mode == "timeline":
        if args.tune is not None:
            raise PlacementInputError(f"applies only to --mode replay (timeline mode replays the trace's own pods; "
                                      f"to change its load use --load, got --tune {args.tune:g})", field="--tune")
        if args.seeds is not None:
            raise PlacementInputError(f"timeline mode runs one seed (got --seeds {args.seeds})", field="--seeds",
                                      allowed=["--seed N"])
    need(*(["matplotlib"] if args.plot else []), *(["scipy"] if args.ceiling else []))
    pods = args.pods or [None]
    labels = trace_labels(pods)
    if args.mode == "timeline":
        from .timeline_command import run_timeline

        return run_timeline(args, policies, pods, labels)
    return _run_replay(args, policies, seeds, pods, labels)


def _run_replay(args, policies: list[str], seeds: list[int], pods: list[str | None], labels: list[str]) -> int:
    from dataclasses import replace

    from .report import as_json, ceiling_table, plot, table
    from .runner import jobs_for, run_jobs, summarise
    from .trace import load_nodes, load_pods

    tune = DEFAULT_TUNE if args.tune is None else args.tune
    nodes = load_nodes(args.nodes)  # validate inputs up front: one clear error before any work starts
    traces = [replace(load_pods(path), name=label) for path, label in zip(pods, labels, strict=True)]
    if args.ceiling:
        from .ceiling import check_bounded

        check_bounded(traces)
    jobs = jobs_for(args.nodes, pods, policies, seeds, tune, labels)
    results = _with_progress(jobs, args.workers, run_jobs)
    summaries = summarise(results)
    ceilings = []
    if args.ceiling:
        from .ceiling import summarise_ceilings
        from .progress import Progress

        with Progress(f"bounding the ceiling ({len(traces) * len(seeds)} exact packings)",
                      len(traces) * len(seeds)) as bar:
            ceilings = summarise_ceilings(nodes, traces, seeds, tune, args.workers, on_done=bar.advance)
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
    from .progress import Progress

    with Progress(f"replaying {len(jobs)} runs", len(jobs)) as bar:
        return run_jobs(jobs, workers, lambda r: bar.advance(f"{r.policy} seed {r.seed}"))
