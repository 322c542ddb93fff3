"""`fgpu inspect check --daemon-metrics` against a real node daemon: the context a workload holds open shows up
under the daemon's node, and one whose pod is gone is a violation."""
from __future__ import annotations

from fgpu_operator.inspect.audit import Handed, check
from fgpu_operator.inspect.scrape import parse_target, read_contexts
from test_daemon import GIB, Daemon, wait_for

from simgpu.client import DaemonClient


def test_an_open_context_is_read_from_the_daemons_metrics(tmp_path):
    daemon = Daemon(tmp_path)
    try:
        gpu = daemon.gpus[0]
        with DaemonClient(daemon.socket) as c:
            ctx = c.open_context(daemon.token(gpu, mem_limit_bytes=4 * GIB, pod_namespace="team-a",
                                              pod_name="trainer", container="main"))
            ctx.malloc(GIB)
            contexts: dict = {}

            def read():
                contexts.update(read_contexts([parse_target(daemon.metrics_url)]))
                return contexts.get("test-node")

            assert wait_for(read, timeout=10, step=0.2), contexts
            assert contexts == {"test-node": [Handed("test-node", "team-a", "trainer", "main", gpu, live=True)]}
            assert check([], [], contexts=contexts).violations == (
                f"node test-node context for team-a/trainer container main on {gpu}: still open, but the pod is gone",)
            ctx.close()
    finally:
        daemon.stop()
