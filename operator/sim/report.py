"""Reporting replay summaries: a readable table, the JSON object of `fgpu simulate --json`, and a plot."""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from .ceiling import CeilingSummary
from .runner import Summary

#: GPU allocation ratio (%) at 100% arrival on the default openb trace, seeds 42-51, from the FGD paper's
#: simulator (Weng et al., ATC'23; kubernetes-scheduler-simulator experiments).
PAPER_ALLOC_AT_100 = {"random": 86.30, "dotprod": 90.62, "clustering": 91.65, "packing": 91.78,
                      "bestfit": 92.86, "fgd": 95.23}


def seeds_label(seeds: list[int]) -> str:
    """'42-51' for a run of consecutive seeds, else the list as given ('42,44'), so a label never claims
    seeds that did not run."""
    if len(seeds) > 1 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(str(s) for s in seeds)


def as_json(summaries: Sequence[Summary], ceilings: Sequence[CeilingSummary] = ()) -> str:
    out: dict = {"results": [s.as_json() for s in summaries]}
    if ceilings:
        out["ceilings"] = [c.as_json() for c in ceilings]
    return json.dumps(finite(out), allow_nan=False)


def finite(value):
    """NaN (e.g. no arrivals reached 100% with --tune 0) as JSON null: bare NaN is not JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def ceiling_table(ceilings: Sequence[CeilingSummary]) -> str:
    """What no scheduler of each class can beat at 100% arrival, per trace (see sim/ceiling.py, online_bound.py)."""
    lines = ["ceiling at 100% arrival, by class of scheduler (integer programs; nodes and CPU/memory totals relaxed):"]
    for c in ceilings:
        lines.append(f"  {c.trace}: {c.alloc_all_placed_pct:.2f}% if it places every sharing pod (no policy here "
                     f"does); {c.alloc_non_refusing_pct:.2f}% if it never refuses a pod that fits (every policy "
                     f"here); {c.alloc_any_subset_pct:.2f}% for any scheduler (turning away "
                     f"{c.refused_pods:.0f} pods that fit)")
    return "\n".join(lines)


def table(summaries: Sequence[Summary]) -> str:
    """Plain-text table: allocation and fragmentation at 100% arrival, per (trace, policy)."""
    show_paper = any(s.trace == "default" and s.policy in PAPER_ALLOC_AT_100 for s in summaries)
    head = ["trace", "policy", "seeds", "alloc@100 %", "unalloc@100 %", "frag@100 %", "failed pods",
            "s/replay"] + (["paper alloc@100 %"] if show_paper else [])
    rows = []
    for s in summaries:
        seeds = seeds_label(s.seeds)
        row = [s.trace, s.policy, seeds, f"{s.alloc_at_100:.2f}", f"{s.unallocated_pct_at_100:.2f}",
               f"{s.frag_ratio.get(100, float('nan')):.2f}", f"{s.failed_pods:.0f}", f"{s.seconds_per_replay:.1f}"]
        if show_paper:
            paper = PAPER_ALLOC_AT_100.get(s.policy) if s.trace == "default" else None
            row.append(f"{paper:.2f}" if paper is not None else "-")
        rows.append(row)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
              for r in rows]
    return "\n".join(lines)


#: The bounds on the plot, by the class of scheduler each covers (field of CeilingSummary, label, line style).
BOUND_CLASSES = (
    ("alloc_any_subset_pct", "any scheduler\n(even one refusing pods that fit)", ":"),
    ("alloc_non_refusing_pct", "never refuses a pod that fits\n(every policy here)", "-"),
    ("alloc_all_placed_pct", "places every sharing pod\n(no policy here)", "--"),
)


def plot(summaries: Sequence[Summary], path: str | Path, ceilings: Sequence[CeilingSummary] = ()) -> Path:
    """Allocation-ratio and fragmentation-ratio curves per policy against arrived workload (paper Fig. 7-style),
    and between them every policy at 100% arrival beside the bounds there, each labelled by the class of
    scheduler it covers (when given)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (ax_alloc, ax_100, ax_frag) = plt.subplots(1, 3, figsize=(17, 5.2), width_ratios=(1, 0.85, 1))
    multi_trace = len({s.trace for s in summaries}) > 1
    colors = {}
    for s in summaries:
        label = f"{s.policy} ({s.trace})" if multi_trace else s.policy
        xs = sorted(s.alloc_ratio)
        (line,) = ax_alloc.plot(xs, [s.alloc_ratio[x] for x in xs], label=label, linewidth=1.4)
        colors[(s.trace, s.policy)] = line.get_color()
        xf = sorted(s.frag_ratio)
        ax_frag.plot(xf, [s.frag_ratio[x] for x in xf], label=label, linewidth=1.4)
    ax_alloc.plot([0, 100], [0, 100], color="grey", linestyle=":", linewidth=1)
    ax_alloc.set(xlabel="arrived workload (% of cluster GPU capacity)", ylabel="GPU allocation ratio (%)",
                 xlim=(0, 130), ylim=(0, 100), title="GPUs allocated")
    ax_frag.set(xlabel="arrived workload (% of cluster GPU capacity)", ylabel="fragmentation / idle GPU (%)",
                xlim=(0, 130), ylim=(0, 100), title="Fragmentation ratio (FGD measure)")
    ax_alloc.axvline(100, color="grey", linewidth=0.6)
    for ax in (ax_alloc, ax_frag):
        ax.grid(alpha=0.3)
    ax_alloc.legend(loc="lower right", fontsize=8)
    _at_full(ax_100, summaries, ceilings, colors, multi_trace)
    seeds = summaries[0].seeds if summaries else []
    title = "fgpu simulate"
    if seeds:
        which = f"seeds {seeds_label(seeds)}" if len(seeds) > 1 else f"seed {seeds[0]}"
        title += f": {', '.join(sorted({s.trace for s in summaries}))}, {which}"
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _at_full(ax, summaries: Sequence[Summary], ceilings: Sequence[CeilingSummary], colors: dict,
             multi_trace: bool) -> None:
    """Every policy's allocation at 100% arrival (dots, left) beside the bounds (lines, right), each labelled
    with its value; labels are spread apart so close values (clustering 91.73 / packing 91.81) stay legible."""
    points = [(s.alloc_at_100, f"{s.policy} ({s.trace})" if multi_trace else s.policy, colors[(s.trace, s.policy)])
              for s in summaries if s.alloc_ratio and math.isfinite(s.alloc_at_100)]
    bounds = []
    for c in ceilings:
        for field, label, style in BOUND_CLASSES:
            value = getattr(c, field)
            if value is not None and math.isfinite(value):
                bounds.append((value, f"{label} ({c.trace})" if multi_trace else label, style))
    ax.set(title="At 100% arrival: policies and bounds", ylabel="GPU allocation ratio (%)", xlim=(0, 1))
    ax.set_xticks([])
    ax.grid(alpha=0.3, axis="y")
    values = [v for v, _, _ in points + bounds]
    if not values:
        return
    lo, hi = min(values), max(values)
    pad = max(0.5, 0.1 * (hi - lo))
    gap = (hi - lo + 2 * pad) / 26  # one label's height in data units (~26 labels fit the panel)
    ax.set_ylim(lo - pad, hi + max(pad, 3 * gap))
    for value, _, color in points:
        ax.plot([0.04], [value], "o", color=color, markersize=6)
    for (value, label, color), y in zip(sorted(points), _spread([v for v, _, _ in sorted(points)], gap), strict=True):
        ax.annotate(f"{label} {value:.2f}", (0.04, value), (0.08, y), fontsize=8, va="center", color=color,
                    arrowprops={"arrowstyle": "-", "color": color, "linewidth": 0.5})
    for value, _, style in bounds:
        ax.plot([0.3, 0.4], [value] * 2, color="black", linestyle=style, linewidth=1.4)
    ax.text(0.97, 0.03, "dots: policies (mean over seeds)\nlines: upper bounds, by the class of\nscheduler each covers",
            transform=ax.transAxes, fontsize=7, ha="right", va="bottom", color="dimgrey")
    for (value, label, _), y in zip(sorted(bounds), _spread([v for v, _, _ in sorted(bounds)], 2 * gap),
                                    strict=True):
        ax.annotate(f"<= {value:.2f} {label}", (0.4, value), (0.43, y), fontsize=7, va="center",
                    arrowprops={"arrowstyle": "-", "color": "black", "linewidth": 0.5})


def _spread(values: Sequence[float], gap: float) -> list[float]:
    """Label positions for sorted `values`: each at its value, pushed apart to at least `gap`, centred on them."""
    ys = list(values)
    for i in range(1, len(ys)):
        ys[i] = max(ys[i], ys[i - 1] + gap)
    shift = (sum(ys) - sum(values)) / len(ys) if ys else 0.0
    ys = [y - shift for y in ys]
    for i in range(1, len(ys)):
        ys[i] = max(ys[i], ys[i - 1] + gap)
    return ys
