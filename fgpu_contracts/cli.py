"""The one validation layer of fgpu's command lines (`fgpu`, `simgpu`, `fgpu-device-plugin`): a parser whose
usage errors are one line, option types that refuse what no command can use (nan, inf, out of range, ports
past 65535, unix socket paths past the kernel's limit), an output check made before any work starts, and
the shell every `main` runs its command in (bad input: one line naming the field, exit code 2; a reader
that went away: quiet exit; never a traceback for either).

An option type raises argparse.ArgumentTypeError, so argparse names the option (`argument --tune: ...`);
checks made after parsing raise InputError with `field="--option"`.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from .errors import InputError
from .extras import missing_extra

#: sockaddr_un.sun_path holds 108 bytes on Linux, the terminating NUL included (unix(7)).
UNIX_PATH_MAX = 107


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is a single line (and still exit code 2)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {' '.join(message.splitlines())}\n")


def _fmt(x: float) -> str:
    return f"{x:g}"


def number(kind: type = float, *, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
           also: tuple[float, ...] = (), why: str = "") -> Callable[[str], float | int]:
    """An argparse type: a finite `kind` (int or float) within [lo, hi] (`lo_open`: above lo), or one of
    `also` (e.g. 0 meaning "off"). The message names the value and what is allowed, and `why` when given."""
    parts = []
    if also:
        parts.append(" or ".join(_fmt(a) for a in also))
    if lo is not None and hi is not None:
        parts.append(f"{_fmt(lo)} {'<' if lo_open else '<='} N <= {_fmt(hi)}")
    elif lo is not None:
        parts.append(f"N {'>' if lo_open else '>='} {_fmt(lo)}")
    elif hi is not None:
        parts.append(f"N <= {_fmt(hi)}")
    allowed = ("an integer" if kind is int else "a finite number") + (f", {' or '.join(parts)}" if parts else "")
    if why:
        allowed += f"; {why}"

    def parse(text: str) -> float | int:
        try:
            value = int(text, 10) if kind is int else float(text)
        except ValueError:
            value = None
        ok = value is not None and math.isfinite(value)
        if ok and value not in also:
            ok = (lo is None or (value > lo if lo_open else value >= lo)) and (hi is None or value <= hi)
        if not ok:
            raise argparse.ArgumentTypeError(f"{text!r} is not allowed (allowed: {allowed})")
        return value

    parse.__name__ = kind.__name__  # argparse's fallback message names the type
    return parse


port = number(int, lo=0, hi=65535, why="0 picks any free port")


def unix_socket_path(text: str) -> str:
    """An argparse type for a unix socket to listen on: short enough for sockaddr_un, not under /proc or /sys."""
    if not text:
        raise argparse.ArgumentTypeError("'' is not allowed (allowed: a file path)")
    absolute = os.path.abspath(text)
    if len(os.fsencode(absolute)) > UNIX_PATH_MAX:
        raise argparse.ArgumentTypeError(
            f"{text!r} is {len(os.fsencode(absolute))} bytes as an absolute path (allowed: at most "
            f"{UNIX_PATH_MAX} bytes, the kernel's unix socket path limit)")
    if any(absolute == p or absolute.startswith(p + "/") for p in ("/proc", "/sys", "/dev")):
        raise argparse.ArgumentTypeError(
            f"{text!r} is on a kernel file system (allowed: a path outside /proc, /sys and /dev)")
    return text


def check_writable(path: str | os.PathLike[str], field: str) -> Path:
    """Refuse, before any work starts, an output file that cannot be written: a directory, a file we may not
    open for writing, or a folder we may not create it in (missing folders are fine if they can be made: the
    writer makes them). Tries for real (root passes every access() check, yet cannot write under /proc);
    leaves nothing behind and changes no existing file."""
    target = Path(path)
    if target.is_dir():
        raise InputError(f"{str(path)!r} is a directory", field=field, allowed=["a file path"])
    try:
        if target.exists():
            with open(target, "ab"):  # append mode, nothing written: the content and mtime stay as they are
                pass
            return target
        parent = target.absolute().parent
        while not parent.exists():
            parent = parent.parent
        if not parent.is_dir():
            raise InputError(f"{str(path)!r}: {parent} is not a directory", field=field, allowed=["a file path"])
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".fgpu-write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise InputError(f"{str(path)!r} cannot be written: {err.strerror or err}", field=field,
                         allowed=["a path in a writable directory"]) from None
    return target


def run_command(prog: str, func: Callable[[], int | None], errors: tuple[type[BaseException], ...] = (),
                extra: str | None = None) -> int:
    """Run a parsed command: InputError (and `errors`) -> one line `prog: error: ...` and exit code 2; an
    optional module not installed -> one line naming the extra to install (`extra`: the command's) and exit
    code 1; Ctrl-C -> 130; a closed stdout (`... | head`) -> a quiet 0."""
    try:
        code = int(func() or 0)
        sys.stdout.flush()  # inside the try: a reader gone before the last buffered write is a quiet exit too
        return code
    except (InputError, *errors) as exc:
        print(f"{prog}: error: {' '.join(str(exc).splitlines())}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        line = missing_extra(prog, exc, extra)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        quiet_stdout()
        return 0


def quiet_stdout() -> None:
    """After a BrokenPipeError: point stdout at /dev/null so the interpreter's final flush does not raise
    again (Python's documented recipe, docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
