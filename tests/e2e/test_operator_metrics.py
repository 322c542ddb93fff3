"""A running `fgpu operator --metrics-port` on the real control plane: its /metrics passes `promtool check
metrics`, serves exactly the catalogue's operator families, and follows pods being placed, parked and deleted
(the deleted pod's series leave with it)."""
from __future__ import annotations

import urllib.request

import pytest
from operator_proc import gpu_node, share_pod, start_operator, stop
from polling import wait_for
from promcheck import matching, promtool_check, series, value

from devcluster.kubeplane import free_port
from fgpu_contracts.metrics import of

pytestmark = pytest.mark.e2e
GIB = 1 << 30


def _base(name: str, kind: str) -> str:
    for suffix in ("_bucket", "_count", "_sum") if kind == "histogram" else ():
        name = name.removesuffix(suffix)
    return name


def test_metrics_follow_pods_placed_parked_and_deleted(k8s, kwok, kubeconfig_env, make_kwok_node, namespace,
                                                       tmp_path):
    from kubernetes import client

    gpu_node(make_kwok_node, k8s, "met-h100", count=1)
    port = free_port()
    proc = start_operator(k8s, tmp_path, "--metrics-port", str(port))

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        promtool_check(text)
        return text

    try:
        catalogue = of("operator")
        histograms = {n for n, m in catalogue.items() if m.type == "histogram"}
        first = series(scrape())
        names = {_base(n, "histogram" if any(n.startswith(h) for h in histograms) else "") for n, _ in first}
        assert names <= set(catalogue) and not any(n.endswith("_created") for n in names)
        assert list(matching(first, "fgpu_operator_leader").values()) == [1]  # --no-leader-elect: it leads
        with k8s.api() as api:
            core = client.CoreV1Api(api)
            for name, milli, mem in (("a", 300, 8), ("b", 300, 8), ("big", 300, 100)):
                core.create_namespaced_pod(namespace, share_pod(name, milli, mem))
            wait_for(lambda: all(core.read_namespaced_pod(n, namespace).spec.node_name for n in ("a", "b")),
                     what="a and b bound")
            vgpu = "hami_vgpu_memory_allocated_bytes"
            placed = wait_for(lambda: (s := series(scrape())) and len(matching(s, vgpu, namespace=namespace)) == 2
                              and value(s, "fgpu_scheduler_pending_pods", queue="unschedulable", reason="GpuFit")
                              and s, what="a, b allocated and big parked in /metrics")
            assert matching(placed, vgpu, namespace=namespace, pod="a", node="met-h100")
            core.delete_namespaced_pod("a", namespace, grace_period_seconds=0)
            after = wait_for(lambda: (s := series(scrape())) and not matching(s, vgpu, namespace=namespace, pod="a")
                             and s, what="a's series gone from /metrics")
    finally:
        stop(proc)
    (held,) = matching(after, vgpu, namespace=namespace, pod="b").values()
    assert held == 8 * GIB
    assert not matching(after, "hami_vgpu_core_allocated_ratio", namespace=namespace, pod="a")
    gpu = matching(after, "hami_gpu_memory_allocated_bytes", node="met-h100")
    assert list(gpu.values()) == [8 * GIB]
    assert value(after, "fgpu_scheduler_binds_total", result="ok") >= 2
    assert value(after, "fgpu_scheduler_create_to_bound_seconds_count") >= 2
    assert value(after, "fgpu_scheduler_attempts_total", result="unschedulable", reason="GpuFit") >= 1
    # every family of the catalogue is served now (each has samples after this scenario)
    assert {_base(n, "histogram" if any(n.startswith(h) for h in histograms) else "") for n, _ in after} \
        == set(catalogue) - {"fgpu_webhook_admissions_total",  # no webhook in this process
                             "fgpu_mig_reconfiguration_in_progress"}  # a series per dynamic-MIG GPU: none here
