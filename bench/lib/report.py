"""The bench's output: the tables it prints (results, CPU per process, apiserver writes, targets), the plot of
bound pods over time, and the run file (--out-json) that bench/scheduler_pairs.py and scheduler_p99.py read."""
from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

from lib.options import mode_rates


def timing(row: dict) -> str:
    bound_by_creation = row["pods_per_s"] >= 0.9 * row["created_per_s"]
    if row["mode"] == "rate":
        what = f"offered {row['rate_offered']:g}/s, created {row['created_per_s']:.0f}/s"
    else:
        what = f"fast, created {row['created_per_s']:.0f}/s"
    if row["bound"] < row["pods"]:
        what += f", {row['pods'] - row['bound']} NOT BOUND"
    if row.get("scrapes"):
        what += f", /metrics scraped {row['scrapes']}x ({row['scrape_s']:.2f} s each)"
    if row.get("scrape_errors"):
        what += f", {row['scrape_errors']} scrapes FAILED"
    return f"{what}{', creation-bound' if bound_by_creation else ''}"


def secs(value: float) -> str:
    return "—" if value != value else f"{value:.2f} s"


def results_table(rows: list[dict]) -> str:
    out = ["| nodes | pods | scheduler | QPS/burst | timing | pods/s | p50 | p99 | sched CPU | sched CPU per pod "
           "| sched RSS peak (now) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['nodes']} | {r['pods']} | {r['scheduler']} | {r['setting']} | {timing(r)} | "
                   f"**{r['pods_per_s']:.1f}** | {secs(r['p50'])} | {secs(r['p99'])} | {r['cpu']['scheduler']:.0%} | "
                   f"{ms(r['cpu_ms_per_pod']['scheduler'])} ms | {r['rss_peak_mb']:.0f} MB ({r['rss_mb']:.0f} MB) |")
    return "\n".join(out)


def ms(value: float) -> str:
    """Milliseconds to one decimal; '-' where nothing was bound (no per-pod figure)."""
    return f"{value:.1f}" if value == value else "-"


PROCESSES = ("scheduler", "kube-apiserver", "etcd", "kwok", "bench")


