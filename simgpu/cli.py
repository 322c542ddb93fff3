"""The `simgpu` command line. Each subcommand lives in `simgpu/commands/<name>.py` and exposes
`register(subparsers)`; bad input raises SimgpuError and becomes one line on stderr with exit code 2."""
from __future__ import annotations

import argparse
import importlib
import sys

from simgpu.errors import SimgpuError

# One entry per subcommand module; add yours here (one line) when you create it.
COMMAND_MODULES: list[str] = [
    "mig",
    "predict",
    "calibrate",
    "daemon",
    "run",
    "fault",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="simgpu", description="simgpu: a GPU emulator that matches real hardware")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"simgpu.commands.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except SimgpuError as err:
        print(f"simgpu {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
