"""`fgpu dashboards` (write the Grafana JSON) and `fgpu report` (draw the dashboards' key panels from a
Prometheus as PNGs). Bad input — a bad URL or duration, an unreachable Prometheus, an --out that cannot be
written — is one InputError line naming the option, and exit code 2."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from fgpu_contracts.errors import InputError
from fgpu_contracts.extras import need

from .boards import BOARDS

MAX_SINCE_S = 31 * 24 * 3600  # a month: longer ranges would be drawn at steps too coarse to read
SINCE_ALLOWED = ["a duration of d/h/m/s parts up to 31d, e.g. 30s, 15m, 2h, 1h30m"]


def register(subparsers) -> None:
    d = subparsers.add_parser(
        "dashboards", help="write fgpu's Grafana dashboards (JSON) into a folder",
        description="Render fgpu's dashboards (cluster overview, GPU/node detail, QoS) with "
                    "grafana-foundation-sdk and write OUT/<uid>.json, ready to import into Grafana or to ship "
                    "to Grafana's dashboard sidecar.")
    d.add_argument("--out", default="deploy/grafana", help="folder to write into (default: deploy/grafana)")
    d.set_defaults(func=run_dashboards, extra="report")
    r = subparsers.add_parser(
        "report", help="draw the dashboards' key panels from a Prometheus as PNGs",
        description="Query a Prometheus that scrapes fgpu's components for the last --since, and draw each "
                    "dashboard's key panels (with every node, GPU and namespace) into OUT/<uid>.png.")
    r.add_argument("--prometheus", required=True, metavar="URL", help="Prometheus base URL, e.g. http://localhost:9090")
    r.add_argument("--out", required=True, metavar="DIR", help="folder for the PNGs (created if missing)")
    r.add_argument("--since", default="15m", metavar="DURATION", help="time range ending now (default: 15m)")
    r.set_defaults(func=run_report, extra="report")


def _writable_dir(text: str) -> Path:
    """`text` as a folder that exists (created if missing) and takes files; InputError naming --out if not."""
    out = Path(text)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".fgpu-write-test-"):
            pass
    except OSError as e:
        raise InputError(f"{text!r} is not a writable folder ({e.strerror or e})", field="--out",
                         allowed=["a folder you can write to (created if missing)"]) from None
    return out


def run_dashboards(args: argparse.Namespace) -> int:
    from .grafana import write

    for path in write(BOARDS, _writable_dir(args.out)):
        print(path)
    return 0


def run_report(args: argparse.Namespace) -> int:
    from .prom import PromError, Prometheus, parse_duration
    from .report import Window, report

    need("matplotlib")  # the drawing's, checked before any query
    prom = Prometheus(args.prometheus)  # checks the URL's shape
    try:
        since_s = parse_duration(args.since)
    except ValueError:
        raise InputError(f"{args.since!r} is not a duration", field="--since", allowed=SINCE_ALLOWED) from None
    if since_s > MAX_SINCE_S:
        raise InputError(f"{args.since!r} is longer than 31d", field="--since", allowed=SINCE_ALLOWED)
    out = _writable_dir(args.out)

    def progress(line: str) -> None:
        print(f"fgpu report: {line}", file=sys.stderr, flush=True)

    try:
        version = prom.ready()
        interval = prom.scrape_interval_s()
    except PromError as e:
        raise InputError(str(e), field="--prometheus",
                         allowed=["the URL of a running Prometheus"]) from None
    progress(f"Prometheus {version} at {prom.url}, scrape interval {interval:g}s, last {args.since}")
    window = Window.last(since_s, time.time(), interval)
    try:
        paths = report(prom, BOARDS, out, window, progress)
    except PromError as e:  # it went away, or refused a query half-way
        print(f"fgpu report: error: {e}", file=sys.stderr)
        return 1
    for path in paths:
        print(os.fspath(path))
    return 0
