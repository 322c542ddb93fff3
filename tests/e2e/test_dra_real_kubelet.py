"""fgpu-dra on a REAL kubelet: `helm install` of charts/fgpu with `dra.enabled` onto `make cluster-up`'s cluster
(devcluster.cluster: control plane with controller-manager and kube-scheduler, kube-proxy, one real node with
containerd 2.x and a kubelet 1.37), the driver as the chart's DaemonSet pod beside the node daemon.

- fgpu-dra registers with the kubelet (GetInfo, v1.DRAPlugin) and publishes the node's ResourceSlices;
- a pod with a ResourceClaimTemplate for 8Gi and 30% SM: the controller-manager makes the claim,
  kube-scheduler's DRA plugin allocates it, the kubelet calls NodePrepareResources, containerd injects the
  CDI spec, and the workload in the container runs against the daemon pod with 8Gi and 30% enforced (its SMs
  and throughput; a pod allocating past its 8Gi is refused by the daemon);
- a second such share on the same GPU; a third that does not fit stays Pending with kube-scheduler's reason;
- a MIG-profile claim and a whole-GPU claim run their workloads;
- the classic spellings through the chart's webhook: HAMi's `nvidia.com/gpu: 1` + `gpumem: 8192` + `gpucores: 30`
  and fgpu's `gpu-fraction: 0.3` + `gpu-memory: 8Gi` become claims of gpu-share.fgpu.io, enforced like the claim
  above; `nvidia.com/gpu: 1` alone gets KEP-5004's claim (gpu-extended.fgpu.io) from kube-scheduler, and
  `nvidia.com/mig-1g.10gb: 1` a claim of mig-1g.10gb.fgpu.io; all run on the real kubelet;
- a kubelet restart and a driver restart lose nothing (containers keep running, claims stay prepared), and
  after both, deleting a pod unprepares (CDI spec and checkpoint entry gone, the daemon's context closed):
  the Pending third share then runs in the room it left;
- claims whose status was written by hand (over-committing the GPU, or consuming more than they request)
  get nothing: NodePrepareResources refuses them and their pods never start;
- `helm upgrade --set dra.allocator=fgpu-scheduler`: fgpu allocates a fgpu-scheduler pod's claim, and the
  real kubelet prepares it beside kube-scheduler's; then HAMi's share and `nvidia.com/gpu: 1` go to fgpu-scheduler,
  which allocates the first's claim and makes KEP-5004's claim for the second.

Timings (claim creation to Running, the driver's prepare latency) are printed at the end; docs/dra.md quotes
them. Needs root, FGPU_NODE, FGPU_IMAGE and FGPU_TESTBIN (`make test` sets all).
"""
from __future__ import annotations

import json
import os
import re
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from cluster_support import chart_cluster
from polling import wait_for
from test_chart_node import _pod, delete, first_report, predicted_it_per_s, reports, visible_sms, workload_pod

from devcluster import install
from devcluster.cluster import NODE_NAME
from devcluster.node import KUBELET_PLUGIN_DIRS
from deviceplugin.dra.devices import node_devices
from deviceplugin.dra.state import CHECKPOINT_NAME, cdi_spec_path
from fgpu_contracts import dra as names
from fgpu_contracts import keys
from simgpu import env
from simgpu.nodeconfig import parse_node_config
from simgpu.token import verify_token

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
VALUES = [REPO / "deploy" / "values" / "devcluster.yaml", REPO / "deploy" / "values" / "devcluster-dra.yaml"]
NS = "default"
CDI_DIR = "/var/run/cdi"  # the chart's dra.cdiHostPath, one of containerd's cdi_spec_dirs (hack/node-setup.sh)
STATE_DIR = Path("/var/lib/fgpu")  # the chart's node.stateHostPath: fgpu-dra's checkpoint
GROUP, VERSION = "resource.k8s.io", "v1"
GIB = 1 << 30
TIMINGS: dict[str, float] = {}
PREPARED = re.compile(r"prepared (\S+)/(\S+) in ([\d.]+) ms")


