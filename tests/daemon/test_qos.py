"""QoS through the running daemon: a latency-sensitive (high-priority) pod shares an H100 with a best-effort
hog. With priorities enforced (the default) its slowdown stays under its SLO bound; with qos.priorities off
the two share the device as equals and it violates the SLO. Every number is simgpu's account of what ran,
read from the metrics endpoint."""
import threading
import time

import pytest
from promcheck import matching, series
from test_daemon import GEMM, Daemon

from simgpu.client import DaemonClient

CONFIG = """version: v1
nodeName: qos-node
tokenSecretFile: {secret}
qos:
  priorities: {priorities}
gpus:
  - model: H100
    sharing: fractional
"""
BOUND = 1.2  # the default SLO (SchedulingPolicy defaultSloSlowdown, node config qos.sloSlowdown)
RUN_S = 2.5


def run(tmp_path, priorities: bool) -> dict:
    """Serve 'inference' requests (4 GEMMs, then 4 ms of host work) next to a training loop for RUN_S; the
    high-priority pod's slowdowns per metrics window and its SLO counters at the end."""
    config = CONFIG.replace("{priorities}", str(priorities).lower())
    daemon = Daemon(tmp_path, config, ("--metrics-interval", "0.25"))
    try:
        gpu = daemon.devices[0]["uuid"]
        with DaemonClient(daemon.socket) as train, DaemonClient(daemon.socket) as serve:
            hog = train.open_context(daemon.token(gpu, pod_namespace="ml", pod_name="train", container="main",
                                                  priority=1))
            ls = serve.open_context(daemon.token(gpu, pod_namespace="ml", pod_name="serve", container="main",
                                                 priority=0))
            done = threading.Event()

            def training():  # keeps its launch queue full all run long (a launch waits while it is full)
                while not done.is_set():
                    for _ in range(256):
                        hog.launch(GEMM)
                    hog.usage()  # sends the buffered launches

            def requests():
                end = time.monotonic() + RUN_S
                while time.monotonic() < end:
                    for _ in range(4):
                        ls.launch(GEMM)
                    ls.synchronize()
                    time.sleep(0.004)
                done.set()

            workers = [threading.Thread(target=training), threading.Thread(target=requests)]
            for worker in workers:
                worker.start()
            slowdowns = []
            while not done.wait(0.3):
                scraped = series(daemon.scrape())
                slowdowns += list(matching(scraped, "fgpu_pod_slowdown", pod="serve", priority="high").values())
            for worker in workers:
                worker.join()
            scraped = series(daemon.scrape())
            pod = {"pod": "serve", "priority": "high"}
            [evaluations] = matching(scraped, "fgpu_qos_slo_evaluations_total", **pod).values()
            [violations] = matching(scraped, "fgpu_qos_slo_violations_total", **pod).values()
            [bound] = matching(scraped, "fgpu_qos_slo_slowdown_bound", **pod).values()
            [enabled] = matching(scraped, "fgpu_qos_priorities_enabled").values()
        return {"slowdowns": slowdowns, "evaluations": evaluations, "violations": violations, "bound": bound,
                "enabled": enabled}
    finally:
        daemon.stop()


@pytest.mark.parametrize("priorities", [True, False], ids=["priorities-on", "priorities-off"])
def test_high_priority_pod_meets_its_slo_only_with_priorities_on(tmp_path, priorities):
    got = run(tmp_path, priorities)
    print(f"priorities {'on' if priorities else 'off'}: slowdown per window "
          f"{[round(s, 3) for s in got['slowdowns']]}, {got['violations']:.0f} of {got['evaluations']:.0f} "
          "SLO evaluations violated")
    assert got["enabled"] == (1.0 if priorities else 0.0) and got["bound"] == BOUND
    assert len(got["slowdowns"]) >= 3 and got["evaluations"] >= 5
    if priorities:
        assert max(got["slowdowns"]) <= BOUND
        assert got["violations"] == 0
    else:
        assert min(got["slowdowns"]) > BOUND
        assert got["violations"] >= 0.8 * got["evaluations"]

