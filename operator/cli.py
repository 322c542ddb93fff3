"""The `fgpu` command line. Subcommands are modules exposing `register(subparsers)` that set `func=`;
add a module path to COMMAND_MODULES to add one. Bad input is one line on stderr and exit code 2."""
from __future__ import annotations

import argparse
import importlib
import sys

from fgpu_operator.placement.errors import PlacementInputError

COMMAND_MODULES = ("fgpu_operator.sim.command", "fgpu_operator.controller.command",
                   "fgpu_operator.inspect.command", "fgpu_operator.observe.command")


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is a single line (and still exit code 2)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="fgpu", description="fgpu: fractional GPUs for Kubernetes")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_OneLineParser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (PlacementInputError, ValueError) as exc:
        print(f"fgpu {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`fgpu simulate | head`): not an error worth a traceback.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