def pool_config() -> dict:
    (pool,) = yaml.safe_load(VALUES[1].read_text())["nodePools"]
    return pool["config"]


@pytest.fixture(scope="module")
def cluster(testbin, tmp_path_factory):
    yield from chart_cluster(testbin, tmp_path_factory, 0, (Path("/run/fgpu"), STATE_DIR, Path(CDI_DIR)), TIMINGS)


@pytest.fixture(scope="module")
def target(cluster):
    return install.Target(kubeconfig=cluster.kubeconfig, helm=str(cluster.plane.testbin / "helm"))


@pytest.fixture(scope="module")
def api(cluster):
    with cluster.plane.api() as a:
        yield a


@pytest.fixture(scope="module")
def core(api):
    from kubernetes import client

    return client.CoreV1Api(api)


@pytest.fixture(scope="module")
def objs(api):
    from kubernetes import client

    return client.CustomObjectsApi(api)


# ---- helpers -------------------------------------------------------------------------------------------------
def template(name: str, cls: str, capacity: dict | None = None) -> dict:
    exactly = {"deviceClassName": cls, **({"capacity": {"requests": capacity}} if capacity else {})}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}}


TEMPLATES = {
    "share-30": template("share-30", names.CLASS_SHARE, {names.CAP_MEMORY: "8Gi", names.CAP_SM_SHARE: "30"}),
    "share-10": template("share-10", names.CLASS_SHARE, {names.CAP_MEMORY: "8Gi", names.CAP_SM_SHARE: "10"}),
    "share-50": template("share-50", names.CLASS_SHARE, {names.CAP_MEMORY: "8Gi", names.CAP_SM_SHARE: "50"}),
    "mig-1g": template("mig-1g", names.mig_class("1g.10gb")),
    "whole": template("whole", names.CLASS_GPU),
}
WORKLOAD = ["simgpu", "run", "--workload", "resnet", "--duration", "900", "--report-every", "1", "--json"]


