"""Progress of `fgpu simulate` on stderr (stdout stays the table or JSON a script reads): a live bar on a
terminal (with rich installed); elsewhere (CI logs, `2> file`) plain lines, one when work starts, then at most one every
PLAIN_EVERY_S seconds, and one when it ends, so a log shows that minutes of work are moving."""
from __future__ import annotations

import sys
import time
from importlib.util import find_spec

PLAIN_EVERY_S = 10.0


class Progress:
    def __init__(self, title: str, total: int, *, stream=None, every_s: float = PLAIN_EVERY_S) -> None:
        self.title, self.total, self.done = title, total, 0
        self.stream = stream or sys.stderr
        self.every_s = every_s
        self._bar = self._task = None
        self._start = self._last = time.monotonic()

    def __enter__(self) -> Progress:
        if self.stream.isatty() and find_spec("rich") is not None:  # rich: the 'plan' extra
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            from .console import stderr_console

            columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            self._bar = Bar(*columns, transient=True, console=stderr_console())
            self._bar.__enter__()
            self._task = self._bar.add_task(self.title, total=self.total)
        else:
            self._line(f"{self.title} ...")
        return self

    def advance(self, what: object = None) -> None:
        """One unit done; `what` (e.g. "fgd seed 42") describes it."""
        self.done += 1
        if self._bar is not None:
            self._bar.update(self._task, advance=1, **({"description": str(what)} if isinstance(what, str) else {}))
            return
        now = time.monotonic()
        if now - self._last >= self.every_s and self.done < self.total:
            self._last = now
            self._line(f"{self.title}: {self.done}/{self.total} done, {now - self._start:.0f} s"
                       + (f" (last: {what})" if isinstance(what, str) else ""))

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
        elif exc[0] is None:
            self._line(f"{self.title}: {self.done}/{self.total} done in {time.monotonic() - self._start:.1f} s")

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)
