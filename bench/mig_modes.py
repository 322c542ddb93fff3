"""What MIG and preemption buy: the openb default trace on its own 1213 nodes with every GPU an H100, in four
ways of serving GPU requests, timeline mode (`fgpu simulate --mode timeline`'s engine, one seed):

    python bench/mig_modes.py                       # table; docs/mig_modes.{png,json}
    python bench/mig_modes.py --load 0.3 --out /tmp/m

  fractional  every GPU shared by fractions (fgpu's default)
  static      every GPU in MIG mode with a fixed layout, the layouts in proportion to the trace's demand
              for each profile (the best an administrator who knew the demand could fix); pods ask for the
              smallest profile holding their share (docs/mig_modes.md), whole-GPU pods for 7g instances
  dynamic     every GPU in MIG mode, no instance at first; idle instances re-laid on demand (mig_plan),
              each re-layout taking --reconfig-s before its pod runs
  mixed       half the nodes (every other one) fractional, half dynamic MIG; latency-sensitive (LS) pods ask
              for MIG instances, the others for shares or whole GPUs

Priorities: LS and Guaranteed pods 1000, BE and Burstable 0 (the trace's QoS classes); preemption on in every
mode. Arrivals are compressed to the same offered load in every mode (--load, of the trace's own shares).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

from fgpu_operator.sim.mig_nodes import as_mig
from fgpu_operator.sim.timeline import DEFAULT_RECONFIG_S, run_timeline
from fgpu_operator.sim.timeline_command import shape_trace
from fgpu_operator.sim.trace import bundled_path, load_nodes, load_pods

from simgpu import mig

MODEL = "H100"
PRIORITIES = {"LS": 1000, "Guaranteed": 1000, "BE": 0, "Burstable": 0}
HIGH, LOW = 1000, 0
#: The fixed layouts the static mode chooses from: one per profile it serves, each cut as finely into that
#: profile as the rules allow (what the remaining slices can still hold is added by simgpu's check).
LAYOUTS = {"7g.80gb": "7g.80gb", "4g.40gb": "4g.40gb+3g.40gb", "3g.40gb": "2*3g.40gb",
           "2g.20gb": "3*2g.20gb+1g.10gb", "1g.10gb": "7*1g.10gb"}


def node_rows() -> list[dict[str, str]]:
    import csv

    with open(bundled_path("openb_node_list_gpu_node.csv"), newline="") as f:
        return list(csv.DictReader(f))


def write_nodes(path: Path, rows: list[dict[str, str]], modes: list[tuple[str, str]]) -> Path:
    with open(path, "w") as f:
        f.write("sn,cpu_milli,memory_mib,gpu,model,mig,mig_layout\n")
        for row, (m, layout) in zip(rows, modes, strict=True):
            gpu = int(row["gpu"])
            f.write(f"{row['sn']},{row['cpu_milli']},{row['memory_mib']},{gpu},{MODEL},"
                    f"{m if gpu else ''},{layout if gpu else ''}\n")
    return path


def static_layouts(rows: list[dict[str, str]], trace) -> list[tuple[str, str]]:
    """Per node, a fixed layout: GPUs split among LAYOUTS in proportion to the trace's GPU-time demand for
    each profile (compute slices x lifetime), whole-GPU (7g) layouts on the nodes with the most GPUs first,
    since multi-GPU pods need all their instances on one node."""
    demand: dict[str, float] = {}
    for p in trace.pods:
        r = as_mig(p.request, MODEL)
        if r.is_mig:
            life = (p.deletion_time or p.creation_time) - p.creation_time
            slices = mig.get_profile(MODEL, r.mig_profile).compute_slices
            demand[r.mig_profile] = demand.get(r.mig_profile, 0.0) + r.num_gpu * slices * max(life, 1.0)
    total_gpus = sum(int(r["gpu"]) for r in rows)
    weight = sum(demand.values())
    per_gpu = {prof: mig.get_profile(MODEL, prof).compute_slices * sum(
        _expand(part).count(prof) for part in LAYOUTS[prof].split("+")) for prof in LAYOUTS}
    # GPUs each layout gets: its profile's share of demand, over the compute slices that layout offers it.
    want = {prof: demand.get(prof, 0.0) / weight * total_gpus * 7 / per_gpu[prof] for prof in LAYOUTS}
    scale = total_gpus / sum(want.values())
    quota = {prof: int(round(w * scale)) for prof, w in want.items()}
    order = sorted(range(len(rows)), key=lambda i: -int(rows[i]["gpu"]))
    out: list[tuple[str, str]] = [("", "")] * len(rows)
    sequence = [p for p in LAYOUTS if quota[p] > 0]
    k = 0
    for i in order:
        gpus = int(rows[i]["gpu"])
        while k < len(sequence) - 1 and quota[sequence[k]] <= 0:
            k += 1
        prof = sequence[k]
        quota[prof] -= gpus
        out[i] = ("static", LAYOUTS[prof])
    return out


def _expand(part: str) -> list[str]:
    n, _, name = part.rpartition("*")
    return [name] * (int(n) if n else 1)


def run_modes(load: float, reconfig_s: float, seed: int, tmp: Path) -> list[tuple[str, object, float]]:
    rows = node_rows()
    base = load_pods(None, need_times=True)
    modes = {
        "fractional": ([("", "")] * len(rows), None),
        "static": (static_layouts(rows, base), ("all",)),
        "dynamic": ([("dynamic", "")] * len(rows), ("all",)),
        "mixed": ([("dynamic", "") if i % 2 else ("", "") for i in range(len(rows))], ("LS",)),
    }
    out = []
    for name, (layout, which) in modes.items():
        nodes = load_nodes(write_nodes(tmp / f"{name}.csv", rows, layout))
        trace = shape_trace(base, nodes, which, PRIORITIES)
        started = time.perf_counter()
        result = run_timeline(nodes, trace, "fgpu", seed, load=load, preemption=True, reconfig_s=reconfig_s)
        seconds = time.perf_counter() - started
        print(f"  {name}: {seconds:.0f} s", file=sys.stderr)
        out.append((name, result, seconds))
    return out


def table(results) -> list[dict]:
    rows = []
    for name, r, seconds in results:
        j = r.as_json()
        pend = j["pending_s_by_priority"]
        rows.append({
            "mode": name, "held_pct": j["alloc_pct"]["mean"], "asked_pct": j["served_pct"]["mean"],
            "requested_pct": j["requested_pct"]["mean"], "waiting_at_end": j["pods_waiting_at_end"],
            "pending_high_mean_s": pend.get(str(HIGH), {}).get("mean", 0.0),
            "pending_high_p95_s": pend.get(str(HIGH), {}).get("p95", 0.0),
            "pending_low_mean_s": pend.get(str(LOW), {}).get("mean", 0.0),
            "pending_low_p95_s": pend.get(str(LOW), {}).get("p95", 0.0),
            "preempted": j["pods_preempted"], "relayouts": j["mig_reconfigurations"],
            "relayouts_per_hour": j["mig_reconfigurations_per_hour"], "seconds": round(seconds, 1),
        })
    return rows


def print_table(rows: list[dict], load: float, reconfig_s: float, busy_s: float) -> None:
    print(f"openb default trace, 1213 nodes / 6212 H100s, offered load {load:g} (busy period "
          f"{busy_s / 60:.1f} min), policy fgpu, preemption on, re-layout {reconfig_s:g} s")
    head = ["mode", "held %", "asked %", "left waiting", "pending high mean/p95 s", "pending low mean/p95 s",
            "preempted", "re-layouts", "re-layouts/h"]
    cells = [[r["mode"], f"{r['held_pct']:.1f}", f"{r['asked_pct']:.1f}", str(r["waiting_at_end"]),
              f"{r['pending_high_mean_s']:.0f} / {r['pending_high_p95_s']:.0f}",
              f"{r['pending_low_mean_s']:.0f} / {r['pending_low_p95_s']:.0f}", str(r["preempted"]),
              str(r["relayouts"]), f"{r['relayouts_per_hour']:.0f}"] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for c in cells:
        print("| " + " | ".join(x.ljust(w) for x, w in zip(c, widths, strict=True)) + " |")


def plot(results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    for (name, r, _), color in zip(results, ("C0", "C1", "C2", "C3"), strict=False):
        lo = r.busy[0]
        held = r.alloc_over_time(100)
        ax.plot([(t - lo) / 60 for t in held], list(held.values()), color=color, label=f"{name}: held")
        asked = {int(a): r._pct(r.served, a, b)["mean"] for a, b in _spans(r, 100)}
        ax.plot([(t - lo) / 60 for t in asked], list(asked.values()), color=color, ls="--", lw=1,
                label=f"{name}: asked")
    ax.set(xlabel="time into the busy period (minutes)", ylabel="GPU allocation (% of 6212 H100s)",
           title="openb default trace on H100s: held (solid) and asked-for (dashed) GPU over time")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _spans(r, points: int):
    import numpy as np

    edges = np.linspace(r.busy[0], r.busy[1], points + 1)
    return zip(edges[:-1], edges[1:], strict=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--load", type=float, default=0.44, help="offered load (default 0.44; the trace's ceiling "
                                                              "on this cluster is 0.446)")
    ap.add_argument("--reconfig-s", type=float, default=DEFAULT_RECONFIG_S)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out", type=Path, default=Path("docs/mig_modes"), help="writes OUT.png and OUT.json")
    args = ap.parse_args(argv)
    if not (math.isfinite(args.load) and 0 < args.load < 0.446) or not 0 <= args.reconfig_s <= 3600:
        print("--load must be in (0, 0.446) and --reconfig-s in [0, 3600]", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        results = run_modes(args.load, args.reconfig_s, args.seed, Path(tmp))
    rows = table(results)
    print_table(rows, args.load, args.reconfig_s, results[0][1].busy[1] - results[0][1].busy[0])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    plot(results, args.out.with_suffix(".png"))
    args.out.with_suffix(".json").write_text(json.dumps(
        {"load": args.load, "reconfig_s": args.reconfig_s, "seed": args.seed, "rows": rows}, indent=1) + "\n")
    print(f"plot: {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
