"""Dynamic MIG against the real apiserver, with KWOK nodes whose GPUNode carries a `migDynamic` GPU: the
operator writes the desired layout in GPUNode status.migChanges and holds the pod Pending (reason
MigReconfiguring); the node's side (here `NodeAgent`, doing what the device plugin does: Applying, the
reconfiguration time, the new instances and Done in the spec) applies it; the pod is bound to the new
instance. Also: a busy instance in the way (named in the reason, then another GPU), and the operator
SIGKILLed mid-change (the next one finishes it; `fgpu inspect check` clean). Prints create->bound times."""
from __future__ import annotations

import json
import signal
import subprocess
import threading
import time

import pytest
from operator_proc import FGPU, install_crds, start_operator, stop
from polling import wait_for

from fgpu_contracts import keys
from fgpu_contracts.inventory import GpuInfo, Inventory, MigDevice, gpunode
from fgpu_contracts.request import ContainerRequest, GpuRequest, dump_request
from simgpu import mig
from simgpu.catalog import get_gpu

pytestmark = pytest.mark.e2e
GROUP, VERSION, PLURAL = keys.CRD_GROUP, keys.CRD_VERSION, keys.GPUNODE_PLURAL
MODEL = "A100-SXM4-80GB"
RECONFIGURE_S = 2.0  # the node config default (simgpu.nodeconfig.schema.DEFAULT_MIG_RECONFIGURE_S)
ALL_1G = [("1g.10gb", s) for s in range(7)]


def spec_doc(node: str, layouts: list[list[tuple[str, int]]], reports: dict[int, dict] | None = None) -> dict:
    gpu = get_gpu(MODEL)
    gpus = []
    for k, layout in enumerate(layouts):
        inst = tuple(MigDevice(uuid=f"MIG-{node}-{k}-{p}-{s}", profile=p, start=s,
                               mem_bytes=mig.get_profile(gpu, p).mem_bytes, sms=mig.get_profile(gpu, p).sms)
                     for p, s in layout)
        gpus.append(GpuInfo(index=k, uuid=f"GPU-{node}-{k}", model=gpu.name, short_name=gpu.short_name,
                            mem_bytes=gpu.mem_bytes, sms=gpu.sms, sharing="exclusive", replicas=1, mig=inst,
                            mig_dynamic=True, mig_change=(reports or {}).get(k)))
    resources: dict[str, int] = {}
    for layout in layouts:
        for p, _ in layout:
            resources[f"nvidia.com/mig-{p}"] = resources.get(f"nvidia.com/mig-{p}", 0) + 1
    inv = Inventory(node=node, mig_strategy="mixed", memory_quota="hard", time_dilation=1.0, resources=resources,
                    node_resources={}, gpus=tuple(gpus))
    return gpunode(inv).model_dump(mode="json", by_alias=True, exclude_none=True)


class NodeAgent:
    """The node's side of the hand-shake for KWOK nodes: for every change in status.migChanges it has not
    answered, report Applying, wait the reconfiguration time (and while `hold` is set), then publish the new
    layout and Done, as deviceplugin/migsync.py does with the node daemon."""

    def __init__(self, k8s, layouts: dict[str, list[list[tuple[str, int]]]]):
        self.k8s, self.layouts = k8s, layouts
        self.reports: dict[tuple[str, int], dict] = {}
        self.hold = threading.Event()
        self.applying = threading.Event()
        self.applied: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def create(self) -> None:
        from kubernetes import client

        with self.k8s.api() as api:
            custom = client.CustomObjectsApi(api)
            for node, layouts in self.layouts.items():
                custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, spec_doc(node, layouts))

    def __enter__(self):
        self.create()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)
        from kubernetes import client

        with self.k8s.api() as api:
            custom = client.CustomObjectsApi(api)
            for node in self.layouts:
                custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, node)

    def _publish(self, custom, node: str) -> None:
        reports = {k: r for (n, k), r in self.reports.items() if n == node}
        custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, node,
                                           {"spec": spec_doc(node, self.layouts[node], reports)["spec"]})

    def _run(self) -> None:
        from kubernetes import client

        with self.k8s.api() as api:
            custom = client.CustomObjectsApi(api)
            while not self._stop.wait(0.1):
                for node in self.layouts:
                    status = custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, node).get("status") or {}
                    for change in status.get("migChanges") or ():
                        k = int(change["gpu"].rsplit("-", 1)[1])
                        if change["phase"] in ("Pending", "Applying") and \
                                self.reports.get((node, k), {}).get("id") != change["id"]:
                            self._apply(custom, node, k, change)

    def _apply(self, custom, node: str, k: int, change: dict) -> None:
        self.reports[(node, k)] = {"id": change["id"], "phase": "Applying"}
        self._publish(custom, node)
        self.applying.set()
        time.sleep(RECONFIGURE_S)
        while self.hold.is_set() and not self._stop.is_set():
            time.sleep(0.1)
        self.layouts[node][k] = sorted(((p["profile"], p["start"]) for p in change["layout"]), key=lambda x: x[1])
        self.reports[(node, k)] = {"id": change["id"], "phase": "Done"}
        self._publish(custom, node)
        self.applied.append(change["id"])


