"""bench/scheduler.py's option types: each turns one command-line value into what the bench runs, or refuses it in
one line naming the value and what is allowed (argparse then exits 2)."""
from __future__ import annotations

import argparse
import contextlib
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Setting:
    """A client QPS/burst for both schedulers; None: kube-scheduler's default (50/100)."""

    qps: float | None
    burst: int | None

    @property
    def label(self) -> str:
        return "default (50/100)" if self.qps is None else f"{self.qps:g}/{self.burst}"

    def fgpu_args(self) -> list[str]:
        return ["--qps", f"{self.qps or 50:g}", "--burst", str(self.burst or 100)]


def parse_settings(text: str) -> list[Setting]:
    out = []
    for item in text.split(","):
        item = item.strip()
        if item == "default":
            out.append(Setting(None, None))
            continue
        try:
            qps, burst = item.split("/")
            setting = Setting(float(qps), int(burst))
        except ValueError:
            setting = None
        if setting is None or not (0 < setting.qps < float("inf") and setting.burst >= 1):
            raise argparse.ArgumentTypeError(
                f"{item!r} is not a setting; allowed: comma-separated 'default' or QPS/BURST like 500/1000")
        out.append(setting)
    return out


def parse_rates(text: str) -> list[float]:
    try:
        rates = [float(t) for t in text.split(",")]
    except ValueError:
        rates = []
    if not rates or not all(0 < r < float("inf") for r in rates):
        raise argparse.ArgumentTypeError(f"{text!r} is not a rate list; allowed: comma-separated pods/s above 0")
    return list(dict.fromkeys(rates))


def parse_modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",")]
    bad = [m for m in modes if m not in ("fast", "rate")]
    if bad or not modes:
        raise argparse.ArgumentTypeError(f"{bad[0] if bad else text!r} is not a mode; allowed: fast, rate")
    return list(dict.fromkeys(modes))


SCHEDULERS = ("fgpu", "kube-scheduler", "null")
#: Run unless --schedulers names others; `null` (bench/helpers/null_binder.py: binds without deciding) is asked for by name.
DEFAULT_SCHEDULERS = ["fgpu", "kube-scheduler"]


def null_burn_ms(name: str) -> float | None:
    """`null` -> 0.0, `null+2.5ms` -> 2.5 (the null binder spending that much CPU per pod); None: not null."""
    if name == "null":
        return 0.0
    if name.startswith("null+") and name.endswith("ms"):
        with contextlib.suppress(ValueError):
            burn = float(name[5:-2])
            if 0 <= burn <= 1000:
                return burn
    return None


def fractional(scheduler: str) -> bool:
    """Gets fgpu's fractional pods (and nodes advertising fgpu's device slots): fgpu and the null binder."""
    return scheduler == "fgpu" or null_burn_ms(scheduler) is not None


def parse_schedulers(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in SCHEDULERS and null_burn_ms(n) is None]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: allowed: a comma-separated list of {', '.join(SCHEDULERS)} "
                                         "and null+<0-1000>ms (the null binder spending that CPU per pod)")
    return list(dict.fromkeys(names))


def percent(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole percentage (allowed: 1..100)")
    return value


def operator_python(text: str) -> Path:
    """An interpreter beside an executable `fgpu` script (how a venv installs it)."""
    path = Path(text).expanduser().absolute()
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise argparse.ArgumentTypeError(f"{text!r} is not an executable file (allowed: a venv's bin/python)")
    if not os.access(path.with_name("fgpu"), os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r} has no executable fgpu beside it (allowed: the python of a venv "
                                         "with fgpu installed)")
    return path


def mode_rates(args: argparse.Namespace) -> list[tuple[str, float | None]]:
    """The (mode, offered rate) of each run a scheduler makes per setting: a rate run per --rate entry."""
    return [(mode, rate) for mode in args.modes for rate in (args.rate if mode == "rate" else [None])]
