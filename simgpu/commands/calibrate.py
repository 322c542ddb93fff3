"""`simgpu calibrate --out PROFILE.yaml`: measure this machine's GPU (PyTorch + an NVIDIA GPU), fit the
performance model's constants to it and write a profile that `--profile PROFILE.yaml` loads.

`simgpu calibrate --host --out HOST.yaml` measures only this host's part of an op's time (the framework's
dispatch and the driver's launch latency, simgpu/calibrate_host.py) in a few seconds; `--host HOST.yaml`
on `simgpu predict` (or a `host` section in a profile) applies it to any GPU's constants."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from fgpu_contracts.cli import number
from fgpu_contracts.extras import need
from simgpu.catalog import all_gpus, get_gpu
from simgpu.errors import SimgpuError
from simgpu.perf.params import params_for


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("calibrate", help="measure this GPU and write a fitted profile",
                              description=__doc__)
    p.add_argument("--out", required=True, help="profile YAML to write")
    p.add_argument("--host", action="store_true",
                   help="measure only this host's dispatch + launch latency (seconds) and write it as a host file")
    p.add_argument("--measurements-out", help="also write the raw measurements (JSON) here")
    p.add_argument("--from-measurements", metavar="JSON",
                   help="fit measurements taken earlier (this command's or calibration/measure.py's) instead of measuring")
    p.add_argument("--gpu", help="catalog GPU the measured one is (default: matched from the device name)")
    p.add_argument("--quick", action="store_true", help="skip the slowest GEMMs")
    p.add_argument("--loop-seconds", type=float, default=3.0, help="duration of each co-location loop")
    p.add_argument("--no-mps", action="store_true", help="skip the MPS measurements")
    p.add_argument("--max-fit-evals", type=number(int, lo=1), default=60,
                   help="least-squares evaluations per starting point (default 60); a fit that needs more says so")
    p.set_defaults(func=run, extra="plan")


def match_catalog(info: dict, override: str | None):
    """The catalog entry for the measured device: --gpu, else its name, else the SM count."""
    if override:
        return get_gpu(override)
    device = str(info.get("device", ""))
    for candidate in (device, device.removeprefix("NVIDIA ").strip()):
        try:
            return get_gpu(candidate)
        except SimgpuError:
            pass
    squeezed = device.upper().replace(" ", "")
    matches = [g for g in all_gpus() if g.short_name.upper().split("-")[0] in squeezed and g.sms == info.get("sms")]
    if len(matches) == 1:
        return matches[0]
    raise SimgpuError(f"cannot tell which catalog GPU {device!r} is; pass --gpu", field="gpu",
                      allowed=[g.short_name for g in all_gpus()])


def measured_spec(base, info: dict):
    """The catalog spec with what was read off the device itself (SMs, memory, L2, max clock, power)."""
    update = {"sms": info.get("sms"), "mem_bytes": info.get("mem_bytes"), "l2_bytes": info.get("l2_bytes"),
              "boost_mhz": info.get("max_sm_mhz"), "power_w": info.get("power_limit_w")}
    update = {k: v for k, v in update.items() if v}
    if update.get("boost_mhz", base.boost_mhz) < base.peak_mhz:
        update["boost_mhz"] = base.peak_mhz
    device = str(info.get("device", ""))
    aliases = list(base.aliases) + ([device] if device and device not in base.aliases else [])
    return base.model_copy(update={**update, "aliases": aliases})


def _need_gpu() -> None:
    """One clear error (exit 2) where there is no PyTorch, no driver or no GPU."""
    try:
        import torch
    except ImportError:
        raise SimgpuError("PyTorch is not installed here", field="torch",
                          allowed=["a machine with PyTorch and an NVIDIA GPU", "--from-measurements JSON"]) from None
    if not torch.cuda.is_available():
        raise SimgpuError("no CUDA GPU visible to PyTorch (no NVIDIA driver or device here)", field="gpu",
                          allowed=["a machine with an NVIDIA GPU", "--from-measurements JSON"])


def run_host(args: argparse.Namespace) -> int:
    """Measure this host's part (seconds) and write it as a host file."""
    from simgpu import calibrate_host
    from simgpu.profile import host_document

    _need_gpu()
    meas = calibrate_host.measure_host()
    doc = host_document(meas)
    Path(args.out).write_text(yaml.safe_dump(doc, sort_keys=False))
    if args.measurements_out:
        Path(args.measurements_out).write_text(json.dumps(meas, indent=1))
    host = doc["host"]
    print(f"host floor {host['host_floor_s']['default'] * 1e6:.1f} us, latency {host['host_latency_s']['default'] * 1e6:.1f} us"
          f" (GEMM paths), dispatch {host['host_dispatch_s'] * 1e6:.1f} us per op ({meas['seconds']:.0f} s); wrote {args.out}",
          file=sys.stderr)
    return 0


