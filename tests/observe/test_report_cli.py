"""`fgpu report`'s bad input is one line naming the option, the value and what is allowed, exit code 2, no
traceback, and nothing is queried; plus the pieces `report` is built from (durations, legends, Grafana's
variable and rate-interval substitution). Drawing from a live Prometheus is tests/e2e/test_dashboards_prometheus.py."""
from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from fgpu_operator.observe import promql
from fgpu_operator.observe.boards import BOARDS, QOS
from fgpu_operator.observe.prom import parse_duration
from fgpu_operator.observe.report import Window, legend, query

FGPU = str(Path(sys.executable).with_name("fgpu"))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([FGPU, "report", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("args", "option", "value", "allowed"), [
    (["--prometheus", "localhost:9090"], "--prometheus", "localhost:9090", "http://HOST:PORT"),
    (["--prometheus", "ftp://x:1"], "--prometheus", "ftp://x:1", "http://HOST:PORT"),
    (["--prometheus", "http://127.0.0.1:70000"], "--prometheus", "70000", "PORT 1-65535"),
    (["--since", "15"], "--since", "'15'", "15m"),
    (["--since", "0m"], "--since", "'0m'", "15m"),
    (["--since", "40d"], "--since", "'40d'", "up to 31d"),
    (["--out", "/proc/fgpu-report"], "--out", "/proc/fgpu-report", "a folder you can write to"),
    ([], "--prometheus", "unreachable", "a running Prometheus"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, option, value, allowed):
    base = {"--prometheus": f"http://127.0.0.1:{_closed_port()}", "--out": str(tmp_path / "out"), "--since": "5m"}
    for flag, v in zip(args[::2], args[1::2], strict=True):
        base[flag] = v
    done = _report(*(x for kv in base.items() for x in kv))
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith(f"fgpu report: error: {option}:") and value in lines[0] and allowed in lines[0]
    assert not list(tmp_path.rglob("*.png"))


def test_durations():
    assert [parse_duration(t) for t in ("30s", "15m", "2h", "1h30m", "1d")] == [30, 900, 7200, 5400, 86400]
    for bad in ("", "15", "m", "-5m", "1.5h", "0s", "5x"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_queries_are_sent_as_grafana_sends_them_with_all_selected():
    window = Window.last(900, end=10_000.0, scrape_interval_s=15)
    assert (window.start, window.end, window.step_s, window.rate) == (9100.0, 10_000.0, 4.0, "60s")
    for board in BOARDS:
        for panel in board.key_panels:
            for target in panel.targets:
                sent = query(board, target.expr, window)
                assert "$" not in sent and promql.metric_names(sent) == promql.metric_names(target.expr)
    (violations,) = [p for p in QOS.panels if p.title == "SLO violations"]
    assert query(QOS, violations.targets[0].expr, window) == (
        'sum by (namespace, pod) (rate(fgpu_qos_slo_violations_total{Hostname=~".*", UUID=~".*", '
        'namespace=~".*"}[60s]))')


def test_rate_interval_is_grafanas():
    assert promql.rate_interval(1, 1) == "4s"  # 4 x scrape interval
    assert promql.rate_interval(30, 5) == "35s"  # step + scrape interval


def test_legend_format():
    labels = {"namespace": "ml", "pod": "serve", "priority": "high"}
    assert legend("{{namespace}}/{{pod}} ({{priority}})", labels) == "ml/serve (high)"
    assert legend("{{ pod }}", labels) == "serve"
    assert legend("__auto", {"b": "2", "a": "1"}) == "{a=1, b=2}"
    assert legend("{{missing}}", labels) == "(no labels)"
