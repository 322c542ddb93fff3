"""Read a series of `bench/scheduler.py --out-json` files, each one fgpu run and one kube-scheduler run on one
cluster, and say what the series says: pair by pair and per operator interpreter, fgpu's rate over kube-scheduler's
as fast as the creator can, CPU per bound pod, and p99 at the offered rate. One pair decides little on a shared
2-CPU machine (the same kube-scheduler binary ranged 1.5x over one hour), so the summary is the median, the lowest
pair, the count at or above 1.0x, and the geometric mean of the ratios with a 95% bootstrap interval (resampling the
pairs, seeded, so the same files print the same interval). A file run with `--repeat N` holds N pairs: the i-th run
of each scheduler make pair i.

    python bench/scheduler_pairs.py [RUN.json...] [--plot docs/scheduler_pairs.png] [--out-json SUMMARY.json]

A summary JSON (as --out-json writes) is read back too; with no files, the committed docs/scheduler_pairs.json (the
series of 2026-11-28 in docs/benchmarks.md).
"""
from __future__ import annotations

import math
import random
import statistics
import sys
from pathlib import Path

import series_summary

SETTING = "500/1000"
COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "scheduler_pairs.json"


def pairs(name: str, data: dict) -> list[dict]:
    """One run file's fast runs of both schedulers at SETTING as pairs, one per repeat (none when it lacks them)."""
    out = []
    machine = data["machine"]
    interpreter = machine.get("operator_python_build", machine["python_build"])
    repeats = sorted({r.get("repeat", 0) for r in data["runs"]})
    for repeat in repeats:
        mine = [r for r in data["runs"] if r["setting"] == SETTING and r.get("repeat", 0) == repeat]
        runs = {(r["scheduler"], r["mode"]): r for r in mine}
        if ("fgpu", "fast") not in runs or ("kube-scheduler", "fast") not in runs:
            continue
        fgpu, kube = runs["fgpu", "fast"], runs["kube-scheduler", "fast"]
        fgpu_rate, kube_rate = runs.get(("fgpu", "rate")), runs.get(("kube-scheduler", "rate"))
        out.append({
            "run": name if len(repeats) == 1 else f"{name}#{repeat + 1}",
            "interpreter": interpreter,
            "first": mine[0]["scheduler"],
            "fgpu": fgpu["pods_per_s"], "kube": kube["pods_per_s"],
            "fgpu_cpu_ms": fgpu["cpu_ms_per_pod"]["scheduler"], "kube_cpu_ms": kube["cpu_ms_per_pod"]["scheduler"],
            # every process on the machine (apiserver, etcd, KWOK, creator, scheduler): with the cores full, the
            # rate is about cores / this
            "fgpu_all_ms": sum(fgpu["cpu_ms_per_pod"].values()), "kube_all_ms": sum(kube["cpu_ms_per_pod"].values()),
            "fgpu_p99": fgpu_rate["p99"] if fgpu_rate else None, "kube_p99": kube_rate["p99"] if kube_rate else None})
    return out


def geometric_mean_interval(ratios: list[float], level: float = 0.95, draws: int = 10_000) -> tuple[float, float, float]:
    """The geometric mean of `ratios` and a percentile bootstrap interval for it (pairs resampled; seeded)."""
    logs = [math.log(r) for r in ratios]
    rng = random.Random(20261128)
    means = sorted(statistics.fmean(rng.choices(logs, k=len(logs))) for _ in range(draws))
    tail = (1 - level) / 2
    low, high = means[int(tail * draws)], means[min(draws - 1, int((1 - tail) * draws))]
    return math.exp(statistics.fmean(logs)), math.exp(low), math.exp(high)