def _progress_measure(args: argparse.Namespace) -> dict:
    _need_gpu()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from simgpu import calibrate_measure as cm

    total = cm.step_count(args.quick, not args.no_mps)
    with Progress(TextColumn("{task.description:<36}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=False) as bar:
        task = bar.add_task("measuring", total=total)
        state = {"first": True}

        def tick(label: str) -> None:
            if not state["first"]:
                bar.advance(task)
            state["first"] = False
            bar.update(task, description=label)

        meas = cm.measure(tick, quick=args.quick, loop_seconds=args.loop_seconds, mps=not args.no_mps)
        bar.update(task, completed=total, description="measured")
    return meas


def run(args: argparse.Namespace) -> int:
    from simgpu.calibrate import evaluate, fit
    from simgpu.profile import profile_document, with_params

    if args.host:
        if args.from_measurements:
            raise SimgpuError("--host measures this machine; it takes no --from-measurements",
                              field="from_measurements", allowed=["--host alone"])
        return run_host(args)
    need("scipy")  # the fit's, checked before any measuring
    if args.from_measurements:
        try:
            meas = json.loads(Path(args.from_measurements).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise SimgpuError(f"cannot read {args.from_measurements}: {err}", field="from_measurements") from None
        if not isinstance(meas, dict):
            raise SimgpuError("expected a JSON object", field="from_measurements")
    else:
        meas = _progress_measure(args)
    if args.measurements_out:
        Path(args.measurements_out).write_text(json.dumps(meas, indent=1))
    info = meas.get("info") or {"device": meas.get("device", ""), "sms": meas.get("sms"), "mem_bytes": meas.get("mem_bytes")}
    spec = measured_spec(match_catalog(info, args.gpu), info)
    base = params_for(spec)
    before = evaluate(with_params(spec, base), meas)
    print(f"fitting {spec.name} ({spec.sms} SMs) ...", file=sys.stderr)
    starts = shipped_params(spec.name)
    fitted = fit(meas, spec, base, max_nfev=args.max_fit_evals, starts=starts)
    params, after = fitted.params, fitted.report
    if not fitted.converged:
        print(f"warning: the fit stopped at --max-fit-evals {args.max_fit_evals} before converging; its constants "
              f"depend on where it stopped: raise --max-fit-evals", file=sys.stderr)
    where = f"simgpu calibrate on {info.get('device')} (torch {info.get('torch', '?')}, driver {info.get('driver', '?')})"
    if args.from_measurements:
        where += f"; fitted later from the saved measurements ({Path(args.from_measurements).name})"
    params = params.model_copy(update={"sources": {**base.sources, "fitted": where}})
    doc = profile_document(spec, params, measured_on=info, fit={"before": before, "after": after})
    Path(args.out).write_text(yaml.safe_dump(doc, sort_keys=False))
    for group, stats in after.items():
        print(f"{group:5s} n={stats['n']:3d} median |err| {stats['median_abs_error']:.1%}  max {stats['max_abs_error']:.1%}"
              f"  (architecture defaults: {before[group]['median_abs_error']:.1%})", file=sys.stderr)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def shipped_params(gpu_name: str) -> list:
    """Constants of the profiles shipped in simgpu/profiles/ for this GPU model: extra starting points for the
    fit (from the architecture defaults alone it can settle in a worse local minimum)."""
    from simgpu.profile import load_profile

    folder = Path(__file__).resolve().parent.parent / "profiles"
    return [prof.perf_params for prof in map(load_profile, sorted(folder.glob("*.yaml"))) if prof.name == gpu_name]