def cpu_table(rows: list[dict]) -> str:
    """Each process's share of one core during each run, and its CPU per bound pod: a process that gets less
    CPU in one scheduler's run (KWOK falls behind a fast one) shows it here, not as a cost of that scheduler."""
    out = ["| run | wall | scheduler | kube-apiserver | etcd | kwok | bench client | sum | ms per bound pod "
           "(same order) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        parts = [r["cpu"][k] for k in PROCESSES]
        per_pod = " / ".join(ms(r["cpu_ms_per_pod"][k]) for k in PROCESSES)
        out.append(f"| {run_label(r)} | {r['wall']:.1f} s | "
                   + " | ".join(f"{p:.0%}" for p in parts) + f" | {sum(parts):.0%} | {per_pod} |")
    return "\n".join(out)


def run_label(r: dict) -> str:
    """A run as the tables name it: scheduler, setting, mode, and the offered rate of a rate run."""
    rate = f" {r['rate_offered']:g}/s" if r.get("rate_offered") else ""
    return f"{r['scheduler']} {r['setting']} {r['mode']}{rate}"


def writes_table(rows: list[dict]) -> str:
    """What each bound pod cost the apiserver in writes, per scheduler run (the creator's POST pods left out)."""
    out = ["| run | writes per bound pod | of which |", "|---|---|---|"]
    for r in rows:
        w = r.get("writes_per_pod", {})
        detail = ", ".join(f"{k} {v:.2f}" for k, v in w.items() if v >= 0.005)
        if r.get("events_dropped"):  # the operator's own count: Events its recorder's full backlog refused
            detail += f"; {r['events_dropped']:.0f} pod Events dropped"
        out.append(f"| {run_label(r)} | {sum(w.values()):.2f} | {detail} |")
    return "\n".join(out)


def targets(rows: list[dict], args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """(target, measured, met) rows."""
    out = []
    big = [r for r in rows if r.get("case") != "small"]
    for setting in dict.fromkeys(r["setting"] for r in big):
        for (mode, rate), repeat in itertools.product(mode_rates(args), range(args.repeat)):
            pair = {r["scheduler"]: r for r in big if r["setting"] == setting and r["mode"] == mode
                    and r.get("rate_offered") == rate and r.get("repeat", 0) == repeat}
            if "fgpu" not in pair or "kube-scheduler" not in pair:
                continue
            f, k = pair["fgpu"], pair["kube-scheduler"]
            ratio = f["pods_per_s"] / k["pods_per_s"] if k["pods_per_s"] else float("nan")
            target = mode == "fast"
            note = "" if target else f" {rate:g}/s (informational: both offered the same rate)"
            out.append((f"fgpu ≥ 1.0× kube-scheduler pods/s, {setting}, {mode}{note}",
                        f"{f['pods_per_s']:.1f} vs {k['pods_per_s']:.1f} = {ratio:.2f}×",
                        met(ratio) if target else "—"))
    for r in big:
        if r["scheduler"] == "fgpu" and r["mode"] == "rate":
            qps = 50.0 if r["setting"].startswith("default") else float(r["setting"].split("/")[0])
            if qps < r["rate_offered"]:
                out.append((f"fgpu p99 ≤ 1 s at {r['rate_offered']:g} pods/s offered, {r['setting']}",
                            f"{secs(r['p99'])}", f"— (QPS {qps:g} < {r['rate_offered']:g} offered: a backlog by design)"))
            else:
                out.append((f"fgpu p99 ≤ 1 s at {r['rate_offered']:g} pods/s offered, {r['setting']}",
                            f"{secs(r['p99'])} (created {r['created_per_s']:.0f}/s)",
                            "yes" if r["p99"] <= 1.0 else "NO"))
    fgpu = [r for r in rows if r["scheduler"] == "fgpu"]
    if fgpu:
        peak = max(r["rss_peak_mb"] for r in fgpu)
        out.append(("operator RSS ≤ 300 MB (peak over all runs)", f"{peak:.0f} MB", "yes" if peak <= 300 else "NO"))
    for r in rows:
        if r.get("case") == "small":
            ok = r["bound"] == r["pods"] and r["seconds"] < 30
            how = "through the admission webhook" if r.get("webhook") else "pods routed and sized already"
            out.append((f"{r['pods']} pods on {r['nodes']} nodes bound < 30 s ({how})",
                        f"{r['bound']} bound in {r['seconds']:.1f} s ({timing(r)})", "yes" if ok else "NO"))
    return out


def met(ratio: float) -> str:
    """A rate ratio against the 1.0x target: within 1% is a tie (two schedulers pinned at the same client QPS
    differ by less than the run-to-run noise), not a miss."""
    return "yes" if ratio >= 1.0 else "tie (within 1%)" if ratio >= 0.99 else "NO"


def targets_table(rows: list[tuple[str, str, str]]) -> str:
    return "\n".join(["| target | measured | met |", "|---|---|---|"] + [f"| {a} | {b} | {c} |" for a, b, c in rows])


LINES = {"fgpu": "-", "kube-scheduler": "--"}  # the null binder's runs dotted


def plot(rows: list[dict], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    groups = [("small case", [r for r in rows if r.get("case") == "small"])]
    groups += [(f"mode: {m}", [r for r in rows if r.get("case") != "small" and r["mode"] == m])
               for m in dict.fromkeys(r["mode"] for r in rows if r.get("case") != "small")]
    groups = [g for g in groups if g[1]]
    sweep = [r for r in rows if r.get("case") != "small" and r["mode"] == "rate"]
    swept = len({r["rate_offered"] for r in sweep}) > 1
    fig, axes = plt.subplots(1, len(groups) + swept, figsize=(6.5 * (len(groups) + swept), 4.8), squeeze=False)
    for ax, (title, group) in zip(axes[0], groups, strict=False):
        for r in group:
            xs = [0.0, *r["bound_at"]]
            offered = f", offered {r['rate_offered']:g}/s" if r.get("rate_offered") else ""
            ax.step(xs, range(len(xs)), where="post",
                    label=f"{r['scheduler']} {r['setting']}{offered} ({r['pods_per_s']:.0f}/s)",
                    linestyle=LINES.get(r["scheduler"], ":"))
        ax.set_title(f"{title}: {group[0]['pods']} pods, {group[0]['nodes']} nodes")
        ax.set_xlabel("seconds since the first create")
        ax.set_ylabel("pods bound")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if swept:  # create->bound against the offered rate, one line per scheduler and setting
        ax = axes[0][-1]
        for key in dict.fromkeys((r["scheduler"], r["setting"]) for r in sweep):
            line = sorted((r for r in sweep if (r["scheduler"], r["setting"]) == key), key=lambda r: r["rate_offered"])
            xs = [r["rate_offered"] for r in line]
            style = LINES.get(key[0], ":")
            ax.plot(xs, [r["p99"] for r in line], style, marker="o", label=f"{key[0]} {key[1]} p99")
            ax.plot(xs, [r["p50"] for r in line], style, marker=".", alpha=0.6, label=f"{key[0]} {key[1]} p50")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_title("create->bound against the offered rate")
        ax.set_xlabel("pods/s offered")
        ax.set_ylabel("seconds")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return f"plot: {path}"


def run_file(path: Path, args: argparse.Namespace, info: dict, wall: float, rows: list[dict],
             checks: list[tuple[str, str, str]]) -> None:
    """The run as JSON: its options, the machine, every run's row and the targets (bench/series_summary.py reads
    these files back)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "settings"}
        | {"settings": [s.label for s in args.settings]},
        "machine": info, "wall_s": wall, "runs": rows,
        "targets": [{"target": a, "measured": b, "met": c} for a, b, c in checks]}, indent=1))
