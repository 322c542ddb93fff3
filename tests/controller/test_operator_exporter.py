"""The operator's exporter: its families are exactly the catalogue's operator part (names, types, label names),
its values follow a small scenario on the real scheduler over a fake API (two pods bound, one parked, one
deleted: no series of the deleted pod, no NaN, no negative, no duplicate), the cluster's fragmentation is the
simulator's FGD function on the live arrays, a MIG layout change leaves consistent series, a scrape during
start-up works, and `promtool check metrics` passes on every exposition."""
import asyncio
import contextlib
import gzip
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import kopf
import numpy as np
import pytest
from fgpu_operator.controller import webhook
from fgpu_operator.controller.exposition import CHUNK_BYTES, GaugeWriter, gzipped, regroup
from fgpu_operator.controller.metrics import (
    REASONS,
    OperatorMetrics,
    reason_plugin,
    unschedulable_reason,
)
from fgpu_operator.controller.scheduler import Scheduler
from fgpu_operator.kube.events import EventRecorder
from fgpu_operator.objects import timestamp
from fgpu_operator.placement.filters import FILTERS, NodeAffinity, NodeUnschedulable
from fgpu_operator.placement.fragmentation import FragMeter
from fgpu_operator.placement.framework import Unschedulable
from fgpu_operator.placement.live import LiveCluster
from fgpu_operator.placement.model import Request
from inventories import fractional_inventory, mig_inventory
from promcheck import (
    catalogue_shape,
    matching,
    prometheus_client_gauges,
    promtool_check,
    registry_shape,
    sample_labels,
    series,
    value,
)
from test_scheduler import FakeApi, FakeEvents

from fgpu_contracts import keys
from fgpu_contracts.assignment import Assignment, ContainerAssignment, DeviceShare, dump_assignment
from fgpu_contracts.metrics import of
from fgpu_contracts.request import ContainerRequest, GpuRequest, dump_request

GIB = 1 << 30
ALLOCATABLE = {"cpu": "32", "memory": "256Gi", "pods": "110"}


def pod(name: str, milli: int, mem_gib: int = 0) -> dict:
    req = GpuRequest(containers=[ContainerRequest(container="main", milli_gpu=milli, mem_bytes=mem_gib * GIB or None)])
    return {"metadata": {"name": name, "namespace": "ns", "uid": name, "creationTimestamp": timestamp(),
                         "annotations": {keys.REQUEST: dump_request(req)}},
            "spec": {"schedulerName": keys.SCHEDULER_NAME, "containers": [{"name": "main"}]}}


def node(name: str, inventory: str) -> dict:
    return {"metadata": {"name": name, "annotations": {keys.INVENTORY: inventory}},
            "status": {"allocatable": ALLOCATABLE}}


async def scrape(metrics: OperatorMetrics) -> str:
    """From another thread, as the HTTP server does: the collector hands the read to the scheduler's loop."""
    text = (await asyncio.to_thread(metrics.exposition)).decode()
    promtool_check(text)
    return text


def test_families_are_the_catalogues_operator_part_even_before_any_sample():
    metrics = OperatorMetrics()
    assert registry_shape(metrics.exposition().decode()) == catalogue_shape(of("operator"))
    scraped = {k: v for k, v in series(metrics.exposition().decode()).items()  # a scrape during
               if not k[0].endswith("_created")}  # start-up: no model yet (`fgpu operator` disables _created)
    histogram = {f"{h}{suffix}" for suffix in ("_bucket", "_count", "_sum")
                 for h in ("fgpu_scheduler_create_to_bound_seconds", "fgpu_mig_reconfiguration_seconds",
                           "fgpu_scheduler_preemption_decision_seconds")}
    outcomes = {"fgpu_scheduler_attempts_total", "fgpu_scheduler_binds_total",  # every outcome at 0 from the start
                "fgpu_scheduler_events_dropped_total", "fgpu_scheduler_slo_holds_total",
                "fgpu_mig_reconfigurations_total", "fgpu_scheduler_preemptions_total",
                "fgpu_scheduler_preemption_victims_total"}
    assert {name for name, _ in scraped} <= histogram | outcomes
    assert {name for name, _ in scraped} >= outcomes
    assert all(v == 0 for (name, _), v in scraped.items() if name in outcomes)
    preemptions = {dict(labels)["result"] for name, labels in scraped if name == "fgpu_scheduler_preemptions_total"}
    assert preemptions == {"nominated", "none", "never", "failed"}
    binds = {dict(labels)["result"] for name, labels in scraped if name == "fgpu_scheduler_binds_total"}
    assert {"ok", "conflict", "gone", "unavailable", "not_leader"} <= binds
    reasons = {dict(labels)["reason"] for name, labels in scraped
               if name == "fgpu_scheduler_attempts_total" and dict(labels)["result"] == "unschedulable"}
    assert reasons == set(REASONS) - {"Error"}
    promtool_check(metrics.exposition().decode())


