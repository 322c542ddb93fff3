"""`fgpu report`'s drawing: each dashboard's key panels as one PNG (matplotlib), from the same queries Grafana
runs (boards.py), with the template variables at All and `$__rate_interval` worked out as Grafana does, for
people without a Grafana at hand."""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from . import promql
from .model import Board, Panel
from .prom import Prometheus, Series

ALL = ".*"  # Grafana's allValue for every variable of the boards
_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")
# how each Grafana unit is drawn: (scale, axis label)
_UNITS = {"percentunit": (100.0, "%"), "percent": (1.0, "%"), "bytes": (1 / (1 << 30), "GiB"),
          "mbytes": (1.0, "MiB"), "s": (1.0, "seconds"), "watt": (1.0, "W"), "rotmhz": (1.0, "MHz"),
          "ops": (1.0, "per second"), "none": (1.0, "")}


@dataclass(frozen=True)
class Window:
    """The time range every query of a report reads, and the step and rate interval that go with it."""

    start: float
    end: float
    step_s: float
    rate: str  # what $__rate_interval becomes

    @classmethod
    def last(cls, since_s: int, end: float, scrape_interval_s: float, points: int = 240) -> Window:
        step = max(1.0, math.ceil(since_s / points))
        return cls(end - since_s, end, step, promql.rate_interval(step, scrape_interval_s))


def query(board: Board, expr: str, window: Window) -> str:
    """`expr` as Grafana sends it with every variable of `board` at All."""
    return promql.substitute(expr, {v.name: ALL for v in board.variables}, window.rate)


def legend(fmt: str, labels: dict[str, str]) -> str:
    """Grafana's legend format: `{{label}}` replaced by the series' value; empty or __auto: all its labels."""
    if fmt in ("", "__auto"):
        return "{" + ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}"
    return _LEGEND.sub(lambda m: labels.get(m.group(1), ""), fmt).strip() or "(no labels)"


def panel_series(prom: Prometheus, board: Board, panel: Panel, window: Window) -> list[tuple[str, Series]]:
    """(legend, series) of every target of `panel` over `window`."""
    out = []
    for target in panel.targets:
        for s in prom.query_range(query(board, target.expr, window), window.start, window.end, window.step_s):
            out.append((legend(target.legend, s.labels), s))
    return out


def draw(board: Board, panels: Sequence[tuple[Panel, list[tuple[str, Series]]]], window: Window,
         path: Path) -> Path:
    """The panels of one board in a grid of two columns, into `path` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    cols = 2 if len(panels) > 1 else 1
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 3.4 * rows), squeeze=False)
    for ax, (panel, series) in zip(axes.flat, panels, strict=False):
        scale, unit = _UNITS.get(panel.unit, (1.0, panel.unit))
        for name, s in sorted(series, key=lambda ns: ns[0])[:12]:  # a readable legend: at most 12 lines
            ax.plot([datetime.fromtimestamp(t, UTC) for t, _ in s.points],
                    [v * scale for _, v in s.points], label=name, linewidth=1.3)
        if not series:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="grey")
        ax.set_title(panel.title, fontsize=10)
        ax.set_ylabel(unit)
        lo = None if panel.min is None else panel.min * scale
        hi = None if panel.max is None else panel.max * scale
        if lo is not None and hi is not None:  # a little room, so a line at a bound stays visible
            lo, hi = lo - 0.03 * (hi - lo), hi + 0.03 * (hi - lo)
        ax.set_ylim(bottom=lo, top=hi)
        ax.set_xlim(datetime.fromtimestamp(window.start, UTC), datetime.fromtimestamp(window.end, UTC))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
        ax.grid(alpha=0.3)
        if series:
            ax.legend(fontsize=7, loc="best")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    span = f"{datetime.fromtimestamp(window.start, UTC):%Y-%m-%d %H:%M:%S} to " \
           f"{datetime.fromtimestamp(window.end, UTC):%H:%M:%S} UTC"
    fig.suptitle(f"{board.title}: key panels, {span}", fontsize=12)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def report(prom: Prometheus, boards: Sequence[Board], out: Path, window: Window,
           progress: Callable[[str], None] = lambda _: None) -> list[Path]:
    """One PNG per board (out/<uid>.png) of its key panels over `window`; the paths written."""
    paths = []
    for board in boards:
        panels = []
        for panel in board.key_panels:
            series = panel_series(prom, board, panel, window)
            progress(f"{board.uid}: {panel.title}: {len(series)} series")
            panels.append((panel, series))
        paths.append(draw(board, panels, window, out / f"{board.uid}.png"))
        progress(f"wrote {paths[-1]}")
    return paths