def claim_pod(name: str, claim: dict, command: list[str] | None = None, scheduler: str | None = None,
              node: str | None = None) -> dict:
    """A user's pod with one ResourceClaim (`claim`: resourceClaimTemplateName or resourceClaimName)."""
    spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
            "resourceClaims": [{"name": "gpu", **claim}],
            "containers": [{"name": "main", "image": "fgpu:dev", "imagePullPolicy": "Never",
                            "command": command or WORKLOAD,
                            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "claims": [{"name": "gpu"}]}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def running(core, name: str, timeout: float = 120) -> dict:
    def state():
        pod = _pod(core, name)
        return pod["spec"].get("nodeName"), pod["status"].get("phase"), pod["status"].get("conditions"), [
            s.get("state") for s in pod["status"].get("containerStatuses") or []], events(core, name)

    return wait_for(lambda: (p := _pod(core, name))["status"].get("phase") == "Running" and p, timeout,
                    f"pod {name} Running", interval=0.3, show=state)


def events(core, name: str) -> list[str]:
    return [f"{e.reason}: {e.message}" for e in core.list_namespaced_event(
        NS, field_selector=f"involvedObject.name={name},involvedObject.kind=Pod").items]


def claim_of(core, objs, pod_name: str) -> dict:
    def named():
        statuses = _pod(core, pod_name)["status"].get("resourceClaimStatuses") or []
        return statuses and statuses[0].get("resourceClaimName")

    name = wait_for(named, 30, f"{pod_name}'s claim made from its template")
    return objs.get_namespaced_custom_object(GROUP, VERSION, NS, "resourceclaims", name)


def results(claim: dict) -> list[dict]:
    return claim["status"]["allocation"]["devices"]["results"]


def checkpoint() -> dict:
    path = STATE_DIR / CHECKPOINT_NAME
    return json.loads(path.read_text())["claims"] if path.exists() else {}


def driver_pod(core, target) -> dict:
    (pod,) = [p for p in install.release_pods(core, target)
              if any(c["name"] == install.DRA_CONTAINER for c in p["spec"]["containers"])
              and p["metadata"].get("deletionTimestamp") is None]
    return pod


def driver_log(core, target) -> str:
    """fgpu-dra's log ("" while the kubelet, which serves it, is down)."""
    from kubernetes.client.rest import ApiException

    pod = driver_pod(core, target)
    try:
        return core.read_namespaced_pod_log(pod["metadata"]["name"], target.namespace,
                                            container=install.DRA_CONTAINER)
    except ApiException:
        return ""


def prepare_ms(core, target, claim: str) -> float:
    found = [float(m.group(3)) for m in PREPARED.finditer(driver_log(core, target)) if m.group(2) == claim]
    assert found, f"no 'prepared {NS}/{claim}' line in fgpu-dra's log"
    return found[0]


def daemon_metrics(core, target) -> str:
    (pod,) = [p for p in install.release_pods(core, target)
              if p["metadata"]["labels"].get("app.kubernetes.io/component") == "node"
              and p["metadata"].get("deletionTimestamp") is None]
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:9400/metrics", timeout=10) as resp:
        return resp.read().decode()


def create_and_time(core, name: str, body: dict, key: str) -> dict:
    t0 = time.monotonic()
    core.create_namespaced_pod(NS, body)
    pod = running(core, name)
    TIMINGS[key] = round(time.monotonic() - t0, 2)
    return pod


# ---- 1. the chart's driver on the real kubelet ----------------------------------------------------------------
def test_helm_install_with_dra_registers_the_driver_with_the_real_kubelet(cluster, target, core, objs):
    t = time.monotonic()
    install.install(target, VALUES, [], "fgpu:dev")
    found = install.check(target, say=print)
    TIMINGS["install_to_ready_s"] = round(time.monotonic() - t, 1)
    devices = node_devices(parse_node_config(pool_config()), NODE_NAME)
    assert found["dra"] == {NODE_NAME: len(devices.devices)}
    assert found["resources"] == {}  # no device plugin on a DRA pool: the node advertises no nvidia.com/gpu
    # the kubelet found the registration socket in its plugins_registry (bound to the standard path)
    assert (KUBELET_PLUGIN_DIRS["plugins_registry"] / f"{names.DRIVER}-reg.sock").is_socket()
    slices = objs.list_cluster_custom_object(GROUP, VERSION, "resourceslices",
                                             field_selector=f"spec.nodeName={NODE_NAME}")["items"]
    published = {d["name"] for s in slices for d in s["spec"].get("devices") or []}
    assert published == {d.name for d in devices.devices}
    for body in TEMPLATES.values():
        objs.create_namespaced_custom_object(GROUP, VERSION, NS, "resourceclaimtemplates", body)


def grant_of(uid: str):
    """The grant in the CDI spec containerd injected for claim `uid`: a token signed with the node's secret."""
    with open(cdi_spec_path(CDI_DIR, uid)) as fh:
        (device,) = json.load(fh)["devices"]
    edits = dict(e.split("=", 1) for e in device["containerEdits"]["env"])
    return verify_token((STATE_DIR / "token-secret").read_bytes(), edits[env.CONTEXT_TOKEN])


def assert_share_enforced(core, objs, name: str, claim: dict | None = None) -> float:
    """`name`'s claim holds 8Gi and 30% of gpu-0-shared, is prepared (CDI spec, checkpoint, the token's grant),
    and the daemon enforces it on the workload: an 8 GiB quota, kernels time-sliced to 30% of the A100
    (HAMi-core's SM limit). Returns its throughput as a fraction of 30% of the model's prediction."""
    claim = claim or claim_of(core, objs, name)
    (result,) = results(claim)
    assert result["device"] == "gpu-0-shared" and result["pool"] == NODE_NAME and result["shareID"]
    assert result["consumedCapacity"] == {names.CAP_MEMORY: "8Gi", names.CAP_SM_SHARE: "30"}
    uid = claim["metadata"]["uid"]
    assert os.path.exists(cdi_spec_path(CDI_DIR, uid)) and uid in checkpoint()
    grant = grant_of(uid)
    assert (grant.mem_limit_bytes, grant.sm_limit_pct, grant.pod_name) == (8 * GIB, 30, name), grant
    log, _ = first_report(core, name)
    assert "A100-SXM4-80GB" in log and "quota 8192 MiB" in log, log
    solo = predicted_it_per_s("A100-80GB", visible_sms(log))
    report = wait_for(lambda: next((r for r in reports(core, name) if r["virtual_s"] >= 10), None), 60,
                      f"{name}'s report after 10 emulated seconds")
    assert 0 < report["it_per_s"] < 0.5 * solo, (report, solo)  # the SM cap holds
    return round(report["it_per_s"] / (0.3 * solo), 3)


def extended_claim(core, objs, name: str) -> dict:
    """The claim KEP-5004 made for `name`'s `nvidia.com/gpu`, as its status.extendedResourceClaimStatus names it."""
    status = wait_for(lambda: _pod(core, name)["status"].get("extendedResourceClaimStatus"), 30,
                      f"{name}'s extendedResourceClaimStatus")
    assert status["requestMappings"] == [{"containerName": "main", "resourceName": keys.GPU_RESOURCE,
                                          "requestName": status["requestMappings"][0]["requestName"]}], status
    claim = objs.get_namespaced_custom_object(GROUP, VERSION, NS, "resourceclaims", status["resourceClaimName"])
    assert claim["metadata"]["name"].startswith(f"{name}-extended-resources-"), claim["metadata"]
    (req,) = claim["spec"]["devices"]["requests"]
    assert req["exactly"]["deviceClassName"] == names.CLASS_EXTENDED, req
    return claim


WHOLE_MODELS = {"gpu-0": "A100", "gpu-1": "L4"}  # the node's GPUs handed out whole (devcluster-dra.yaml)


def assert_whole_gpu_runs(core, objs, name: str) -> str:
    """`name` (`nvidia.com/gpu: 1`, no claim of its own) runs on a whole GPU through KEP-5004's claim."""
    claim = extended_claim(core, objs, name)
    (result,) = results(claim)
    assert result["device"] in WHOLE_MODELS and result["pool"] == NODE_NAME, result
    assert claim["metadata"]["uid"] in checkpoint()
    log, report = first_report(core, name)
    assert WHOLE_MODELS[result["device"]] in log and report["iterations"] > 0, log
    return result["device"]


HAMI_8G_30 = {keys.GPU_RESOURCE: "1", "nvidia.com/gpumem": "8192", "nvidia.com/gpucores": "30"}
FGPU_8G_30 = {keys.FGPU_FRACTION: "0.3", keys.FGPU_MEMORY: "8Gi"}  # README "Request a GPU share"


def classic_pod(name: str, annotations: dict | None = None, limits: dict | None = None,
                scheduler: str | None = None) -> dict:
    body = workload_pod(name, annotations, limits, scheduler=scheduler)
    body["spec"]["containers"][0]["command"] = WORKLOAD
    return body


def create_all_and_time(core, bodies: dict[str, dict]) -> None:
    """Create every pod at once; TIMINGS[<name>_to_running_s] from its creation to Running."""
    t0 = time.monotonic()
    for body in bodies.values():
        core.create_namespaced_pod(NS, body)
    for name in bodies:
        running(core, name)
        TIMINGS[f"{name}_to_running_s"] = round(time.monotonic() - t0, 2)


def all_unprepared() -> bool:
    return checkpoint() == {} and not [f for f in os.listdir(CDI_DIR) if f.startswith("fgpu.io-gpu_")]


# ---- 1b. the classic spellings through the chart's webhook (kube-scheduler allocates) -----------------------------
def test_classic_spellings_run_on_the_real_kubelet_through_claims(core, objs):
    """HAMi's gpumem/gpucores and fgpu's annotations for 8Gi and 30%: the webhook writes them as a claim of
    gpu-share.fgpu.io, kube-scheduler allocates it, the kubelet has fgpu-dra prepare it, the daemon enforces it.
    `nvidia.com/gpu: 1` alone keeps its count: kube-scheduler makes KEP-5004's claim of gpu-extended.fgpu.io, and
    the kubelet admits the pod on a node whose allocatable has no nvidia.com/gpu. `nvidia.com/mig-1g.10gb: 1`
    becomes a claim of mig-1g.10gb.fgpu.io."""
    create_all_and_time(core, {"hami": classic_pod("hami", limits=HAMI_8G_30),
                               "fgpu-ann": classic_pod("fgpu-ann", annotations=FGPU_8G_30)})
    for name in ("hami", "fgpu-ann"):
        pod = _pod(core, name)
        assert pod["spec"]["schedulerName"] == keys.DEFAULT_SCHEDULER and keys.REQUEST not in (
            pod["metadata"].get("annotations") or {})
        (entry,) = pod["spec"]["resourceClaims"]
        assert entry["resourceClaimTemplateName"].startswith("fgpu-share-"), entry
        assert keys.GPU_RESOURCE not in pod["spec"]["containers"][0]["resources"].get("limits", {})
        TIMINGS[f"{name}_of_predicted_share"] = assert_share_enforced(core, objs, name)
    # the shares hold the A100, so the whole GPU can only be the L4, and the MIG instance one of the H100's
    create_all_and_time(core, {"whole-classic": classic_pod("whole-classic", limits={keys.GPU_RESOURCE: "1"}),
                               "mig-classic": classic_pod("mig-classic", limits={keys.mig_resource_name("1g.10gb"): "1"})})
    assert _pod(core, "whole-classic")["spec"]["schedulerName"] == keys.DEFAULT_SCHEDULER
    assert assert_whole_gpu_runs(core, objs, "whole-classic") == "gpu-1"
    claim = claim_of(core, objs, "mig-classic")
    (result,) = results(claim)
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == names.mig_class("1g.10gb")
    assert result["device"].startswith("gpu-2-mig-1g-10gb-"), result
    log, report = first_report(core, "mig-classic")
    assert "H100" in log and "mig" in log.lower() and report["iterations"] > 0, log
    delete(core, "hami", "fgpu-ann", "whole-classic", "mig-classic")
    wait_for(all_unprepared, 60, "the classic pods' claims unprepared")


# ---- 2. 8Gi and 30% as a ResourceClaim ---------------------------------------------------------------------------
def test_a_share_claim_is_allocated_prepared_and_enforced(core, objs, target):
    create_and_time(core, "share-a", claim_pod("share-a", {"resourceClaimTemplateName": "share-30"}),
                    "share_claim_to_running_s")
    claim = claim_of(core, objs, "share-a")
    TIMINGS["prepare_ms"] = prepare_ms(core, target, claim["metadata"]["name"])
    TIMINGS["share_a_of_predicted_share"] = assert_share_enforced(core, objs, "share-a", claim)


def test_allocating_past_the_claims_memory_is_refused(core):
    core.create_namespaced_pod(NS, claim_pod("greedy", {"resourceClaimTemplateName": "share-10"}, command=[
        "simgpu", "run", "--workload", "memory", "--mem", "9Gi", "--iterations", "1"]))
    pod = wait_for(lambda: (p := _pod(core, "greedy"))["status"].get("phase") in ("Failed", "Succeeded") and p,
                   120, "greedy to finish", interval=0.5)
    log = core.read_namespaced_pod_log("greedy", NS, container="main")
    assert pod["status"]["phase"] == "Failed", log
    assert "quota" in log.lower() and "8192" in log.replace(",", "") and "Traceback" not in log, log
    delete(core, "greedy")


# ---- 3. two shares on one GPU, a third left Pending ----------------------------------------------------------------
def test_a_second_share_joins_the_gpu_and_a_third_stays_pending(core, objs):
    create_and_time(core, "share-b", claim_pod("share-b", {"resourceClaimTemplateName": "share-30"}),
                    "second_share_to_running_s")
    a, b = (results(claim_of(core, objs, n))[0] for n in ("share-a", "share-b"))
    assert a["device"] == b["device"] == "gpu-0-shared" and a["shareID"] != b["shareID"]
    _, report = first_report(core, "share-b")
    assert report["iterations"] > 0
    core.create_namespaced_pod(NS, claim_pod("share-c", {"resourceClaimTemplateName": "share-50"}))

    def unschedulable():
        conds = {c["type"]: c for c in _pod(core, "share-c")["status"].get("conditions") or []}
        cond = conds.get("PodScheduled", {})
        return cond.get("reason") == "Unschedulable" and cond

    cond = wait_for(unschedulable, 60, "share-c reported Unschedulable by kube-scheduler")
    # kube-scheduler's DynamicResources plugin, in its own words: 30% + 30% + 50% is past the GPU's 100%
    assert cond["message"] == "0/1 nodes are available: 1 cannot allocate all claims. " \
                              "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.", cond
    assert _pod(core, "share-c")["status"]["phase"] == "Pending"


# ---- 4. a MIG instance and a whole GPU ------------------------------------------------------------------------------
def test_a_mig_claim_and_a_whole_gpu_claim_run_their_workloads(core, objs):
    core.create_namespaced_pod(NS, claim_pod("mig", {"resourceClaimTemplateName": "mig-1g"}))
    core.create_namespaced_pod(NS, claim_pod("whole", {"resourceClaimTemplateName": "whole"}))
    for name in ("mig", "whole"):
        running(core, name)
    (mig,) = results(claim_of(core, objs, "mig"))
    (whole,) = results(claim_of(core, objs, "whole"))
    assert mig["device"].startswith("gpu-2-mig-1g-10gb-") and whole["device"] == "gpu-1", (mig, whole)
    mig_log, mig_report = first_report(core, "mig")
    whole_log, whole_report = first_report(core, "whole")
    assert "H100" in mig_log and "mig" in mig_log.lower() and mig_report["iterations"] > 0, mig_log
    assert "L4" in whole_log and whole_report["iterations"] > 0, whole_log


# ---- 5. restarts lose nothing; deleting a pod unprepares -----------------------------------------------------------
def _containers(core, *pods: str) -> dict[str, tuple[str, int]]:
    return {n: (s["containerID"], s["restartCount"]) for n in pods
            for s in _pod(core, n)["status"]["containerStatuses"]}


def test_kubelet_and_driver_restarts_lose_nothing_and_a_deleted_pod_is_unprepared(cluster, core, objs, target):
    pods = ("share-a", "share-b", "mig", "whole")
    before, prepared = _containers(core, *pods), checkpoint()
    specs = sorted(os.listdir(CDI_DIR))
    log = driver_log(core, target)
    registrations = log.count(install.REGISTERED)
    t = time.monotonic()
    cluster.node.restart_kubelet()
    cluster.node.wait_ready()
    # the new kubelet finds the driver's socket in plugins_registry again and registers it
    wait_for(lambda: driver_log(core, target).count(install.REGISTERED) > registrations, 60,
             "the restarted kubelet to register fgpu-dra again")
    TIMINGS["kubelet_restart_to_registered_s"] = round(time.monotonic() - t, 1)
    n = len(reports(core, "share-a"))
    wait_for(lambda: len(reports(core, "share-a")) > n, 30, "share-a to keep reporting")
    assert _containers(core, *pods) == before and checkpoint() == prepared

    # the driver restarted in place (its container killed; the kubelet starts it again)
    pod = driver_pod(core, target)
    (status,) = [s for s in pod["status"]["containerStatuses"] if s["name"] == install.DRA_CONTAINER]
    cluster.node.ctr("tasks", "kill", "-s", "SIGKILL", status["containerID"].split("://")[1])

    def restarted():
        p = driver_pod(core, target)
        (s,) = [s for s in p["status"]["containerStatuses"] if s["name"] == install.DRA_CONTAINER]
        return s["restartCount"] > status["restartCount"] and s.get("ready") and install.REGISTERED in \
            driver_log(core, target)

    wait_for(restarted, 90, "fgpu-dra restarted and registered again")
    assert _containers(core, *pods) == before and checkpoint() == prepared
    assert sorted(os.listdir(CDI_DIR)) == specs

    # after both restarts, deleting share-b unprepares it: the restarted driver removes its CDI spec and
    # checkpoint entry, the daemon's context for it closes, and the Pending share-c fits in the room it left
    b = claim_of(core, objs, "share-b")["metadata"]["uid"]
    assert 'pod="share-b"' in daemon_metrics(core, target)  # its context, open on the daemon
    delete(core, "share-b")
    wait_for(lambda: b not in checkpoint() and not os.path.exists(cdi_spec_path(CDI_DIR, b)), 30,
             "share-b's claim unprepared")
    wait_for(lambda: 'pod="share-b"' not in daemon_metrics(core, target), 30, "the daemon's context for share-b closed")
    running(core, "share-c", timeout=90)
    (c,) = results(claim_of(core, objs, "share-c"))
    assert c["device"] == "gpu-0-shared"
    _, report = first_report(core, "share-c")
    assert report["iterations"] > 0


# ---- 6. claims written by hand get nothing -------------------------------------------------------------------------
def _forge(core, objs, name: str, asked: dict, consumed: dict, share_id: str) -> str:
    """A claim and a pod bound to the node by hand, the claim's status.allocation and reservedFor written by
    hand (no scheduler): what an edited status or a second allocator looks like to the kubelet."""
    claim = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaim", "metadata": {"name": name},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": names.CLASS_SHARE, "capacity": {"requests": asked}}}]}}}
    objs.create_namespaced_custom_object(GROUP, VERSION, NS, "resourceclaims", claim)
    pod = core.create_namespaced_pod(NS, claim_pod(name, {"resourceClaimName": name}, node=NODE_NAME))
    stored = objs.get_namespaced_custom_object(GROUP, VERSION, NS, "resourceclaims", name)
    stored["status"] = {
        "allocation": {"devices": {"results": [{
            "request": "gpu", "driver": names.DRIVER, "pool": NODE_NAME, "device": "gpu-0-shared",
            "shareID": share_id, "consumedCapacity": consumed}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [NODE_NAME]}]}]}},
        "reservedFor": [{"resource": "pods", "name": name, "uid": pod.metadata.uid}]}
    objs.replace_namespaced_custom_object_status(GROUP, VERSION, NS, "resourceclaims", name, stored)
    return stored["metadata"]["uid"]


