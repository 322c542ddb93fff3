"""Read `bench/scheduler.py --out-json` files and sum up their offered-rate runs: create->bound p99 of each run at
the offered rate, per scheduler and per commit of the code that ran, against issue 11's target (p99 <= 1 s at 100
pods/s offered). On a shared 2-CPU machine one run's p99 follows the host's noise, so a target is judged over many
runs alternated with kube-scheduler's: how many are within it, the median and the highest.

    python bench/scheduler_p99.py [RUN.json...] [--plot docs/scheduler_p99.png] [--out-json SUMMARY.json]

A summary JSON (as --out-json writes) is read back too; with no files, the committed docs/scheduler_p99.json.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import series_summary

SETTING = "500/1000"
TARGET_S = 1.0
COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "scheduler_p99.json"


def offered_runs(name: str, data: dict) -> list[dict]:
    """Every offered-rate run at SETTING in one file, in the order they ran."""
    git = data["machine"].get("git", "?")
    burner = (data.get("args") or {}).get("cpu_burner")
    runs = [r for r in data["runs"] if r.get("mode") == "rate" and r.get("setting") == SETTING]
    repeats = {r.get("repeat", 0) for r in runs}
    return [{"run": name if len(repeats) <= 1 else f"{name}#{r.get('repeat', 0) + 1}", "git": git,
             "burner": r.get("cpu_burner_share", burner), "burner_took": r.get("cpu_burner_took"),
             "scheduler": r["scheduler"], "offered": r.get("rate_offered"), "pods_per_s": r["pods_per_s"],
             "p50": r["p50"], "p99": r["p99"], "cpu_ms": r["cpu_ms_per_pod"]["scheduler"],
             "all_ms": sum(r["cpu_ms_per_pod"].values())} for r in runs]


def condition(run: dict) -> str:
    """The commit a run's code was at, and the noisy neighbour's share of a core if one ran (--cpu-burner)."""
    return run["git"] + (f"+burner{run['burner']:g}" if run.get("burner") else "")


def groups(runs: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """Runs by (condition, scheduler), conditions in the order they first ran."""
    out: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        out.setdefault((condition(r), r["scheduler"]), []).append(r)
    return out


def misses(runs: list[dict]) -> list[float]:
    """The p99s above the target (it is p99 <= 1 s: 1.00 s meets it)."""
    return [r["p99"] for r in runs if r["p99"] > TARGET_S]


def neighbour_took(runs: list[dict]) -> list[float]:
    """The share of a core the noisy neighbour took in each run that measured it."""
    return [r["burner_took"] for r in runs if r.get("burner_took") is not None]


def summary(runs: list[dict]) -> list[str]:
    lines = ["| run | commit (+ noisy neighbour) | scheduler | pods/s | p50 | p99 | scheduler CPU ms/pod | all processes' "
             "CPU ms/pod |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in runs:
        lines.append(f"| {r['run']} | {condition(r)} | {r['scheduler']} | {r['pods_per_s']:.1f} | {r['p50']:.2f} s | "
                     f"{r['p99']:.2f} s | {r['cpu_ms']:.2f} | {r['all_ms']:.1f} |")
    lines.append("")
    for (label, scheduler), mine in groups(runs).items():
        p99, missed, took = [r["p99"] for r in mine], misses(mine), neighbour_took(mine)
        lines.append(f"{label} {scheduler}: {len(mine)} runs, p99 within {TARGET_S:g} s in "
                     f"{len(mine) - len(missed)} of {len(mine)}"  # each miss to the millisecond: 1.003 s reads "1.00"
                     + (f" (misses: {', '.join(f'{x:.3f}' for x in missed)} s)" if missed else "")
                     + f", median {statistics.median(p99):.2f} s, "
                     f"lowest {min(p99):.2f} s, highest {max(p99):.2f} s; scheduler CPU per pod "
                     f"{min(r['cpu_ms'] for r in mine):.2f}-{max(r['cpu_ms'] for r in mine):.2f} ms "
                     f"(mean {statistics.mean(r['cpu_ms'] for r in mine):.2f})"
                     + (f"; the neighbour took {min(took):.0%}-{max(took):.0%} of a core" if took else ""))
    return lines


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_group = groups(runs)
    markers = dict(zip(dict.fromkeys(label for label, _ in by_group), "osD^v<>", strict=False))
    colours = {"fgpu": "tab:blue", "kube-scheduler": "tab:orange"}
    position = {id(r): i for i, r in enumerate(runs)}  # the order they ran
    fig, ax = plt.subplots(figsize=(12, 4.6))
    for (label, scheduler), mine in by_group.items():
        took = neighbour_took(mine)
        ax.scatter([position[id(r)] for r in mine], [r["p99"] for r in mine], color=colours.get(scheduler, "grey"),
                   marker=markers.get(label, "o"),
                   label=f"{scheduler} at {label}: {len(mine) - len(misses(mine))} of {len(mine)} within "
                         f"{TARGET_S:g} s" + (f" (the neighbour took {statistics.median(took):.0%} of a core)" if took else ""))
    ax.axhline(TARGET_S, color="black", lw=0.8, ls="--")
    ax.set_ylim(0, max(1.5 * TARGET_S, max(r["p99"] for r in runs) * 1.1))
    ax.set_xticks(range(len(runs)), [r["run"] for r in runs], rotation=70, fontsize=6, ha="right",
                  rotation_mode="anchor")
    ax.set_ylabel("create->bound p99 (s)")
    ax.set_title(f"each run's p99 in the order they ran, QPS/burst {SETTING}, offered {runs[0]['offered'] or '?'} "
                 f"pods/s (dashed: the target)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    return series_summary.main(argv, doc=__doc__, committed=COMMITTED, key="offered", setting=SETTING,
                               plot_help="write a PNG: each run's p99, by scheduler and commit", from_run=offered_runs,
                               missing=f"no offered-rate run at {SETTING}", summary=summary, plot=plot)


if __name__ == "__main__":
    sys.exit(main())
