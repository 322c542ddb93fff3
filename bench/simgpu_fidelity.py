"""simgpu fidelity: predicted vs measured on real GPUs, for every case of the measurement files.

H100 SXM5: calibration/h100_reference.json (the reference the model was calibrated on; calibration/README.md) and
bench/data/h100_measured.json (a second H100, measured by `simgpu calibrate`; both fitted), and
bench/data/h100_measured_2.json (a third H100 run, not used in the fit). H200: bench/data/
h200_measured.json -- a GPU the model was NOT fitted on (predicted from its spec sheet + the Hopper
constants); its last column also takes the host-side dispatch floors (a CPU/PyTorch property) from the
H200 machine's own 256^3/512^3 GEMMs. bench/data/h100_colocation_mps_bw.json (MPS mixes of GEMMs with
bandwidth-bound kernels, bench/simgpu_measure_colocation.py --grid mps_bw) gives two columns: the mixes
the DRAM-contention constant was fitted on (MPS_BW_FIT) and everything else in that file (held out);
the same grid measured on an H200 (bench/data/h200_colocation_mps_bw.json) is a third, never fitted.
Prints tables and a summary against the targets; writes a scatter plot (--plot).

    .venv/bin/python bench/simgpu_fidelity.py [--plot out/simgpu_fidelity.png] [--json out/fidelity.json] [-v]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table
from simgpu_measure_colocation import BW_OPS, sim_op  # bench/ (a script's own folder is on sys.path)

from simgpu.catalog import get_gpu
from simgpu.perf import ClientLoad, CopyOp, ElementwiseOp, GemmOp, colocate, op_cost, params_for
from simgpu.perf.ops import parse_op

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "calibration" / "h100_reference.json"
# (column, GPU, data file candidates, whether to take the host-side floors from the data itself)
DATASETS = [
    ("H100 ref (fitted)", "H100", [REFERENCE], False),
    ("H100 run 2 (fitted)", "H100", [ROOT / "bench/data/h100_measured.json"], False),
    ("H100 run 3 (held out)", "H100", [ROOT / "bench/data/h100_measured_2.json"], False),
    ("H200 (not fitted)", "H200", [ROOT / "bench/data/h200_measured.json"], False),
    ("H200, own host floors", "H200", [ROOT / "bench/data/h200_measured.json"], True),
    ("H100 new mixes (held out)", "H100", [ROOT / "bench/data/h100_colocation_extra.json"], False),
    ("H200 new mixes (not fitted)", "H200", [ROOT / "bench/data/h200_colocation_extra.json"], False),
]
# MPS + bandwidth grid: (column, GPU, data file, which part). `stream_latency_on_chip` (arch.yaml) was
# fitted on these mixes alone: GEMMs (8192^3, 4096^3) next to a 1 GiB copy at complementary splits.
# Held out: oversubscribed splits, the 6144^3 GEMM, the 256 MiB copy, the elementwise add, two GEMMs,
# and every op alone at each percentage. The L2-resident copy ("l2c", op null) is a diagnostic that
# the model does not describe: skipped.
MPS_BW_FILE = ROOT / "bench/data/h100_colocation_mps_bw.json"
MPS_BW_FIT = ("g8k50+c1G50", "g8k25+c1G75", "g8k75+c1G25", "g8k90+c1G10", "g4k50+c1G50", "g4k75+c1G25")
MPS_BW_DATASETS = [("H100 MPS+BW grid (fit)", "H100", MPS_BW_FILE, "fit"),
                   ("H100 MPS+BW grid (held out)", "H100", MPS_BW_FILE, "held_out"),
                   ("H200 MPS+BW grid (not fitted)", "H200", ROOT / "bench/data/h200_colocation_mps_bw.json", "all")]
# Published measurements on GPUs we never ran: Stas Bekman's "Maximum Achievable Matmul FLOPS" (MAMF)
# table, github.com/stas00/ml-engineering compute/accelerator/README.md (torch matmul, mean of 100
# iterations after 50 warm-ups, the best shape of a brute-force search -- so biased towards lucky
# shapes). (gpu, m, n, k, dtype, TFLOPS, torch version).
PUBLISHED = [
    ("A100-80GB", 1024, 10240, 5120, "bf16", 271.2, "2.6.0+cu126"),
    ("A100-80GB", 6912, 16384, 2048, "bf16", 267.9, "CUDA 12.1 (older table)"),
    ("H100", 2048, 2048, 13312, "bf16", 794.5, "2.7.0+cu126"),
    ("H100", 6144, 17920, 2816, "bf16", 792.1, "CUDA 12.1 (older table)"),
    ("H100", 1024, 9216, 14336, "fp8", 1402.6, "2.7.0+cu126"),
    ("H200", 1280, 4096, 12032, "fp8", 1453.4, "2.7.1+cu128"),
]
PUBLISHED_SOURCE = "stas00/ml-engineering, compute/accelerator/README.md, MAMF comparison table"
# Cases that show nothing but the framework's dispatch floor (their kernels take a few microseconds).
FLOOR_SHAPES = {(256, 256, 256), (512, 512, 512)}
LOOP_OPS = {"gemm": GemmOp(8192, 8192, 8192, "bf16"), "gemm_mid": GemmOp(4096, 4096, 4096, "bf16"),
            "gemm_small": GemmOp(1024, 1024, 1024, "bf16"), "stream": CopyOp(4 * 2**28)}
COPY_BYTES = 4 * 2**30
TARGETS = {"gemm_median": 0.10, "gemm_p90": 0.25, "mps_scaling_max": 0.15, "colocation_max": 0.15}
# Cross-host GEMM fidelity (issue 15): the GEMM case list of `simgpu calibrate` measured on an H100 and an
# H200 of the device tool, which sit on different hosts (bench/simgpu_measure_floor.py: 3 passes, each
# case's time the median of its passes; the file's `host` probe is what `simgpu calibrate --host`
# measures). The GPU constants are fitted on one file only (`--refit` writes FIT_FILES[gpu], a profile:
# simgpu.calibrate.fit_params on that file's GEMMs + copy/add, its host fixed by its probe) and checked
# on the other GPU with the other machine's host probe; nothing of the checked file enters its fit.
FLOOR_FILES = {"H100": ROOT / "bench/data/h100_floor.json", "H200": ROOT / "bench/data/h200_floor.json"}
FIT_FILES = {"H100": ROOT / "bench/data/simgpu_fit_h100.yaml", "H200": ROOT / "bench/data/simgpu_fit_h200.yaml"}
CROSS_TARGETS = {"fitted": (0.10, 0.25), "held out": (0.15, 0.30)}  # (median, p90)


@dataclass
class Row:
    group: str      # gemm | copy | loop | mps_scaling | timeslice | mps
    label: str
    measured: float
    predicted: float
    unit: str
    host_bound: bool = False

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0


def with_host_floors(gpu, meas: dict):
    """The GPU with the host floor of the machine that took `meas` (a file with no host probe): the median
    time of its 256^3 and 512^3 GEMMs minus the kernel's own minimum (they are pure host: a property of
    the CPU and PyTorch, not of the GPU)."""
    from simgpu.profile import with_params

    params = params_for(gpu)
    tiny = [g["s"] for g in meas.get("gemm", []) if (g["m"], g["n"], g["k"]) in FLOOR_SHAPES]
    if not tiny:
        return gpu
    floors = {**params.host_floor_s, "default": statistics.median(tiny) - params.launch_seconds(gpu.boost_mhz)}
    return with_params(gpu, params.model_copy(update={"host_floor_s": floors}))


def gemm_rows(gpu, meas: dict) -> list[Row]:
    rows = []
    floor, latency = params_for(gpu).floor, params_for(gpu).latency
    for g in meas.get("gemm", []):
        op = GemmOp(int(g["m"]), int(g["n"]), int(g["k"]), g["dtype"])
        if op.dtype not in gpu.supported_dtypes():
            continue
        cost = op_cost(gpu, op)
        rows.append(Row("gemm", f"{op.m}x{op.n}x{op.k} {op.dtype}", op.flops / g["s"] / 1e12,
                        op.flops / cost.seconds / 1e12, "TFLOPS",
                        host_bound=cost.kernel_seconds + latency(op.dtype) < floor(op.dtype)))
    return rows


def copy_rows(gpu, meas: dict) -> list[Row]:
    bw = meas.get("bandwidth", {})
    rows = []
    if "copy_GBps_rw" in bw:
        c = op_cost(gpu, CopyOp(COPY_BYTES))
        rows.append(Row("copy", "copy 4 GiB", bw["copy_GBps_rw"], 2 * COPY_BYTES / c.seconds / 1e9, "GB/s"))
    if "add_GBps_rw" in bw:
        c = op_cost(gpu, ElementwiseOp(3 * COPY_BYTES, COPY_BYTES // 4, inputs=2))  # torch.add(x, y, out=z)
        rows.append(Row("copy", "add 3 x 4 GiB", bw["add_GBps_rw"], 3 * COPY_BYTES / c.seconds / 1e9, "GB/s"))
    return rows


def _loads(name: str, entries: list[dict], mode: str) -> list[ClientLoad]:
    """Each measured client as a ClientLoad: its MPS percentage is in the entry (newer files) or in the
    case name (measure.py's "gemm_x2_pct50"); 100% is the same as no limit."""
    loads = []
    for e in entries:
        pct = e.get("mps_pct")
        if pct is None and mode == "mps" and "_pct" in name:
            pct = int(name.rsplit("_pct", 1)[1])
        loads.append(ClientLoad(LOOP_OPS[e["kind"]], None if mode != "mps" or pct in (None, 100) else pct))
    return loads


def loop_rows(gpu, meas: dict) -> list[Row]:
    rows = []
    for mode, section in (("timeslice", "timeslice"), ("mps", "mps")):
        for name, entries in meas.get(section, {}).items():
            if not isinstance(entries, list) or not entries or not isinstance(entries[0], dict):
                continue
            loads = _loads(name, entries, mode)
            rates = colocate(gpu, mode, loads)
            single = len(entries) == 1
            group = ("mps_scaling" if mode == "mps" else "loop") if single else mode
            for j, (e, r) in enumerate(zip(entries, rates, strict=True)):
                label = f"{name}" + ("" if single else f" [{j}] {e['kind']}")
                rows.append(Row(group, label, e["rate_per_s"], r, "it/s"))
    return rows


def measured_op(client: dict):
    """The op a measured client ran. Files written before elementwise ops had an input count recorded
    the add without one (read as 1 input); the measurement script declares it (`sim_op`), so that
    declaration fills the missing field -- after checking it describes the same bytes and FLOPs."""
    recorded = client["op"]
    declared = sim_op(client["kind"]) if client.get("kind") in BW_OPS else None
    if recorded.get("op") == "elementwise" and "inputs" not in recorded and declared:
        if any(declared.get(k) != recorded.get(k) for k in recorded):
            raise SystemExit(f"{client['kind']}: recorded op {recorded} is not the script's {declared}")
        recorded = declared
    return parse_op(recorded)


def mps_bw_rows(gpu, meas: dict, part: str) -> list[Row]:
    """Rows of an --grid mps_bw file: each op alone at a percentage ("mps_scaling") and each mix ("mps");
    `part` picks the fitted mixes, the rest, or "all"."""
    rows = []
    for section, group in (("solo", "mps_scaling"), ("mps", "mps")):
        for name, case in meas.get(section, {}).items():
            clients = case.get("clients", [])
            if not clients or any(c.get("op") is None for c in clients):
                continue
            if part != "all" and (part == "fit") != (section == "mps" and name in MPS_BW_FIT):
                continue
            loads = [ClientLoad(measured_op(c), None if c["mps_pct"] in (None, 100) else c["mps_pct"])
                     for c in clients]
            rates = colocate(gpu, "mps", loads)
            for j, (c, r) in enumerate(zip(clients, rates, strict=True)):
                label = name if section == "solo" else f"{name} [{j}] {c['kind']}@{c['mps_pct'] or 100}"
                rows.append(Row(group, label, c["rate_per_s"], r, "it/s"))
    return rows


def published_rows() -> list[Row]:
    rows = []
    for gpu_name, m, n, k, dtype, tflops, _ in PUBLISHED:
        op = GemmOp(m, n, k, dtype)
        rows.append(Row("gemm", f"{gpu_name} {m}x{n}x{k} {dtype}", tflops,
                        op.flops / op_cost(get_gpu(gpu_name), op).seconds / 1e12, "TFLOPS"))
    return rows


def all_rows(gpu, meas: dict) -> list[Row]:
    return gemm_rows(gpu, meas) + copy_rows(gpu, meas) + loop_rows(gpu, meas)


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(rows: list[Row]) -> dict:
    def errs(*groups: str, kernel_only: bool = False) -> list[float]:
        return [abs(r.error) for r in rows if r.group in groups and not (kernel_only and r.host_bound)]

    gemm, kern = errs("gemm"), errs("gemm", kernel_only=True)
    return {
        "gemm_n": len(gemm), "gemm_median": statistics.median(gemm) if gemm else float("nan"),
        "gemm_p90": _pct(gemm, 0.9),
        "gemm_kernel_n": len(kern), "gemm_kernel_median": statistics.median(kern) if kern else float("nan"),
        "gemm_kernel_p90": _pct(kern, 0.9),
        "copy_max": max(errs("copy"), default=float("nan")),
        "loop_max": max(errs("loop"), default=float("nan")),
        "mps_scaling_max": max(errs("mps_scaling"), default=float("nan")),
        "colocation_max": max(errs("timeslice", "mps"), default=float("nan")),
        "colocation_median": statistics.median(errs("timeslice", "mps")) if errs("timeslice", "mps") else float("nan"),
        "timeslice_max": max(errs("timeslice"), default=float("nan")),
        "mps_colocation_max": max(errs("mps"), default=float("nan")),
    }


def _fmt(x: float) -> str:
    return f"{x:,.4g}" if abs(x) < 1e4 else f"{x:,.0f}"


def print_rows(console: Console, title: str, rows: list[Row]) -> None:
    table = Table(title=title, show_lines=False)
    for col in ("group", "case", "unit", "measured", "predicted", "error"):
        table.add_column(col, justify="right" if col in ("measured", "predicted", "error") else "left")
    for r in rows:
        style = "red" if abs(r.error) > 0.25 else ("yellow" if abs(r.error) > 0.10 else "")
        note = " (host floor)" if r.host_bound else ""
        table.add_row(r.group, r.label + note, r.unit, _fmt(r.measured), _fmt(r.predicted), f"{r.error:+.1%}", style=style)
    console.print(table)


def print_summary(console: Console, summaries: dict[str, dict]) -> None:
    table = Table(title="simgpu fidelity summary (|predicted / measured - 1|)")
    table.add_column("metric")
    table.add_column("target", justify="right")
    for name in summaries:
        table.add_column(name, justify="right")
    metrics = [("GEMM median", "gemm_median"), ("GEMM p90", "gemm_p90"),
               ("GEMM median, kernel-bound only", "gemm_kernel_median"), ("GEMM p90, kernel-bound only", "gemm_kernel_p90"),
               ("copy / elementwise max", "copy_max"), ("solo loops max", "loop_max"),
               ("MPS scaling max", "mps_scaling_max"), ("co-location max (time-slice + MPS)", "colocation_max"),
               ("co-location median", "colocation_median"),
               ("  time-slicing max", "timeslice_max"), ("  MPS co-location max", "mps_colocation_max")]
    for label, key in metrics:
        target = TARGETS.get(key)
        cells = []
        for s in summaries.values():
            v = s.get(key, float("nan"))
            ok = target is None or v <= target
            cells.append(f"[{'green' if ok else 'red'}]{v:.1%}[/]" if v == v else "-")
        table.add_row(label, f"≤ {target:.0%}" if target else "", *cells)
    table.add_row("GEMM cases (kernel-bound)", "", *[f"{s['gemm_n']} ({s['gemm_kernel_n']})" for s in summaries.values()])
    console.print(table)


def plot(path: Path, results: dict[str, list[Row]]) -> None:
    """Left: GEMM TFLOPS predicted vs measured (log-log, +-10% and +-25% bands). Right: the error of
    every case by kind (GEMM, copy, solo loops, MPS scaling, time-slicing, MPS co-location)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = {n: r for n, r in results.items() if "own host" not in n and "published" not in n}
    palette = ("tab:blue", "tab:green", "tab:orange", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray",
               "tab:olive", "tab:cyan")
    colors = {name: palette[i % len(palette)] for i, name in enumerate(shown)}
    groups = ["gemm", "copy", "loop", "mps_scaling", "timeslice", "mps"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.5), gridspec_kw={"width_ratios": [1, 1.2]})
    values = [v for rows in shown.values() for r in rows if r.group == "gemm" for v in (r.measured, r.predicted)]
    lo, hi = min(values) / 1.5, max(values) * 1.5
    for band, alpha in ((0.25, 0.08), (0.10, 0.15)):
        left.fill_between([lo, hi], [lo * (1 - band), hi * (1 - band)], [lo * (1 + band), hi * (1 + band)],
                          color="gray", alpha=alpha, lw=0, label=f"±{band:.0%}")
    left.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    for offset, (name, rows) in enumerate(shown.items()):
        pts = [r for r in rows if r.group == "gemm"]
        left.scatter([r.measured for r in pts], [r.predicted for r in pts], s=16, alpha=0.8, color=colors[name],
                     label=name)
        for gi, g in enumerate(groups):
            errs = [100 * r.error for r in rows if r.group == g]
            xs = [gi + (offset - (len(shown) - 1) / 2) * 0.8 / len(shown)] * len(errs)
            right.scatter(xs, errs, s=14, alpha=0.8, color=colors[name], label=name if gi == 0 else None)
    left.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured TFLOPS",
             ylabel="predicted TFLOPS", title="GEMMs (all shapes and dtypes)")
    left.legend(fontsize=7, loc="upper left")
    for band in (15, -15):
        right.axhline(band, color="gray", lw=0.8, ls=":")
    right.axhline(0, color="k", lw=0.8)
    right.set_xticks(range(len(groups)), ["GEMM", "copy", "solo loops", "MPS scaling", "time-slice", "MPS co-loc."])
    right.set(ylabel="error % (predicted / measured - 1)", title="error by kind of case")
    right.legend(fontsize=7)
    fig.suptitle("simgpu: predicted vs measured (Hopper constants fitted on H100; H200 not fitted)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def refit(gpu_name: str, max_nfev: int = 60) -> Path:
    """Fit the GPU constants on FLOOR_FILES[gpu_name] alone and write them (a profile) to FIT_FILES."""
    import yaml

    from simgpu.calibrate import fit_params
    from simgpu.perf import arch_params
    from simgpu.profile import profile_document

    meas = json.loads(FLOOR_FILES[gpu_name].read_text())
    gpu = get_gpu(gpu_name)
    params, report = fit_params(meas, gpu, arch_params(gpu.arch), max_nfev=max_nfev)
    where = f"fitted on {FLOOR_FILES[gpu_name].relative_to(ROOT)} alone (bench/simgpu_fidelity.py --refit)"
    params = params.model_copy(update={"sources": {**params.sources, "fitted": where}})
    doc = profile_document(gpu, params, measured_on=meas.get("info", {}), fit={"after": report})
    FIT_FILES[gpu_name].write_text(yaml.safe_dump(doc, sort_keys=False))
    return FIT_FILES[gpu_name]


def cross_rows(fit_gpu: str, check_gpu: str, host_from: str | None = None) -> list[Row]:
    """GEMM rows of FLOOR_FILES[check_gpu] predicted with the constants fitted on `fit_gpu`, on the check
    GPU's spec sheet and the host probe of the file `host_from` (default: the checked machine's own)."""
    from simgpu.calibrate import gemm_seconds, set_host
    from simgpu.profile import load_profile, with_params

    fitted = load_profile(FIT_FILES[fit_gpu]).perf_params
    meas = json.loads(FLOOR_FILES[check_gpu].read_text())
    host = set_host(json.loads(FLOOR_FILES[host_from or check_gpu].read_text()))
    gpu = with_params(get_gpu(check_gpu), fitted.model_copy(update=host))
    rows = []
    for op, seconds in gemm_seconds(meas):
        cost = op_cost(gpu, op)
        rows.append(Row("gemm", f"{op.m}x{op.n}x{op.k} {op.dtype}", seconds * 1e6, cost.seconds * 1e6, "us",
                        host_bound=cost.kernel_seconds + params_for(gpu).latency(op.dtype) < params_for(gpu).floor(op.dtype)))
    return rows


def cross_host(console: Console, quiet: bool) -> dict[str, dict]:
    """Both directions (fit on one GPU, check on the other), with the fitted GPU beside each."""
    directions: dict[str, dict] = {}
    for fit_gpu, check_gpu in (("H100", "H200"), ("H200", "H100")):
        if not (FIT_FILES[fit_gpu].is_file() and FLOOR_FILES[check_gpu].is_file()):
            console.print(f"[yellow]cross-host {fit_gpu} -> {check_gpu}: no fit or data (run --refit)[/]")
            continue
        parts = {"fitted": cross_rows(fit_gpu, fit_gpu), "held out": cross_rows(fit_gpu, check_gpu),
                 "held out, fitted host's probe": cross_rows(fit_gpu, check_gpu, host_from=fit_gpu)}
        name = f"fit on {fit_gpu} -> check on {check_gpu}"
        if not quiet:
            for part, rows in parts.items():
                gpu_of = fit_gpu if part == "fitted" else check_gpu
                print_rows(console, f"{name}: {part} ({gpu_of}, event-timed GEMM microseconds)", rows)
        directions[name] = {"fit": fit_gpu, "check": check_gpu, "rows": parts}
    table = Table(title="cross-host GEMM fidelity: |predicted / measured - 1| over the same 59 cases")
    for col in ("direction", "GPU (part)", "median", "p90", "target", "worst cases"):
        table.add_column(col)
    for name, d in directions.items():
        for part, rows in d["rows"].items():
            errs = sorted(abs(r.error) for r in rows)
            median, p90 = statistics.median(errs), _pct(errs, 0.9)
            target = CROSS_TARGETS.get(part)
            ok = target is None or (median <= target[0] and p90 <= target[1])
            worst = ", ".join(f"{r.label} {r.error:+.0%}" for r in sorted(rows, key=lambda r: -abs(r.error))[:3])
            gpu_of = d["fit"] if part == "fitted" else d["check"]
            table.add_row(name, f"{gpu_of} ({part})", f"{median:.1%}", f"[{'green' if ok else 'red'}]{p90:.1%}[/]",
                          f"≤ {target[0]:.0%} / {target[1]:.0%}" if target else "", worst)
            d.setdefault("summary", {})[part] = {"median": median, "p90": p90, "n": len(errs)}
    console.print(table)
    return directions


def plot_cross(path: Path, directions: dict[str, dict]) -> None:
    """One panel per direction: predicted vs measured event time of every GEMM, fitted GPU and held-out."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, max(1, len(directions)), figsize=(6.5 * max(1, len(directions)), 5.8), squeeze=False)
    for ax, (name, d) in zip(axes[0], directions.items(), strict=False):
        values = [v for rows in d["rows"].values() for r in rows for v in (r.measured, r.predicted)]
        lo, hi = min(values) / 1.5, max(values) * 1.5
        for band, alpha in ((0.30, 0.07), (0.15, 0.14)):
            ax.fill_between([lo, hi], [lo * (1 - band), hi * (1 - band)], [lo * (1 + band), hi * (1 + band)],
                            color="gray", alpha=alpha, lw=0, label=f"±{band:.0%}")
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        for part, color, marker in (("fitted", "tab:blue", "o"), ("held out", "tab:red", "s")):
            rows, s = d["rows"][part], d["summary"][part]
            gpu_of = d["fit"] if part == "fitted" else d["check"]
            ax.scatter([r.measured for r in rows], [r.predicted for r in rows], s=18, alpha=0.75, color=color,
                       marker=marker, label=f"{gpu_of} ({part}): median {s['median']:.1%}, p90 {s['p90']:.1%}")
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured µs (CUDA events)",
               ylabel="predicted µs", title=name)
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle("simgpu GEMM timing across hosts: constants fitted on one GPU, each machine's own host probe")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plot", default=str(ROOT / "out/simgpu_fidelity.png"), help="scatter plot PNG to write")
    ap.add_argument("--json", help="write the summary (and every row) as JSON here")
    ap.add_argument("-q", "--quiet", action="store_true", help="summary only, no per-case tables")
    ap.add_argument("--refit", action="store_true",
                    help="refit the cross-host constants on each GPU's file (several minutes) before checking")
    ap.add_argument("--cross-plot", default=str(ROOT / "out/simgpu_fidelity_cross_host.png"),
                    help="PNG of the cross-host directions")
    args = ap.parse_args(argv)
    console = Console(width=160)
    if args.refit:
        for gpu_name in FIT_FILES:
            console.print(f"refitting on {FLOOR_FILES[gpu_name].name}: wrote {refit(gpu_name)}")
    directions = cross_host(console, args.quiet)
    if args.cross_plot and directions:
        plot_cross(Path(args.cross_plot), directions)
        console.print(f"plot: {args.cross_plot}")
    results: dict[str, list[Row]] = {}
    for name, gpu_name, candidates, own_floors in DATASETS:
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            console.print(f"[yellow]{name}: no data ({candidates[0]})[/]")
            continue
        meas = json.loads(path.read_text())
        gpu = with_host_floors(get_gpu(gpu_name), meas) if own_floors else get_gpu(gpu_name)
        rows = all_rows(gpu, meas)
        results[name] = rows
        if not args.quiet:
            print_rows(console, f"{name}: {gpu.name}, {path.name}", rows)
    for name, gpu_name, path, part in MPS_BW_DATASETS:
        if not path.is_file():
            console.print(f"[yellow]{name}: no data ({path})[/]")
            continue
        gpu = get_gpu(gpu_name)
        rows = mps_bw_rows(gpu, json.loads(path.read_text()), part)
        results[name] = rows
        if not args.quiet:
            print_rows(console, f"{name}: {gpu.name}, {path.name}", rows)
    published = published_rows()
    if not args.quiet:
        print_rows(console, f"published best-shape matmul TFLOPS ({PUBLISHED_SOURCE})", published)
    results["published MAMF (not fitted)"] = published
    summaries = {name: summarize(rows) for name, rows in results.items()}
    print_summary(console, summaries)
    if args.plot:
        plot(Path(args.plot), results)
        console.print(f"plot: {args.plot}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"summary": summaries, "rows": {
            n: [{**r.__dict__, "error": r.error} for r in rows] for n, rows in results.items()},
            "cross_host": {n: {"summary": d["summary"], "rows": {p: [{**r.__dict__, "error": r.error} for r in rows]
                                                                  for p, rows in d["rows"].items()}}
                           for n, d in directions.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