def mig_pod(name: str, profile: str) -> dict:
    req = GpuRequest(containers=[ContainerRequest(container="main", mig_profile=profile)])
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {keys.REQUEST: dump_request(req)}},
            "spec": {"schedulerName": keys.SCHEDULER_NAME, "containers": [{
                "name": "main", "image": "busybox",
                "resources": {"limits": {f"nvidia.com/mig-{profile}": "1"}, "requests": {"cpu": "100m"}}}]}}


def device_of(pod) -> str:
    return json.loads(pod.metadata.annotations[keys.ASSIGNMENT])["containers"][0]["devices"][0]["uuid"]


def scheduled_condition(pod) -> tuple[str, str]:
    cond = next((c for c in pod.status.conditions or () if c.type == "PodScheduled"), None)
    return (cond.reason or "", cond.message or "") if cond is not None and cond.status == "False" else ("", "")


def bound(core, namespace: str, name: str, timeout: float = 30.0):
    return wait_for(lambda: (p := core.read_namespaced_pod(name, namespace)).spec.node_name and p, timeout,
                    f"pod {name} bound", show=lambda: scheduled_condition(core.read_namespaced_pod(name, namespace)))


def create_to_bound(pod) -> float:
    """Seconds from the pod's creation (whole seconds) to the operator's Binding (its PodScheduled=True)."""
    cond = next(c for c in pod.status.conditions if c.type == "PodScheduled" and c.status == "True")
    return (cond.last_transition_time - pod.metadata.creation_timestamp).total_seconds()


def check(k8s) -> None:
    run = subprocess.run([FGPU, "inspect", "check", "--kubeconfig", str(k8s.kubeconfig)], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.fixture
def mig_nodes(k8s, make_kwok_node):
    install_crds(k8s)

    def make(*names: str) -> None:
        for name in names:
            make_kwok_node(name, {"nvidia.com/mig-1g.10gb": 7})
    return make


def test_a_3g_pod_on_an_all_1g_idle_gpu_gets_it_after_a_relayout(k8s, mig_nodes, namespace, tmp_path):
    from kubernetes import client

    mig_nodes("dm-a")
    with NodeAgent(k8s, {"dm-a": [list(ALL_1G)]}) as agent:
        proc = start_operator(k8s, tmp_path)
        try:
            with k8s.api() as api:
                core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
                core.create_namespaced_pod(namespace, mig_pod("big", "3g.40gb"))
                reason, message = wait_for(lambda: (got := scheduled_condition(
                    core.read_namespaced_pod("big", namespace)))[0] and got, 20, "the waiting reason")
                assert reason == "MigReconfiguring" and "creates 3g.40gb@4" in message, message
                assert "destroys idle 1g.10gb@4, 1g.10gb@5, 1g.10gb@6" in message, message
                (change,) = wait_for(lambda: custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, "dm-a").get(
                    "status", {}).get("migChanges"), 10, "the desired layout on the GPUNode")
                assert change["pods"] == [f"{namespace}/big"] and change["phase"] in ("Pending", "Applying")
                pod = bound(core, namespace, "big")
                assert device_of(pod) == "MIG-dm-a-0-3g.40gb-4" and agent.applied == [change["id"]]
                print(f"\ncreate->bound with a re-layout (reconfiguration {RECONFIGURE_S:.1f} s emulated): "
                      f"{create_to_bound(pod):.1f} s")
                wait_for(lambda: custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, "dm-a")["status"][
                    "migChanges"][0]["phase"] == "Done", 10, "the change Done on the GPUNode")
                check(k8s)
        finally:
            stop(proc)