def summary(pairs: list[dict]) -> list[str]:
    lines = ["| run | operator's interpreter | first | fgpu pods/s | kube pods/s | fgpu / kube | CPU ms/pod fgpu / kube "
             "| all processes' CPU ms/pod, fgpu / kube run | p99 at offered rate, fgpu / kube |",
             "|---|---|---|---:|---:|---:|---|---|---|"]
    for p in pairs:
        p99 = f"{p['fgpu_p99']:.2f} / {p['kube_p99']:.2f} s" if p["fgpu_p99"] is not None else ""
        whole = f"{p['fgpu_all_ms']:.1f} / {p['kube_all_ms']:.1f}" if p.get("fgpu_all_ms") is not None else ""
        lines.append(f"| {p['run']} | {p['interpreter']} | {p['first']} | {p['fgpu']:.1f} | {p['kube']:.1f} | "
                     f"{p['fgpu'] / p['kube']:.2f}x | {p['fgpu_cpu_ms']:.2f} / {p['kube_cpu_ms']:.2f} | {whole} | {p99} |")
    lines.append("")
    for build in sorted({p["interpreter"] for p in pairs}):
        mine = [p for p in pairs if p["interpreter"] == build]
        ratios = [p["fgpu"] / p["kube"] for p in mine]
        cheaper = sum(p["fgpu_cpu_ms"] < p["kube_cpu_ms"] for p in mine)
        whole = [p for p in mine if p.get("fgpu_all_ms") is not None]
        p99s = [p["fgpu_p99"] for p in mine if p["fgpu_p99"] is not None]
        geo, low, high = geometric_mean_interval(ratios)
        lines.append(f"{build}: {len(mine)} pairs, fgpu / kube median {statistics.median(ratios):.2f}x, lowest "
                     f"{min(ratios):.2f}x, highest {max(ratios):.2f}x, at or above 1.0x in {sum(r >= 1 for r in ratios)}; "
                     f"geometric mean {geo:.2f}x (95% bootstrap interval {low:.2f}x-{high:.2f}x); "
                     f"means {statistics.mean(p['fgpu'] for p in mine):.1f} against "
                     f"{statistics.mean(p['kube'] for p in mine):.1f} pods/s; fgpu's CPU per pod lower in {cheaper} of "
                     f"{len(mine)}"
                     + (f", all processes' in {sum(p['fgpu_all_ms'] < p['kube_all_ms'] for p in whole)} of {len(whole)}"
                        if whole else "")
                     + (f"; fgpu p99 under 1 s in {sum(x < 1 for x in p99s)} of {len(p99s)}" if p99s else ""))
    return lines


def plot(pairs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    builds = sorted({p["interpreter"] for p in pairs})
    colours = dict(zip(builds, ("tab:blue", "tab:orange", "tab:green", "tab:red"), strict=False))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.8))
    for i, p in enumerate(pairs):
        c = colours.get(p["interpreter"], "grey")
        left.bar(i, p["fgpu"] / p["kube"], color=c, hatch="//" if p["first"] != "fgpu" else None, edgecolor="white")
        right.scatter(p["kube_cpu_ms"], p["fgpu_cpu_ms"], color=c)
    left.axhline(1.0, color="black", lw=0.8)
    geo, low, high = geometric_mean_interval([p["fgpu"] / p["kube"] for p in pairs])
    left.axhspan(low, high, color="grey", alpha=0.25, lw=0)
    left.axhline(geo, color="grey", lw=1.2, ls="--")
    left.set_xticks(range(len(pairs)), [p["run"] for p in pairs], rotation=60, fontsize=7)
    left.set_ylabel(f"fgpu / kube-scheduler pods/s ({SETTING}, fast)")
    left.set_xlabel("each pair (hatched: kube-scheduler ran first)", fontsize=8)
    left.legend(handles=[Patch(color=c, label=f"operator on {build}") for build, c in colours.items()]
                + [Patch(color="grey", alpha=0.4, label=f"geometric mean {geo:.2f}x, 95% interval {low:.2f}x-{high:.2f}x")],
                fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.07), ncol=1, frameon=False)
    top = max(max(p["fgpu_cpu_ms"], p["kube_cpu_ms"]) for p in pairs) * 1.1
    right.plot([0, top], [0, top], color="black", lw=0.8, label="equal CPU per pod")
    right.set_xlim(0, top)
    right.set_ylim(0, top)
    right.set_xlabel("kube-scheduler CPU per bound pod (ms)")
    right.set_ylabel("fgpu operator CPU per bound pod (ms)")
    right.set_title("below the line: fgpu cheaper", fontsize=9)
    right.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    return series_summary.main(argv, doc=__doc__, committed=COMMITTED, key="pairs", setting=SETTING,
                               plot_help="write a PNG: the ratio per run, and CPU per pod fgpu against kube", from_run=pairs,
                               missing=f"no fast run of both schedulers at {SETTING}", summary=summary, plot=plot)


if __name__ == "__main__":
    sys.exit(main())