@pytest.mark.parametrize(("name", "asked", "consumed", "refusal"), [
    # share-a 30% + share-c 50% hold the GPU; a consistent 30% more over-commits it
    ("forged-over", {names.CAP_MEMORY: "8Gi", names.CAP_SM_SHARE: "30"},
     {names.CAP_MEMORY: "8Gi", names.CAP_SM_SHARE: "30"}, "over-commits this node: device gpu-0-shared"),
    # 15% would fit, but the claim asks for 10%: its status was edited
    ("forged-big", {names.CAP_MEMORY: "8Gi", names.CAP_SM_SHARE: "10"},
     {names.CAP_MEMORY: "8Gi", names.CAP_SM_SHARE: "15"}, "is more than its request 'gpu' asks (10)"),
    # 10% fits and is what it asks, but its share is share-a's (a status copied from another claim)
    ("forged-copy", {names.CAP_MEMORY: "8Gi", names.CAP_SM_SHARE: "10"},
     {names.CAP_MEMORY: "8Gi", names.CAP_SM_SHARE: "10"}, "is handed out twice"),
])
def test_a_claim_written_by_hand_gets_nothing(core, objs, name, asked, consumed, refusal):
    share_id = results(claim_of(core, objs, "share-a"))[0]["shareID"] if name == "forged-copy" else str(uuid.uuid4())
    uid = _forge(core, objs, name, asked, consumed, share_id)
    found = wait_for(lambda: [e for e in events(core, name) if refusal in e], 60,
                     f"the kubelet's event with fgpu-dra's refusal of {name}", show=lambda: events(core, name))
    assert "FailedPrepareDynamicResources" in found[0], found
    pod = _pod(core, name)
    assert pod["status"].get("phase") == "Pending" and not any(
        "running" in (s.get("state") or {}) for s in pod["status"].get("containerStatuses") or []), pod["status"]
    assert uid not in checkpoint() and not os.path.exists(cdi_spec_path(CDI_DIR, uid))
    delete(core, name)
    objs.delete_namespaced_custom_object(GROUP, VERSION, NS, "resourceclaims", name)


