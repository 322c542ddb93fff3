"""The `fgpu` command line. Subcommands are modules exposing `register(subparsers)` that set `func=`;
add a module path to COMMAND_MODULES to add one. Bad input is one line on stderr and exit code 2."""
from __future__ import annotations

import argparse
import importlib
import sys

from fgpu_contracts.cli import OneLineParser, run_command

COMMAND_MODULES = ("fgpu_operator.sim.command", "fgpu_operator.controller.command",
                   "fgpu_operator.inspect.command", "fgpu_operator.observe.command")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="fgpu", description="fgpu: fractional GPUs for Kubernetes")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return run_command(f"fgpu {args.command}", lambda: args.func(args), errors=(ValueError,),
                       extra=getattr(args, "extra", None))


if __name__ == "__main__":
    sys.exit(main())
