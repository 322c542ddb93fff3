"""The `simgpu` command line. Each subcommand lives in `simgpu/commands/<name>.py` and exposes
`register(subparsers)`; bad input raises SimgpuError and becomes one line on stderr with exit code 2
(fgpu_contracts.cli: usage errors too; `simgpu ... | head` ends quietly)."""
from __future__ import annotations

import argparse
import importlib
import sys

from fgpu_contracts.cli import OneLineParser, run_command

# One entry per subcommand module; add yours here (one line) when you create it.
COMMAND_MODULES: list[str] = [
    "mig",
    "predict",
    "calibrate",
    "daemon",
    "run",
    "fault",
    "token",
]


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="simgpu", description="simgpu: a GPU emulator that matches real hardware")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name in COMMAND_MODULES:
        importlib.import_module(f"simgpu.commands.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    return run_command(f"simgpu {args.command}", lambda: args.func(args), extra=getattr(args, "extra", None))


if __name__ == "__main__":
    sys.exit(main())