# ---- fgpu's own allocator on the real node ----------------------------------------------------------------------------
def test_fgpu_scheduler_allocates_a_claim_the_real_kubelet_prepares(cluster, target, core, objs):
    from fgpu_operator.inspect.claims import claim_violations

    t = time.monotonic()
    install.install(target, VALUES, ["dra.allocator=fgpu-scheduler"], "fgpu:dev")
    install.check(target, say=print)
    TIMINGS["upgrade_to_fgpu_allocator_s"] = round(time.monotonic() - t, 1)
    create_and_time(core, "fgpu-share", claim_pod("fgpu-share", {"resourceClaimTemplateName": "share-10"},
                                                  scheduler="fgpu-scheduler"), "fgpu_claim_to_running_s")
    claim = claim_of(core, objs, "fgpu-share")
    (result,) = results(claim)
    # beside kube-scheduler's shares (30% + 50%): fgpu's model counted them
    assert result["device"] == "gpu-0-shared" and result["consumedCapacity"][names.CAP_SM_SHARE] == "10"
    log, report = first_report(core, "fgpu-share")
    assert "quota 8192 MiB" in log and report["iterations"] > 0, log
    slices = objs.list_cluster_custom_object(GROUP, VERSION, "resourceslices")["items"]
    claims = objs.list_namespaced_custom_object(GROUP, VERSION, NS, "resourceclaims")["items"]
    pods = json.loads(core.list_namespaced_pod(NS, _preload_content=False).data)["items"]
    # the invariant checker: nothing over-committed or given twice; what it does report is exactly the claims
    # kube-scheduler allocated before the pool became fgpu-scheduler's (they keep running where they are)
    violations = claim_violations(slices, claims, pods)
    owner = re.compile(rf"is fgpu-scheduler's \({names.TAINT_ALLOCATOR}\) but reserved for pod {NS}/(\S+) "
                       r"of default-scheduler$")
    assert all(owner.search(v) for v in violations), violations
    assert {owner.search(v).group(1) for v in violations} == {"share-a", "share-c", "mig", "whole"}, violations
    delete(core, "share-a", "share-c", "mig", "whole", "fgpu-share")
    wait_for(all_unprepared, 60, "every claim unprepared")

    # the classic spellings now go to fgpu-scheduler: HAMi's share becomes a claim fgpu allocates, and for
    # `nvidia.com/gpu: 1` fgpu-scheduler makes KEP-5004's claim itself, as kube-scheduler would
    create_all_and_time(core, {"hami-fgpu": classic_pod("hami-fgpu", limits=HAMI_8G_30)})
    pod = _pod(core, "hami-fgpu")
    assert pod["spec"]["schedulerName"] == keys.SCHEDULER_NAME and keys.REQUEST in pod["metadata"]["annotations"]
    TIMINGS["hami-fgpu_of_predicted_share"] = assert_share_enforced(core, objs, "hami-fgpu")
    create_all_and_time(core, {"whole-fgpu": classic_pod("whole-fgpu", limits={keys.GPU_RESOURCE: "1"})})
    assert _pod(core, "whole-fgpu")["spec"]["schedulerName"] == keys.SCHEDULER_NAME
    assert assert_whole_gpu_runs(core, objs, "whole-fgpu") == "gpu-1"  # the A100 holds hami-fgpu's share
    delete(core, "hami-fgpu", "whole-fgpu")
    wait_for(all_unprepared, 60, "the classic pods' claims unprepared")
    install.uninstall(target)
    wait_for(lambda: not install.release_pods(core, target), 120, "the chart's pods gone")
    print("timings:", json.dumps(TIMINGS))
