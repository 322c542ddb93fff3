"""`fgpu inspect check --daemon-metrics [NODE=]URL`: each value checked before anything is read (one line naming
the option, the value and what is allowed; exit 2), each scrape read into the open contexts of its node, and
those checked one way (a context must belong to a live pod placed on that node; a pod owes no context)."""
from __future__ import annotations

import http.server
import threading

import pytest
from fgpu_operator.cli import main
from fgpu_operator.inspect.audit import Handed, check
from fgpu_operator.inspect.render import render
from fgpu_operator.inspect.scrape import Target, parse_target, read_contexts
from inspect_objects import GIB, assignment, h100, node, pod

from fgpu_contracts.errors import InputError

SCRAPE = """# TYPE fgpu_qos_priorities_enabled gauge
fgpu_qos_priorities_enabled{Hostname="gpu-a",hostname="gpu-a"} 1.0
# TYPE fgpu_pod_gpu_memory_limit_bytes gauge
fgpu_pod_gpu_memory_limit_bytes{gpu="0",UUID="GPU-a0",device="nvidia0",Hostname="gpu-a",hostname="gpu-a",\
GPU_I_PROFILE="",GPU_I_ID="",namespace="default",pod="%s",container="main"} 4.294967296e+10
"""


@pytest.fixture
def serve():
    """serve({path: (status, body)}) -> base URL of a local HTTP server answering those."""
    servers = []

    def start(pages: dict[str, tuple[int, str]]) -> str:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the stdlib's name
                status, body = pages.get(self.path, (404, "not found"))
                self.send_response(status)
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_targets_default_the_path_and_may_name_their_node():
    assert parse_target("http://gpu-a:9400") == Target(None, "http://gpu-a:9400/metrics")
    assert parse_target("gpu-a=https://10.0.0.1:9400/custom") == Target("gpu-a", "https://10.0.0.1:9400/custom")
    assert parse_target("http://h:1/m?a=b") == Target(None, "http://h:1/m?a=b")  # '=' after the scheme: the URL's


@pytest.mark.parametrize(("value", "why"), [
    ("localhost:9400", "is not an http(s) URL with a host"),
    ("ftp://h/metrics", "is not an http(s) URL with a host"),
    ("http://", "is not an http(s) URL with a host"),
    ("=http://h:1", "names an empty node before '='"),
    ("http://h:99999", "is not a URL (Port out of range 0-65535)"),
])
def test_a_bad_value_is_one_line_naming_option_value_and_what_is_allowed(value, why, capsys, tmp_path):
    with pytest.raises(InputError) as err:
        parse_target(value)
    assert str(err.value) == (f"--daemon-metrics: {value!r} {why} (allowed: [NODE=]http://HOST:PORT[/metrics], "
                              "[NODE=]https://HOST:PORT[/metrics])")
    # and from the CLI: before any cluster is read (this kubeconfig does not exist)
    assert main(["inspect", "check", "--kubeconfig", str(tmp_path / "none"), "--daemon-metrics", value]) == 2
    out, err_text = capsys.readouterr()
    assert out == "" and err_text == f"fgpu inspect: error: {err.value}\n"


def test_a_scrape_gives_its_nodes_open_contexts(serve):
    base = serve({"/metrics": (200, SCRAPE % "a"), "/other": (200, SCRAPE % "b")})
    contexts = read_contexts([parse_target(base), parse_target(f"renamed={base}/other")])
    assert contexts == {"gpu-a": [Handed("gpu-a", "default", "a", "main", "GPU-a0", live=True)],
                        "renamed": [Handed("renamed", "default", "b", "main", "GPU-a0", live=True)]}


@pytest.mark.parametrize(("pages", "value", "message"), [
    ({}, "{base}", "--daemon-metrics: {base}/metrics answered 404 Not Found"),
    ({"/metrics": (200, "fgpu_x{ 1\n")}, "{base}", "--daemon-metrics: {base}/metrics is not a Prometheus text scrape"),
    ({"/metrics": (200, "up 1\n")}, "{base}", "--daemon-metrics: {base}/metrics names no node (no Hostname label)"),
    ({"/metrics": (200, SCRAPE % "a")}, "{base} {base}/metrics", "--daemon-metrics: node gpu-a is given twice"),
    ({}, "http://127.0.0.1:1", "--daemon-metrics: cannot scrape http://127.0.0.1:1/metrics: "),
])
def test_a_scrape_that_cannot_be_read_is_one_line(serve, pages, value, message):
    base = serve(pages)
    with pytest.raises(InputError) as err:
        read_contexts([parse_target(v.format(base=base)) for v in value.split()])
    assert str(err.value).startswith(message.format(base=base)) and "\n" not in str(err.value)


def test_contexts_are_checked_one_way():
    nodes = [node("gpu-a", h100(0, "GPU-a0"))]
    share = assignment("gpu-a", ("main", 1, [{"uuid": "GPU-a0", "milli_gpu": 500, "mem_bytes": 40 * GIB}]))
    pods = [pod("a", node_name="gpu-a", assigned=share), pod("idle", node_name="gpu-a", assigned=share)]
    live = {"gpu-a": [Handed("gpu-a", "default", "a", "main", "GPU-a0", live=True)]}
    report = check(nodes, pods, contexts=live)
    assert report.ok and report.daemons == ("gpu-a",)  # `idle` opened no context: owes none
    assert render(report, "table").rstrip().endswith("; no context open for a pod gone or elsewhere on gpu-a")
    live["gpu-a"].append(Handed("gpu-a", "default", "gone", "main", "GPU-a0", live=True))
    live["gpu-b"] = [Handed("gpu-b", "default", "a", "main", "GPU-a0", live=True)]
    assert check(nodes, pods, contexts=live).violations == (
        "node gpu-a context for default/gone container main on GPU-a0: still open, but the pod is gone",
        "node gpu-b context for default/a container main on GPU-a0: the pod's allocation is on node gpu-a")