def test_a_busy_instance_in_the_way_is_named_then_another_gpu_is_re_laid(k8s, mig_nodes, namespace, tmp_path):
    from kubernetes import client

    mig_nodes("dm-b")
    # 4g.40gb can only start at slice 0; a pod holds the 1g at 3
    with NodeAgent(k8s, {"dm-b": [[("1g.10gb", 3), ("3g.40gb", 4)]]}) as agent:
        proc = start_operator(k8s, tmp_path)
        try:
            with k8s.api() as api:
                core = client.CoreV1Api(api)
                core.create_namespaced_pod(namespace, mig_pod("one", "1g.10gb"))
                assert device_of(bound(core, namespace, "one")) == "MIG-dm-b-0-1g.10gb-3"
                core.create_namespaced_pod(namespace, mig_pod("four", "4g.40gb"))
                _, message = wait_for(lambda: (got := scheduled_condition(
                    core.read_namespaced_pod("four", namespace)))[1] and got, 20, "the unschedulable reason")
                assert "GPU-dm-b-0: busy instance 1g.10gb@3 blocks 4g.40gb" in message, message
                mig_nodes("dm-c")  # another node, its GPU idle
                agent.layouts["dm-c"] = [list(ALL_1G)]
                with k8s.api() as api2:
                    client.CustomObjectsApi(api2).create_cluster_custom_object(
                        GROUP, VERSION, PLURAL, spec_doc("dm-c", agent.layouts["dm-c"]))
                pod = bound(core, namespace, "four")
                assert device_of(pod) == "MIG-dm-c-0-4g.40gb-0" and pod.spec.node_name == "dm-c"
                check(k8s)
        finally:
            stop(proc)


def test_an_operator_killed_mid_change_leaves_it_for_the_next_one_to_finish(k8s, mig_nodes, namespace, tmp_path):
    from kubernetes import client

    mig_nodes("dm-d")
    with NodeAgent(k8s, {"dm-d": [list(ALL_1G)]}) as agent:
        agent.hold.set()  # the node keeps applying until released
        first = start_operator(k8s, tmp_path, log_name="first.log")
        with k8s.api() as api:
            core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
            core.create_namespaced_pod(namespace, mig_pod("big", "3g.40gb"))
            assert agent.applying.wait(20), "the node never took the change up"
            first.send_signal(signal.SIGKILL)
            first.wait(10)
            (change,) = custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, "dm-d")["status"]["migChanges"]
            assert change["phase"] in ("Pending", "Applying")
            second = start_operator(k8s, tmp_path, log_name="second.log")
            try:
                # the new leader adopts it: no second change, and no one takes the GPU's instances meanwhile
                core.create_namespaced_pod(namespace, mig_pod("other", "3g.40gb"))
                time.sleep(1.5)
                assert not core.read_namespaced_pod("other", namespace).spec.node_name
                agent.hold.clear()
                pod = bound(core, namespace, "big")
                assert device_of(pod) == "MIG-dm-d-0-3g.40gb-4" and agent.applied == [change["id"]]
                check(k8s)
                log = (tmp_path / "second.log").read_text()
                assert f"MIG change {change['id']} of GPU GPU-dm-d-0 on dm-d adopted" in log, log[-2000:]
            finally:
                stop(second)


def test_create_to_bound_with_a_relayout_and_without(k8s, mig_nodes, namespace, tmp_path):
    """The measurement of docs/dynamic-mig.md: seconds from the create call to the bound pod seen by the
    client (polled every 50 ms), for 3g.40gb pods each needing a re-layout of an idle all-1g GPU (2.0 s of
    emulated reconfiguration), and for 1g.10gb pods that fit an existing instance."""
    from kubernetes import client

    gpus = 3
    mig_nodes("dm-m")
    with NodeAgent(k8s, {"dm-m": [list(ALL_1G) for _ in range(gpus)]}):
        proc = start_operator(k8s, tmp_path)
        try:
            with k8s.api() as api:
                core = client.CoreV1Api(api)
                times: dict[str, list[float]] = {"3g.40gb": [], "1g.10gb": []}
                for k in range(gpus):
                    for profile in ("3g.40gb", "1g.10gb"):
                        name = f"m-{profile.replace('.', '-')}-{k}"
                        t0 = time.monotonic()
                        core.create_namespaced_pod(namespace, mig_pod(name, profile))
                        wait_for(lambda n=name: core.read_namespaced_pod(n, namespace).spec.node_name, 30,
                                 f"{name} bound", interval=0.05)
                        times[profile].append(time.monotonic() - t0)
                relaid = sorted(times["3g.40gb"])
                assert relaid[0] >= RECONFIGURE_S  # each waited for its node's change
                assert max(times["1g.10gb"]) < relaid[0]
                print("\n| pod | re-layout | pods | min s | median s | max s |\n|---|---|---|---|---|---|")
                for profile, label in (("3g.40gb", f"yes ({RECONFIGURE_S:.1f} s emulated)"), ("1g.10gb", "no")):
                    t = sorted(times[profile])
                    print(f"| {profile} | {label} | {len(t)} | {t[0]:.2f} | {t[len(t) // 2]:.2f} | {t[-1]:.2f} |")
                check(k8s)
        finally:
            stop(proc)
