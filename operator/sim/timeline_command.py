"""`fgpu simulate --mode timeline`: the trace's own arrival/departure times, per policy (one seed)."""
from __future__ import annotations

import json

from .trace import QOS_CLASSES, load_nodes, load_pods


def run_timeline(args, policies: list[str], pods: list[str | None]) -> int:
    from .command import _stderr_console
    from .timeline import run_timeline as replay_timeline

    nodes = load_nodes(args.nodes)
    traces = [load_pods(p, need_times=True) for p in pods]
    seed = args.seed if args.seed is not None else 42
    results = []
    with _stderr_console().status("replaying timelines") as status:
        for trace in traces:
            for policy in policies:
                status.update(f"timeline: {policy} on {trace.name}")
                results.append(replay_timeline(nodes, trace, policy, seed))
    if args.json:
        print(json.dumps({"results": [r.as_json() for r in results]}))
        return 0
    head = ["trace", "policy", "mean alloc %", "placed", "waited", "gave up", "wait mean s", "wait p95 s"]
    head += [f"slowdown {q}" for q in QOS_CLASSES]
    rows = []
    for r in results:
        j = r.as_json()
        rows.append([r.trace, r.policy, f"{j['mean_alloc_pct']:.2f}", str(r.placed), str(r.waited),
                     str(r.gave_up), f"{j['queue_delay_s']['mean']:.0f}", f"{j['queue_delay_s']['p95']:.0f}"]
                    + [f"{j['slowdown_by_qos'].get(q, {}).get('mean', 1.0):.2f}x" for q in QOS_CLASSES])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    print(f"slowdown: mean over sharing pods of (solo speed / co-located speed), model: {results[0].model_source}")
    if args.plot:
        _plot(results, args.plot)
        print(f"plot: {args.plot}")
    return 0


def _plot(results, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from pathlib import Path

    import matplotlib.pyplot as plt

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(10, 4))
    for r in results:
        series = r.alloc_over_time(100)
        ax.plot([t / 86400 for t in series], list(series.values()), label=f"{r.policy} ({r.trace})")
    ax.set(xlabel="trace time (days)", ylabel="GPU allocation (%)", title="Allocation over time (timeline mode)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
