"""`fgpu simulate --mode timeline`: the trace's arrivals and lifetimes, per policy (one seed), optionally
with arrivals compressed to a chosen offered load (`--load`)."""
from __future__ import annotations

import argparse
import json
import math

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


#: Below this offered load (fraction of GPU capacity) nothing waits and allocation stays near 0: say how to
#: raise it, since the bundled trace offers 0.59% on its own times.
LOW_LOAD = 0.05


def run_timeline(args, policies: list[str], pods: list[str | None], labels: list[str] | None = None) -> int:
    from dataclasses import replace

    from .progress import Progress
    from .timeline import run_timeline as replay_timeline

    nodes = load_nodes(args.nodes)
    traces = [load_pods(p, need_times=True) for p in pods]
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
                results.append(replay_timeline(nodes, trace, policy, seed, load=load))
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
    if args.plot:
        _plot(results, args.plot)
        print(f"plot: {args.plot}")
    return 0


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