def test_scenario_values_deleted_pod_leaves_no_series_and_every_family_has_the_catalogues_labels():
    async def scenario():
        metrics = OperatorMetrics()
        s = Scheduler(LiveCluster(policy="binpack"), FakeApi(), FakeEvents(), metrics=metrics)
        metrics.attach(s, "replica-1", s.is_leader, asyncio.get_running_loop())
        loop = asyncio.create_task(s.run())
        s.on_node("ADDED", node("n", fractional_inventory("n", 2, uuid=lambda i: f"GPU-{i}")))
        for p in (pod("a", 300), pod("b", 500), pod("big", 300, 100)):
            s.on_pod("ADDED", p)
        await asyncio.sleep(0.05)
        await s.drain()
        before = series(await scrape(metrics))
        s.on_pod("DELETED", pod("a", 300))
        await asyncio.sleep(0.05)
        await s.drain()
        webhook.normalise_pod(body=kopf.Body({"metadata": {"name": "w", "annotations": {keys.FGPU_FRACTION: "0.5"}},
                                              "spec": {"containers": [{"name": "main"}]}}),
                              patch=kopf.Patch(), memo=_memo(metrics))
        after = series(await scrape(metrics))
        loop.cancel()
        return metrics, s, before, after

    metrics, s, before, after = asyncio.run(scenario())
    vgpu = "hami_vgpu_memory_allocated_bytes"
    a = dict(namespace="ns", node="n", pod="a", container_index="main", device_uuid="GPU-0")
    assert value(before, vgpu, **a) == 24 * GIB  # a's 0.3 of an 80 GiB GPU
    assert matching(after, vgpu, pod="a") == {} and matching(after, "hami_vgpu_core_allocated_ratio", pod="a") == {}
    assert value(after, vgpu, **{**a, "pod": "b"}) == 40 * GIB
    assert value(after, "hami_vgpu_core_allocated_ratio", **{**a, "pod": "b"}) == 50
    gpu0 = dict(node="n", device_uuid="GPU-0", device_index="0", device_type="H100-SXM5-80GB")
    containers = "fgpu_scheduler_gpu_containers"
    assert value(before, containers, **gpu0, sharing="fractional") == 2
    assert value(after, containers, **gpu0, sharing="fractional") == 1
    assert value(after, "hami_gpu_memory_allocated_bytes", **gpu0, device_cores="100") == 40 * GIB
    assert value(after, "hami_gpu_memory_limit_bytes", **gpu0) == 80 * GIB
    assert value(after, "hami_gpu_core_allocated_ratio", **gpu0) == 50
    assert value(after, "hami_node_gpu_memory_allocated_ratio", node="n", device_uuid="GPU-0", device_index="0") == 0.5
    assert value(after, "fgpu_scheduler_gpu_allocated_ratio", **gpu0, sharing="fractional") == 0.5
    assert value(after, "fgpu_scheduler_gpu_allocated_ratio", **{**gpu0, "device_uuid": "GPU-1", "device_index": "1"},
                 sharing="fractional") == 0
    assert value(before, "fgpu_cluster_gpu_allocation_ratio") == 0.4
    assert value(after, "fgpu_cluster_gpu_allocation_ratio") == 0.25
    assert value(after, "fgpu_cluster_gpus", sharing="fractional", healthy="true") == 2
    # counters: 2 scheduled, "big" unschedulable (memory: the GpuFit plug-in) at arrival and again on the deletion
    assert value(after, "fgpu_scheduler_attempts_total", result="scheduled", reason="") == 2
    assert value(after, "fgpu_scheduler_attempts_total", result="unschedulable", reason="GpuFit") == 2
    assert value(after, "fgpu_scheduler_binds_total", result="ok") == 2
    assert value(after, "fgpu_scheduler_create_to_bound_seconds_count") == 2
    assert value(after, "fgpu_scheduler_create_to_bound_seconds_bucket", le="+Inf") == 2
    pending = matching(after, "fgpu_scheduler_pending_pods")
    assert sum(pending.values()) == 1
    assert value(after, "fgpu_scheduler_pending_pods", queue="unschedulable", reason="GpuFit") == 1
    assert len(matching(after, "fgpu_scheduler_pending_pods", queue="unschedulable")) == len(REASONS)
    assert value(after, "fgpu_operator_leader", identity="replica-1") == 1
    assert value(after, "fgpu_webhook_admissions_total", webhook="mutate", outcome="mutated", source="fgpu") == 1
    # FGD fragmentation: the simulator's own function on the live arrays (all GPUs here take shares)
    c = s.live.cluster
    idle = int(c.gpu_left[c.gpu_slots].sum())
    fragment = float(FragMeter(c, s.live.workload).node_amounts(c).sum())
    assert 0 < fragment < idle
    assert np.isclose(value(after, "fgpu_cluster_gpu_fragmentation_ratio"), fragment / idle)
    assert np.isclose(value(after, "fgpu_cluster_fragmented_gpus"), fragment / 1000)
    # every family of the catalogue has samples now, each with exactly the catalogue's label names
    webhook.protect_handoff(body=kopf.Body({"metadata": {}}), old=kopf.Body({"metadata": {}}), userinfo={},
                            memo=_memo(metrics))
    s.on_node("ADDED", node("d", mig_inventory("d", ["1g.10gb"] * 7, dynamic=True)))  # idle, dynamic MIG
    text = metrics.exposition().decode()
    assert value(series(text), "fgpu_mig_reconfiguration_in_progress", node="d", device_uuid="GPU-d-0") == 0
    labels = sample_labels(text)
    for name, m in of("operator").items():
        assert labels[name] == {tuple(sorted(m.labels))}, name  # a text exposition sorts label names


