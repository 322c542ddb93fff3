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
    """What no scheduler can beat at 100% arrival, per trace (offline exact packing; see sim/ceiling.py)."""
    lines = ["ceiling at 100% arrival (offline exact packing, nodes/CPU/memory ignored):"]
    for c in ceilings:
        lines.append(f"  {c.trace}: {c.alloc_all_placed_pct:.2f}% for any scheduler that places every sharing pod; "
                     f"{c.alloc_any_subset_pct:.2f}% if it may turn away {c.refused_pods:.0f} feasible pods")
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


def plot(summaries: Sequence[Summary], path: str | Path, ceilings: Sequence[CeilingSummary] = ()) -> Path:
    """Allocation-ratio and fragmentation-ratio curves per policy against arrived workload (paper Fig. 7-style),
    with each trace's all-placed ceiling (a bound at 100% arrival) marked there when given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (ax_alloc, ax_frag) = plt.subplots(1, 2, figsize=(12, 4.5))
    multi_trace = len({s.trace for s in summaries}) > 1
    for s in summaries:
        label = f"{s.policy} ({s.trace})" if multi_trace else s.policy
        xs = sorted(s.alloc_ratio)
        ax_alloc.plot(xs, [s.alloc_ratio[x] for x in xs], label=label, linewidth=1.4)
        xf = sorted(s.frag_ratio)
        ax_frag.plot(xf, [s.frag_ratio[x] for x in xf], label=label, linewidth=1.4)
    for c in ceilings:
        label = f"ceiling, every sharing pod placed ({c.trace})" if multi_trace else "ceiling, every sharing pod placed"
        ax_alloc.plot([92, 108], [c.alloc_all_placed_pct] * 2, color="black", linewidth=1.2, label=label)
    ax_alloc.plot([0, 100], [0, 100], color="grey", linestyle=":", linewidth=1)
    ax_alloc.set(xlabel="arrived workload (% of cluster GPU capacity)", ylabel="GPU allocation ratio (%)",
                 xlim=(0, 130), ylim=(0, 100), title="GPUs allocated")
    ax_frag.set(xlabel="arrived workload (% of cluster GPU capacity)", ylabel="fragmentation / idle GPU (%)",
                xlim=(0, 130), ylim=(0, 100), title="Fragmentation ratio (FGD measure)")
    ax_alloc.axvline(100, color="grey", linewidth=0.6)
    _zoom_near_full(ax_alloc, summaries, ceilings)
    for ax in (ax_alloc, ax_frag):
        ax.grid(alpha=0.3)
    ax_alloc.legend(loc="lower right", fontsize=8)
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


def _zoom_near_full(ax, summaries: Sequence[Summary], ceilings: Sequence[CeilingSummary]) -> None:
    """An inset of the allocation curves from 85% arrival on, within 4 points of the best, where the leading
    policies (and the ceiling) differ."""
    at_100 = [s.alloc_at_100 for s in summaries if s.alloc_ratio]
    if not at_100:
        return
    top = max([*at_100, *(c.alloc_all_placed_pct for c in ceilings)])
    inset = ax.inset_axes([0.06, 0.55, 0.36, 0.4])
    for line in ax.get_lines():
        inset.plot(*line.get_data(), color=line.get_color(), linewidth=line.get_linewidth(),
                   linestyle=line.get_linestyle())
    inset.set(xlim=(85, 130), ylim=(max(min(at_100) - 1.0, top - 4.0), top + 0.6))
    inset.axvline(100, color="grey", linewidth=0.6)
    inset.tick_params(labelsize=7)
    inset.grid(alpha=0.3)
