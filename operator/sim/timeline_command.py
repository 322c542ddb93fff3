"""`fgpu simulate --mode timeline`: the trace's arrivals and lifetimes, per policy (one seed), optionally
with arrivals compressed to a chosen offered load (`--load`)."""
from __future__ import annotations

import argparse
import json
import math

from fgpu_contracts.cli import number

from .trace import QOS_CLASSES, load_nodes, load_pods


def parse_load(text: str) -> float:
    """`--load` value: a finite number above 0 (whether it is reachable depends on the trace)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an offered load (allowed: a number above 0, a fraction of cluster GPU capacity, e.g. 0.4)")
    return value


def parse_priority_map(text: str) -> dict[str, int]:
    """`--priority-map LS=1000,BE=0`: a priority (PriorityClass value) per QoS class of the trace."""
    out: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        qos, _, value = part.partition("=")
        if qos.strip() not in QOS_CLASSES or not value.strip().lstrip("-").isdigit() or abs(int(value)) > 10**9:
            raise argparse.ArgumentTypeError(
                f"cannot read {part[:40]!r} (allowed: QOS=PRIORITY, comma-separated, QOS one of "
                f"{', '.join(QOS_CLASSES)}, PRIORITY an integer within +-1e9)")
        out[qos.strip()] = int(value)
    if not out:
        raise argparse.ArgumentTypeError(f"{text!r} names no QoS class (allowed: e.g. LS=1000,BE=0)")
    return out


def parse_as_mig(text: str) -> tuple[str, ...]:
    """`--as-mig all` or `--as-mig LS,Guaranteed`: which pods ask for MIG instances instead of shares."""
    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    if parts == ("all",):
        return parts
    bad = [p for p in parts if p not in QOS_CLASSES]
    if not parts or bad:
        raise argparse.ArgumentTypeError(f"cannot read {text!r} (allowed: all, or QoS classes from "
                                         f"{', '.join(QOS_CLASSES)}, comma-separated)")
    return parts


def register_cluster_options(p) -> None:
    """Timeline mode's options for today's clusters: MIG pods, priorities, preemption, re-layout time."""
    from .timeline import DEFAULT_RECONFIG_S

    p.add_argument("--as-mig", type=parse_as_mig, default=None, metavar="WHICH",
                   help="timeline mode: pods (all, or of these QoS classes) ask for the smallest MIG profile "
                        "holding their share instead of the share (docs/mig_modes.md)")
    p.add_argument("--priority-map", type=parse_priority_map, default=None, metavar="QOS=N,...",
                   help="timeline mode: a priority per QoS class, e.g. LS=1000,Guaranteed=1000,BE=0,Burstable=0")
    p.add_argument("--preemption", action="store_true",
                   help="timeline mode: a pod that fits nowhere evicts lower-priority pods (kube-scheduler's "
                        "order; the victims start over)")
    p.add_argument("--mig-reconfig-s", type=number(float, lo=0, hi=3600), default=DEFAULT_RECONFIG_S,
                   metavar="S", help=f"timeline mode: seconds a dynamic-MIG re-layout takes (default "
                                     f"{DEFAULT_RECONFIG_S:g})")


def check_timeline_only(args) -> None:
    from fgpu_operator.placement.errors import PlacementInputError

    from .timeline import DEFAULT_RECONFIG_S

    for flag, value, unset in (("--as-mig", args.as_mig, None), ("--priority-map", args.priority_map, None),
                               ("--preemption", args.preemption, False),
                               ("--mig-reconfig-s", args.mig_reconfig_s, DEFAULT_RECONFIG_S)):
        if value != unset:
            raise PlacementInputError(f"applies only to --mode timeline (got --mode {args.mode})", field=flag)


def shape_trace(trace, nodes, as_mig_classes, priority_map):
    """The trace as this cluster is asked: priorities from the QoS map, shares turned into MIG requests."""
    from dataclasses import replace

    from fgpu_operator.placement.errors import PlacementInputError

    from .mig_nodes import as_mig

    model = None
    if as_mig_classes:
        models = sorted({g.model for n in nodes for g in n.gpus if g.mig or g.mig_dynamic})
        if len(models) != 1:
            raise PlacementInputError(f"needs the MIG nodes to be of one GPU model (got {', '.join(models) or 'none'})",
                                      field="--as-mig", allowed=["a nodes file whose MIG nodes share one model"])
        model = models[0]
    pods = []
    for p in trace.pods:
        r = p.request
        if model and not r.is_mig and (as_mig_classes == ("all",) or r.qos in as_mig_classes):
            r = as_mig(r, model)
        prio = priority_map[r.qos] if priority_map and r.qos in priority_map else p.priority
        pods.append(replace(p, request=r, priority=prio))
    return replace(trace, pods=tuple(pods))


#: Below this offered load (fraction of GPU capacity) nothing waits and allocation stays near 0: say how to
#: raise it, since the bundled trace offers 0.59% on its own times.
LOW_LOAD = 0.05


def run_timeline(args, policies: list[str], pods: list[str | None], labels: list[str] | None = None) -> int:
    from dataclasses import replace

    from .progress import Progress
    from .timeline import DEFAULT_RECONFIG_S
    from .timeline import run_timeline as replay_timeline

    nodes = load_nodes(args.nodes)
    traces = [load_pods(p, need_times=True) for p in pods]
    as_mig_classes, priority_map = getattr(args, "as_mig", None), getattr(args, "priority_map", None)
    if as_mig_classes or priority_map:
        traces = [shape_trace(t, nodes, as_mig_classes, priority_map) for t in traces]
    if labels is not None:
        traces = [replace(t, name=label) for t, label in zip(traces, labels, strict=True)]
    seed = args.seed if args.seed is not None else 42
    load = getattr(args, "load", None)
    if load is not None:  # an unreachable --load is refused before any replay starts
        from fgpu_operator.placement.model import MILLI, Cluster

        from .timeline import arrival_speedup

        capacity = Cluster(list(nodes)).total_gpus * MILLI
        for trace in traces:
            arrival_speedup(trace, capacity, load)
    if getattr(args, "protected_share", None) is not None:
        from .qos_timeline import report_qos

        return report_qos(args, nodes, traces, policies, seed, load)
    results = []
    with Progress(f"replaying {len(traces) * len(policies)} timelines", len(traces) * len(policies)) as bar:
        for trace in traces:
            for policy in policies:
                results.append(replay_timeline(nodes, trace, policy, seed, load=load,
                                               preemption=getattr(args, "preemption", False),
                                               reconfig_s=getattr(args, "mig_reconfig_s", DEFAULT_RECONFIG_S)))
                bar.advance(f"{policy} on {trace.name}")
    low = [r for r in results if load is None and r.offered < LOW_LOAD]
    if low:
        import sys

        print(f"note: {low[0].trace} offers only {100 * low[0].offered:.2f}% of GPU capacity on its own times, so "
              "little ever waits; --load 0.4 (say) compresses its arrivals to 40% (docs/timeline.md)",
              file=sys.stderr)
    if args.json:
        from .report import finite

        print(json.dumps(finite({"results": [r.as_json() for r in results]}), allow_nan=False))
        return 0
    seen = set()
    for r in results:
        if r.trace not in seen:
            seen.add(r.trace)
            how = "the trace's own times" if load is None else f"arrival gaps divided by {r.speedup:.4g}"
            print(f"{r.trace}: {how}; offered load {100 * r.offered:.2f}% of {r.total_gpus} GPUs over the busy "
                  f"period ({_duration(r.busy[1] - r.busy[0])})")
    head = ["trace", "policy", "alloc % mean", "p95", "max", "requested %", "waited", "left waiting",
            "unplaceable", "wait mean s", "wait p95 s"]
    head += [f"slowdown {q}" for q in QOS_CLASSES]
    rows = []
    for r in results:
        j = r.as_json()
        a, q = j["alloc_pct"], j["queue_delay_s"]
        rows.append([r.trace, r.policy, f"{a['mean']:.2f}", f"{a['p95']:.2f}", f"{a['max']:.2f}",
                     f"{j['requested_pct']['mean']:.2f}", str(r.waited), str(r.waiting_at_end), str(r.unplaceable),
                     f"{q['mean']:.0f}", f"{q['p95']:.0f}"]
                    + [f"{j['slowdown_by_qos'].get(c, {}).get('mean', 1.0):.2f}x" for c in QOS_CLASSES])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    print("alloc/requested: time-weighted over the busy period; slowdown: mean over sharing pods of "
          f"(solo speed / co-located speed), model: {results[0].model_source}")
    if _uses_cluster_features(args, nodes):
        print()
        print(cluster_table(results))
    if args.plot:
        _plot(results, args.plot)
        print(f"plot: {args.plot}")
    return 0


def _uses_cluster_features(args, nodes) -> bool:
    return bool(getattr(args, "preemption", False) or getattr(args, "as_mig", None)
                or getattr(args, "priority_map", None) or any(g.mig or g.mig_dynamic for n in nodes for g in n.gpus))


def cluster_table(results) -> str:
    """What MIG, priorities and preemption did: held vs asked GPU, pending time per priority, evictions and
    re-layouts."""
    priorities = sorted({p for r in results for p in r.pending_by_priority}, reverse=True)
    head = ["trace", "policy", "held %", "asked %"] + [f"pending p={p} mean s" for p in priorities] + [
        f"pending p={p} p95 s" for p in priorities] + ["preempted", "re-layouts", "re-layouts/h"]
    rows = []
    for r in results:
        j = r.as_json()
        pend = j["pending_s_by_priority"]
        rows.append([r.trace, r.policy, f"{j['alloc_pct']['mean']:.2f}", f"{j['served_pct']['mean']:.2f}"]
                    + [f"{pend[str(p)]['mean']:.0f}" if str(p) in pend else "-" for p in priorities]
                    + [f"{pend[str(p)]['p95']:.0f}" if str(p) in pend else "-" for p in priorities]
                    + [str(r.preempted), str(r.reconfigurations), f"{r.reconfigurations_per_hour():.1f}"])
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.append("held: GPU held (a MIG instance counts its compute slices); asked: the running pods' own shares; "
                 "pending: arrival (or eviction) to start, re-layout time included; re-layouts/h over the busy "
                 "period")
    return "\n".join(lines)


_UNITS = (("days", 86400), ("hours", 3600), ("minutes", 60), ("seconds", 1))


def _unit(seconds: float) -> tuple[str, int]:
    """The largest time unit that `seconds` spans at least once (seconds for anything shorter)."""
    return next(((name, size) for name, size in _UNITS if seconds >= size), _UNITS[-1])


def _duration(seconds: float) -> str:
    name, size = _unit(seconds)
    return f"{seconds / size:.1f} {name}"


def _plot(results, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from pathlib import Path

    import matplotlib.pyplot as plt

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(10, 4))
    unit, size = _unit(max(r.busy[1] - r.busy[0] for r in results))
    for r in results:
        series = r.alloc_over_time(100)
        ax.plot([(t - r.busy[0]) / size for t in series], list(series.values()), label=f"{r.policy} ({r.trace})")
    ax.set(xlabel=f"time into the busy period ({unit})", ylabel="GPU allocation (%)",
           title="Allocation over time (timeline mode)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