def _memo(metrics: OperatorMetrics) -> kopf.Memo:
    memo = kopf.Memo()
    memo.metrics = metrics
    return memo


def test_events_the_recorder_drops_are_counted():
    metrics = OperatorMetrics()
    recorder = EventRecorder(None, max_backlog=0, on_drop=metrics.event_dropped)  # every post finds it full
    assert not any(recorder.post("ns", f"p{i}", f"uid-{i}", "Scheduled", "assigned") for i in range(3))
    got = series(metrics.exposition().decode())
    assert got[("fgpu_scheduler_events_dropped_total", ())] == 3


def test_webhook_decisions_by_outcome_and_source():
    metrics = OperatorMetrics()
    memo = _memo(metrics)

    def admit(annotations: dict, containers=({"name": "main"},)):
        with contextlib.suppress(kopf.AdmissionError):
            webhook.normalise_pod(body=kopf.Body({"metadata": {"name": "p", "annotations": annotations},
                                                  "spec": {"containers": list(containers)}}),
                                  patch=kopf.Patch(), memo=memo)

    admit({keys.FGPU_FRACTION: "0.5"})
    admit({})  # no GPU asked: passed through
    admit({keys.FGPU_FRACTION: "1.5"})  # refused
    admit({keys.ASSIGNMENT: "{}", keys.FGPU_FRACTION: "0.5"})  # a hand-off on a new pod: forbidden
    admit({}, [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096"}}}])
    old, new = {"metadata": {"annotations": {}}}, {"metadata": {"annotations": {keys.ASSIGNMENT: "{}"}}}
    with contextlib.suppress(kopf.AdmissionError):
        webhook.protect_handoff(body=kopf.Body(new), old=kopf.Body(old), userinfo={"username": "alice"}, memo=memo)
    webhook.protect_handoff(body=kopf.Body(old), old=kopf.Body(old), userinfo={"username": "alice"}, memo=memo)
    got = matching(series(metrics.exposition().decode()), "fgpu_webhook_admissions_total")
    assert {tuple(v for _, v in k[1]): n for k, n in got.items()} == {
        ("mutated", "fgpu", "mutate"): 1, ("passed", "", "mutate"): 1, ("denied", "", "mutate"): 2,
        ("mutated", "hami", "mutate"): 1, ("denied", "", "validate"): 1, ("allowed", "", "validate"): 1}


def test_mig_layout_change_and_restored_pod_keep_series_consistent():
    async def scenario():
        metrics = OperatorMetrics()
        s = Scheduler(LiveCluster(policy="binpack"), FakeApi(), FakeEvents(), metrics=metrics)
        metrics.attach(s, "r", lambda: False, asyncio.get_running_loop())
        s.on_node("ADDED", node("m", mig_inventory("m", ["3g.40gb", "1g.10gb"])))
        bound = pod("p", 1000)
        bound["spec"]["nodeName"] = "m"
        bound["metadata"]["annotations"][keys.ASSIGNMENT] = dump_assignment(Assignment(node="m", containers=[
            ContainerAssignment(name="main", devices=[DeviceShare(uuid="MIG-m-3g.40gb-0", mig_profile="3g.40gb")])]))
        s.on_pod("ADDED", bound)
        first = series(await scrape(metrics))
        s.on_node("MODIFIED", node("m", mig_inventory("m", ["1g.10gb"] * 7)))  # re-partitioned under the pod
        second = series(await scrape(metrics))
        return first, second

    first, second = asyncio.run(scenario())
    inst = json.loads(mig_inventory("m", ["3g.40gb"]))["gpus"][0]["mig"][0]
    gpu = dict(node="m", device_uuid="GPU-m-0", device_index="0", device_type="H100-SXM5-80GB")
    assert value(first, "hami_gpu_memory_allocated_bytes", **gpu, device_cores="100") == inst["memBytes"]
    assert np.isclose(value(first, "fgpu_scheduler_gpu_allocated_ratio", **gpu, sharing="mig"), 60 / 132)
    assert value(first, "fgpu_scheduler_gpu_containers", **gpu, sharing="mig") == 1
    assert value(first, "fgpu_cluster_gpus", sharing="mig", healthy="true") == 1
    assert value(first, "fgpu_cluster_gpu_allocation_ratio") == 0  # no GPU here takes shares: nothing to divide
    assert value(first, "fgpu_operator_leader", identity="r") == 0
    # after the change the old instance is gone: the GPU counts nothing it cannot name; the pod still holds it
    assert value(second, "hami_gpu_memory_allocated_bytes", **gpu, device_cores="100") == 0
    assert value(second, "fgpu_scheduler_gpu_containers", **gpu, sharing="mig") == 0
    (held,) = matching(second, "hami_vgpu_memory_allocated_bytes", pod="p").values()
    assert held == 0  # its instance is not on the node any more: no size to report, and no guess
    assert len(matching(second, "hami_gpu_memory_limit_bytes")) == 1


def test_unschedulable_reason_is_the_plug_in_that_rejected_most_nodes():
    r = Request("x", 0)
    assert unschedulable_reason(Unschedulable(r, 0, ())) == "NoNodes"
    assert unschedulable_reason(Unschedulable(r, 3, (("node(s) had no GPU", 1), ("Insufficient GPU memory", 2)))) \
        == "GpuFit"
    assert unschedulable_reason(Unschedulable(r, 2, (("Insufficient cpu", 1), ("Insufficient GPU", 1)))) == "GpuFit"
    assert unschedulable_reason(Unschedulable(r, 4, (("Insufficient cpu", 2), ("Insufficient memory", 1),
                                                     ("Insufficient GPU", 1)))) == "NodeResourcesFit"
    cases = {NodeUnschedulable.reason: "NodeUnschedulable", "node(s) had untolerated taint {gpu: h100}": "TaintToleration",
             NodeAffinity.reason: "NodeAffinity", "Insufficient cpu": "NodeResourcesFit", "Too many pods": "NodeResourcesFit",
             "Insufficient nvidia.com/gpu.shared": "NodeResourcesFit", "node(s) had no GPU": "GpuModel",
             "node(s) had no GPU of the requested model": "GpuModel", "Insufficient whole GPU": "GpuFit",
             "node(s) had no GPU allowed by the pod's GPU UUID or sharing-group rules": "GpuFit",
             "Insufficient nvidia.com/mig-1g.10gb": "MigSlot", "would break a co-runner's SLO": "SloFit",
             "had only GPUs held: a protected pod measured over its SLO": "SloFit", "something new": "Other"}
    assert {k: reason_plugin(k) for k in cases} == cases
    assert {f.name for f in FILTERS} <= set(cases.values())  # every filter plug-in is a reason


def test_a_scrape_reads_on_the_models_loop_and_in_place_once_it_stopped():
    metrics = OperatorMetrics()
    s = Scheduler(LiveCluster(policy="binpack"), FakeApi(), FakeEvents(), metrics=metrics)

    async def blocked():
        metrics.attach(s, "r", lambda: True, asyncio.get_running_loop())
        return await asyncio.to_thread(metrics.exposition)  # the loop waits here, free to answer

    assert b"fgpu_scheduler_pending_pods{" in asyncio.run(blocked())

    async def stuck():
        metrics.attach(s, "r", lambda: True, asyncio.get_running_loop())
        metrics.model.timeout_s = 0.1
        scrape = asyncio.get_running_loop().run_in_executor(None, metrics.exposition)
        time.sleep(0.5)  # the loop does not answer in time: the scrape gives up on the model, still answers
        return series((await scrape).decode())

    scraped = asyncio.run(stuck())
    assert value(scraped, "fgpu_operator_leader", identity="r") == 1
    assert not matching(scraped, "fgpu_scheduler_pending_pods")
    metrics.model.timeout_s = 5.0
    text = metrics.exposition().decode()  # the loop is closed now: read in place
    assert registry_shape(metrics.exposition().decode()) == catalogue_shape(of("operator"))
    assert value(series(text), "fgpu_operator_leader", identity="r") == 1
    s.on_node("ADDED", node("n", fractional_inventory("n", 1)))
    s.on_node("MODIFIED", node("n", fractional_inventory("n", 1, unhealthy={0: 79})))
    scraped = series(metrics.exposition().decode())
    assert value(scraped, "fgpu_cluster_gpus", sharing="fractional", healthy="false") == 1
    assert value(scraped, "fgpu_cluster_gpu_allocation_ratio") == 0
    assert value(scraped, "fgpu_cluster_gpu_fragmentation_ratio") == 0


def test_a_taken_or_bad_metrics_port_fails_the_command_in_one_line():
    fgpu = str(Path(sys.executable).with_name("fgpu"))
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([fgpu, "operator", "--metrics-port", str(port)], capture_output=True, text=True,
                              timeout=120)
    assert (done.returncode, done.stderr) == (2, f"fgpu operator: error: --metrics-port: {port}: cannot serve "
                                                 "metrics: Address already in use\n")
    done = subprocess.run([fgpu, "operator", "--metrics-port", "65536"], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (
        2, "fgpu operator: error: --metrics-port: 65536 is not a TCP port (allowed: 0..65535)\n")


def test_gauge_writer_writes_prometheus_clients_bytes_and_drops_gone_series():
    families = [("fam_b", 'help with \\ a backslash\nand a newline', ("zeta", "alpha", "mid")),
                ("fam_a", "no labels", ()), ("fam_empty", "never a sample", ("x",))]
    nasty = ('q"uote', "back\\slash", "new\nline")
    first = {"fam_b": {nasty: 1.0, ("a", "b", "c"): 0.0, ("a", "b", "d"): 1e-7, ("x", "y", "z"): 1234567.0,
                       ("big", "", "1"): 80.0 * GIB, ("inf", "", "2"): float("inf"), ("third", "", "3"): 1 / 3},
             "fam_a": {(): 42.0}}
    writer = GaugeWriter(families)

    def write(samples) -> str:  # one scrape's whole text
        return b"".join(writer.chunks(samples)).decode()

    assert write(first).encode() == prometheus_client_gauges(families, first)
    second = {"fam_b": {("a", "b", "c"): 2.5, ("new", "one", "here"): 1.0}}  # the rest gone, one value changed
    assert write(second).encode() == prometheus_client_gauges(families, second)
    assert "fam_a" in write(second) and 'zeta="q' not in write(second)


def test_model_gauges_write_what_prometheus_client_writes_for_the_same_model_scrape_after_scrape():
    """Node by node from the text kept at the last scrape where nothing changed, rewritten where something did:
    every scrape is prometheus_client's bytes for the model's samples at that moment."""
    async def scenario():
        metrics = OperatorMetrics()
        s = Scheduler(LiveCluster(policy="binpack"), FakeApi(), FakeEvents(), metrics=metrics)
        metrics.attach(s, "replica-1", s.is_leader, asyncio.get_running_loop())
        loop = asyncio.create_task(s.run())
        for n in ("n1", "n2", "n3"):
            s.on_node("ADDED", node(n, fractional_inventory(n, 4, uuid=lambda i, n=n: f"GPU-{n}-{i}")))
        pods = [pod(f"p{i}", milli, mem_gib=i) for i, milli in enumerate((300, 500, 700, 1000, 200, 250, 1000))]

        async def settle():
            await asyncio.sleep(0.05)
            await s.drain()

        async def scrape_both():
            text = b"".join(await asyncio.to_thread(metrics.model.chunks)).decode()
            return text, await asyncio.to_thread(metrics.model.samples)

        for p in pods:
            s.on_pod("ADDED", p)
        await settle()
        scrapes = [await scrape_both(), await scrape_both()]  # the second from the kept text
        s.on_pod("DELETED", pods[1])  # one node's pods change
        s.on_node("MODIFIED", node("n3", fractional_inventory("n3", 4, uuid=lambda i: f"GPU-n3-{i}",
                                                              unhealthy={2: 79})))  # another node changes
        s.on_node("DELETED", node("n2", ""))  # and one goes, its pods still holding shares
        await settle()
        scrapes.append(await scrape_both())
        loop.cancel()
        return metrics, scrapes

    metrics, scrapes = asyncio.run(scenario())
    assert sum(map(len, scrapes[0][1].values())) > 80
    for text, samples in scrapes:
        assert text.encode() == prometheus_client_gauges(metrics.model.FAMILIES, samples)
    assert scrapes[0][0] == scrapes[1][0] and scrapes[2][0] != scrapes[1][0]
    last = series(scrapes[2][0])
    assert matching(last, "hami_vgpu_memory_allocated_bytes", node="n2")  # its pods' shares, still held
    assert not matching(last, "hami_gpu_memory_limit_bytes", node="n2")  # its GPUs, gone with it


def test_metrics_endpoint_answers_the_exposition_plain_and_gzipped_and_refuses_a_post():
    import urllib.error
    import urllib.request

    metrics = OperatorMetrics()
    metrics.bind("ok")
    server = metrics.serve(0, "127.0.0.1")
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            plain, kind, plain_length = answer.read(), answer.headers["Content-Type"], answer.headers["Content-Length"]
        request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            zipped, encoding, zipped_length = (answer.read(), answer.headers["Content-Encoding"],
                                               answer.headers["Content-Length"])
        try:
            urllib.request.urlopen(urllib.request.Request(url, data=b"x", method="POST"), timeout=10)
            status = 200
        except urllib.error.HTTPError as err:
            status = err.code
        head = raw_answer(server.server_port, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    finally:
        server.shutdown()
    head_lines, head_body = head.split(b"\r\n\r\n", 1)
    assert head_lines.split(b"\r\n")[0].endswith(b" 200 OK") and f"Content-Length: {len(plain)}".encode() in head_lines
    assert head_body == b""  # a body after a HEAD answer would be read as the next answer on a kept-alive connection
    assert kind == "text/plain; version=0.0.4; charset=utf-8" and plain == metrics.exposition()
    assert encoding == "gzip" and gzip.decompress(zipped) == plain
    assert (int(plain_length), int(zipped_length)) == (len(plain), len(zipped))
    assert status == 405
    assert value(series(plain.decode()), "fgpu_scheduler_binds_total", result="ok") == 1
    promtool_check(plain.decode())


def raw_answer(port: int, request: bytes) -> bytes:
    """Every byte the server sends for `request` until it closes the connection (urllib would hide a body)."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        received = []
        while data := conn.recv(65536):
            received.append(data)
    return b"".join(received)


@pytest.mark.parametrize("sizes", [[], [0], [5], [3, 4, 1], [CHUNK_BYTES + 1], [CHUNK_BYTES // 3] * 7 + [10, 0, 7]])
def test_an_answer_goes_out_in_pieces_of_chunk_bytes_that_join_and_unzip_to_the_same_bytes(sizes):
    chunks = [bytes([65 + i % 26]) * n for i, n in enumerate(sizes)]
    pieces = list(regroup(chunks))
    assert b"".join(pieces) == b"".join(chunks)
    assert all(len(p) >= CHUNK_BYTES for p in pieces[:-1])  # only the last one may be short
    assert gzip.decompress(b"".join(gzipped(chunks))) == b"".join(chunks)
