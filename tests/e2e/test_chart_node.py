"""fgpu as a user installs it: `helm install` of charts/fgpu onto a fresh cluster of `make cluster-up`'s making
(devcluster.cluster: the control plane, kube-proxy, one real node with containerd 2.x and a kubelet, a KWOK
node), with the image the Dockerfile builds imported into the node. Nothing of fgpu is started by hand: the
operator Deployment (two replicas, one leading), the webhook behind its Service, the device plugin and the
simgpu daemon of the node DaemonSet all run as the chart's pods on the real kubelet.

Then users' pods go through all of it: a 0.3-GPU + 8Gi pod whose container runs the workload client against
the daemon pod and prints its throughput, a second pod sharing its GPU, a pod refused memory past its 8Gi
quota (its neighbour unaffected), a HAMi-spelled pod and a MIG pod; Debian's Prometheus scrapes every chart
pod and `fgpu report` draws from it; `helm upgrade` rolls the operator and the DaemonSet while shares are held
(the invariant checker finds nothing lost or given twice, the running workload reconnects), `helm rollback`,
`helm test`, and `helm uninstall` leaves no webhook configuration, pod or socket behind.

Needs root, FGPU_NODE (hack/node-setup.sh), FGPU_IMAGE (hack/image-nodocker.sh's archive) and FGPU_TESTBIN;
`make test` provides all three.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cluster_support import chart_cluster
from polling import wait_for

from devcluster import install
from devcluster.cluster import NODE_NAME
from devcluster.fgpu import FGPU
from devcluster.kubeplane import free_port
from devcluster.prometheus import pod_scrape_configs, start_prometheus
from fgpu_contracts import keys

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
VALUES = REPO / "deploy" / "values" / "devcluster.yaml"
NS = "default"
SOCKET_HOST_PATH = Path("/run/fgpu/daemon.sock")  # the chart's node.socketHostPath
TIMINGS: dict[str, float] = {}  # printed at the end: the numbers the closing note reports


@pytest.fixture(scope="module")
def cluster(testbin, tmp_path_factory):
    yield from chart_cluster(testbin, tmp_path_factory, 1, (Path("/run/fgpu"), Path("/var/lib/fgpu")), TIMINGS)


@pytest.fixture(scope="module")
def target(cluster):
    return install.Target(kubeconfig=cluster.kubeconfig, helm=str(cluster.plane.testbin / "helm"))


@pytest.fixture(scope="module")
def core(cluster):
    from kubernetes import client

    with cluster.plane.api() as api:
        yield client.CoreV1Api(api)


def _pod(core, name: str) -> dict:
    return json.loads(core.read_namespaced_pod(name, NS, _preload_content=False).data)


def workload_pod(name: str, annotations: dict | None = None, limits: dict | None = None,
                 command: list[str] | None = None, scheduler: str | None = None) -> dict:
    """A user's pod: the fgpu image running the workload client (deploy/examples/pods' form)."""
    spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5, "containers": [{
        "name": "main", "image": "fgpu:dev", "imagePullPolicy": "Never",
        "command": command or ["simgpu", "run", "--workload", "resnet", "--duration", "900", "--report-every", "1",
                               "--json"],
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, **({"limits": limits} if limits else {})}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations or {}},
            "spec": spec}


def create(core, body: dict) -> float:
    t = time.monotonic()
    core.create_namespaced_pod(NS, body)
    return t


def running(core, name: str, timeout: float = 180) -> dict:
    def state():
        pod = _pod(core, name)
        return pod["spec"].get("nodeName"), pod["status"].get("phase"), [
            s.get("state") for s in pod["status"].get("containerStatuses") or []]

    return wait_for(lambda: (p := _pod(core, name))["status"].get("phase") == "Running" and p, timeout,
                    f"pod {name} Running", interval=0.5, show=state)


def reports(core, name: str) -> list[dict]:
    """The workload's JSON progress lines so far (its first line, on stderr, says what it got)."""
    text = core.read_namespaced_pod_log(name, NS, container="main")
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def first_report(core, name: str, timeout: float = 120) -> tuple[str, dict]:
    lines = wait_for(lambda: reports(core, name), timeout, f"{name}'s first throughput line",
                     show=lambda: core.read_namespaced_pod_log(name, NS, container="main")[-800:])
    return core.read_namespaced_pod_log(name, NS, container="main"), lines[0]


def assignment(pod: dict) -> dict:
    return json.loads(pod["metadata"]["annotations"][keys.ASSIGNMENT])


def device_of(pod: dict) -> str:
    (device,) = assignment(pod)["containers"][0]["devices"]
    return device["uuid"]


def delete(core, *names: str) -> None:
    from kubernetes.client.rest import ApiException

    for name in names:
        try:
            core.delete_namespaced_pod(name, NS, grace_period_seconds=1)
        except ApiException as e:
            if e.status != 404:
                raise

    def gone():
        left = []
        for name in names:
            try:
                core.read_namespaced_pod(name, NS)
                left.append(name)
            except ApiException:
                pass
        return not left

    wait_for(gone, 90, f"pods {', '.join(names)} gone")


def predicted_it_per_s(model: str, sms: int, workload: str = "resnet") -> float:
    """What simgpu's performance model says one iteration of the workload takes alone on `sms` of the GPU's
    SMs (`simgpu predict`'s model: each op's GPU time, summed)."""
    from simgpu.catalog import get_gpu
    from simgpu.perf.cost import kernel_seconds
    from simgpu.workloads import get_workload

    gpu = get_gpu(model)
    work = get_workload(workload, "fp16")
    return 1.0 / sum(kernel_seconds(gpu, op, sms) for op in work.ops)


def visible_sms(log: str) -> int:
    """The SMs the daemon gave the context, from the workload's first line ("... 32/108 SMs, quota ...")."""
    import re

    return int(re.search(r"(\d+)/\d+ SMs", log).group(1))


# ---- 3. the chart's pods on the real node ------------------------------------------------------------------
def test_helm_install_runs_every_chart_pod_on_the_real_node(cluster, target, core):
    t = time.monotonic()
    install.install(target, [VALUES], [], "fgpu:dev")
    found = install.check(target, say=print)
    TIMINGS["helm_install_s"] = target.timings["helm_install_s"]
    TIMINGS["install_to_ready_s"] = round(time.monotonic() - t, 1)
    pods = found["pods"]
    operators = [n for n in pods if "operator" in n]
    assert len(operators) == 2 and found["leader"] in operators
    assert all(node == NODE_NAME for node in pods.values())  # none on the KWOK node
    resources = found["resources"][NODE_NAME]
    assert resources["nvidia.com/gpu"] == "40"  # 4 A100s x splitCount 10
    # the static H100's two 1g.10gb and one 3g.40gb, and the dynamic-MIG A100's seven 1g.10gb
    assert resources["nvidia.com/mig-1g.10gb"] == "9" and resources["nvidia.com/mig-3g.40gb"] == "1"
    assert resources["nvidia.com/gpu.shared"] == "4"  # the L4, time-sliced
    assert SOCKET_HOST_PATH.is_socket()  # the daemon pod serves its socket on the node


# ---- 4. users' pods through all of it ----------------------------------------------------------------------
def test_a_fractional_pods_workload_runs_against_the_daemon_pod(cluster, core):
    t0 = create(core, workload_pod("share-a", {keys.FGPU_FRACTION: "0.3", keys.FGPU_MEMORY: "8Gi"}))
    pod = wait_for(lambda: (p := _pod(core, "share-a"))["spec"].get("nodeName") and p, 120, "share-a bound")
    TIMINGS["apply_to_bound_s"] = round(time.monotonic() - t0, 2)
    assert pod["spec"]["nodeName"] == NODE_NAME and pod["spec"]["schedulerName"] == keys.SCHEDULER_NAME
    running(core, "share-a")
    log, report = first_report(core, "share-a")
    TIMINGS["apply_to_first_output_s"] = round(time.monotonic() - t0, 1)
    # what the daemon gave it: an A100 with an 8 GiB quota, its compute capped at the 0.3 share (HAMi-core's SM
    # limit: time-sliced, a capped context waits out the rest of each turn)
    assert "A100-SXM4-80GB" in log and "quota 8192 MiB" in log, log
    solo = predicted_it_per_s("A100-80GB", visible_sms(log))
    # the cap is a time average (a first turn runs before its first wait): judge the rate over 10 s of it
    report = wait_for(lambda: next((r for r in reports(core, "share-a") if r["virtual_s"] >= 10), None), 60,
                      "share-a's report after 10 emulated seconds")
    TIMINGS["share_a_it_per_s"] = round(report["it_per_s"], 1)
    TIMINGS["predicted_solo_it_per_s"] = round(solo, 1)
    TIMINGS["share_a_of_predicted_share"] = round(report["it_per_s"] / (0.3 * solo), 3)
    # the cap holds: far below what the model predicts for the A100 alone (~1.0 of it uncapped), near 0.3 of it
    # (the closing note of issue 33 reports the ratio; the emulated clock also counts this process's host gaps)
    assert 0 < report["it_per_s"] < 0.5 * solo, (report, solo)
    assert report["progress_rate"] == pytest.approx(1.0, abs=0.02)  # alone on its GPU: no co-runner slowed it


def test_a_second_pod_shares_the_same_gpu(core):
    gpu = device_of(_pod(core, "share-a"))
    create(core, workload_pod("share-b", {keys.FGPU_FRACTION: "0.3", keys.FGPU_MEMORY: "8Gi",
                                          "nvidia.com/use-gpuuuid": gpu}))
    running(core, "share-b")
    _, report = first_report(core, "share-b")
    assert device_of(_pod(core, "share-b")) == gpu
    assert report["iterations"] > 0


def test_allocating_past_the_quota_is_refused_and_the_neighbour_runs_on(core):
    before = len(reports(core, "share-a"))
    create(core, workload_pod("greedy", {keys.FGPU_FRACTION: "0.1", keys.FGPU_MEMORY: "8Gi"},
                              command=["simgpu", "run", "--workload", "memory", "--mem", "9Gi", "--iterations", "1"]))

    def finished():
        pod = _pod(core, "greedy")
        return pod["status"].get("phase") in ("Failed", "Succeeded") and pod

    pod = wait_for(finished, 120, "greedy to finish", interval=0.5)
    log = core.read_namespaced_pod_log("greedy", NS, container="main")
    assert pod["status"]["phase"] == "Failed", log
    assert "quota" in log.lower() and "8192" in log.replace(",", ""), log  # the daemon's refusal, as the container saw it
    assert "Traceback" not in log
    wait_for(lambda: len(reports(core, "share-a")) > before + 1, 30, "share-a to keep reporting")
    delete(core, "greedy")


def test_a_hami_pod_and_a_mig_pod_run_their_workloads(core):
    create(core, workload_pod("hami", limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096",
                                              "nvidia.com/gpucores": "30"}, scheduler="hami-scheduler"))
    create(core, workload_pod("mig", limits={"nvidia.com/mig-1g.10gb": "1"}))
    for name in ("hami", "mig"):
        running(core, name)
    hami_log, hami = first_report(core, "hami")
    mig_log, mig = first_report(core, "mig")
    assert "quota 4096 MiB" in hami_log and hami["iterations"] > 0, hami_log
    # the instance the scheduler assigned (the static H100's or the dynamic A100's 1g.10gb), not the kubelet's own
    # pick: the device plugin steers it (GetPreferredAllocation)
    (uuid,) = [d["uuid"] for c in json.loads(core.read_namespaced_pod("mig", NS).metadata.annotations[
        keys.ASSIGNMENT])["containers"] for d in c["devices"]]
    assert "MIG 1g.10gb" in mig_log and uuid in mig_log and mig["iterations"] > 0, (uuid, mig_log)


def test_prometheus_scrapes_every_chart_pod_and_report_draws_from_it(cluster, target, core, tmp_path):
    binary = shutil.which("prometheus")
    assert binary, "prometheus not found: `make prometheus` (make test installs it)"
    pods = install.release_pods(core, target)
    proc, url = start_prometheus(binary, tmp_path, pod_scrape_configs(pods), free_port())
    try:
        from fgpu_operator.observe.prom import Prometheus

        prom = Prometheus(url)
        expected = 2 + 2  # two operators; the node's device plugin and daemon
        up = wait_for(lambda: (r := prom.query("up == 1")) and len(r) == expected and r, 60,
                      f"Prometheus to scrape all {expected} chart pods", show=lambda: prom.query("up"))
        assert {s.labels["job"] for s in up} == {"fgpu-operator", "fgpu-device-plugin", "fgpu-node-daemon"}
        wait_for(lambda: prom.query('fgpu_pod_gpu_memory_limit_bytes{pod="share-a"}'), 30,
                 "the daemon's series for share-a")
        out = tmp_path / "report"
        done = subprocess.run([FGPU, "report", "--prometheus", url, "--out", str(out), "--since", "2m"],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert list(out.glob("*.png")), done.stdout
    finally:
        proc.terminate()
        proc.wait(20)


# ---- 5. day 2 ------------------------------------------------------------------------------------------------
def _violations(cluster, core, target) -> list[str]:
    """The invariant checker over the API and every daemon pod's open contexts."""
    import urllib.request

    from fgpu_operator.inspect.audit import check, handed_from_daemon_metrics
    from kubernetes import client

    with cluster.plane.api() as api:
        custom = client.CustomObjectsApi(api)
        gpunodes = custom.list_cluster_custom_object(keys.CRD_GROUP, keys.CRD_VERSION, keys.GPUNODE_PLURAL)["items"]
    nodes = json.loads(core.list_node(_preload_content=False).data)["items"]
    pods = json.loads(core.list_pod_for_all_namespaces(_preload_content=False).data)["items"]
    contexts = {}
    for pod in install.release_pods(core, target):
        if "node" in pod["metadata"]["labels"].get("app.kubernetes.io/component", ""):
            port = 9400
            with urllib.request.urlopen(f"http://{pod['status']['podIP']}:{port}/metrics", timeout=10) as resp:
                contexts[pod["spec"]["nodeName"]] = handed_from_daemon_metrics(pod["spec"]["nodeName"],
                                                                               resp.read().decode())
    return list(check(nodes, pods, gpunodes, contexts=contexts).violations)


def test_helm_upgrade_rolls_the_operator_and_daemonset_while_shares_are_held(cluster, target, core):
    before = {p["metadata"]["name"] for p in install.release_pods(core, target)}
    assert _violations(cluster, core, target) == []
    held = {n: device_of(_pod(core, n)) for n in ("share-a", "share-b", "hami")}
    t = time.monotonic()
    install.install(target, [VALUES], ["node.daemon.metricsInterval=2", "operator.verbose=true"], "fgpu:dev")
    found = install.check(target, say=print)
    TIMINGS["upgrade_s"] = round(time.monotonic() - t, 1)
    assert not before & set(found["pods"]), "helm upgrade did not roll every pod"
    # the shares stay where they were, each given once, and the running workloads reopen their contexts
    assert {n: device_of(_pod(core, n)) for n in held} == held
    for name in held:
        n = len(reports(core, name))
        wait_for(lambda name=name, n=n: len(reports(core, name)) > n, 90, f"{name} to report again after the roll")
        assert _pod(core, name)["status"]["phase"] == "Running"
    log = core.read_namespaced_pod_log("share-a", NS, container="main")
    assert "reconnected" in log, log[-1500:]
    wait_for(lambda: _violations(cluster, core, target) == [], 60, "no invariant violation after the upgrade",
             show=lambda: _violations(cluster, core, target))
    # a new pod still gets through the rolled stack
    create(core, workload_pod("after-upgrade", {keys.FGPU_FRACTION: "0.2"}))
    running(core, "after-upgrade")


def test_helm_rollback_and_helm_test(target, core):
    target.helm_run("rollback", target.release, "1", "--namespace", target.namespace, "--wait", "--timeout=300s")
    install.check(target, say=print)
    history = json.loads(target.helm_run("history", target.release, "--namespace", target.namespace,
                                         "-o", "json").stdout)
    assert [h["revision"] for h in history] == [1, 2, 3] and history[-1]["description"].startswith("Rollback")
    done = target.helm_run("test", target.release, "--namespace", target.namespace, "--timeout=300s",
                           timeout=400)
    assert "Succeeded" in done.stdout, done.stdout


def test_helm_uninstall_leaves_no_webhook_pod_or_socket(cluster, target, core):
    from kubernetes import client

    delete(core, "share-a", "share-b", "hami", "mig", "after-upgrade")
    install.uninstall(target)
    wait_for(lambda: not install.release_pods(core, target), 120, "the chart's pods gone")
    with cluster.plane.api() as api:
        reg = client.AdmissionregistrationV1Api(api)
        assert not [w.metadata.name for w in reg.list_mutating_webhook_configuration().items]
        assert not [w.metadata.name for w in reg.list_validating_webhook_configuration().items]
        crds = client.ApiextensionsV1Api(api).list_custom_resource_definition().items
        assert {c.metadata.name for c in crds} >= {f"{keys.GPUNODE_PLURAL}.{keys.CRD_GROUP}"}  # kept, as Helm does
    wait_for(lambda: not SOCKET_HOST_PATH.exists(), 30, "the daemon's socket removed from the node")
    plugin_sockets = [p.name for p in Path("/var/lib/kubelet/device-plugins").glob("*.sock") if p.name != "kubelet.sock"]
    assert plugin_sockets == []
    print("timings:", json.dumps(TIMINGS), file=sys.stderr)


def test_values_file_is_what_make_demo_installs():
    """make demo and this test install the same values: the file is the one devcluster.demo reads."""
    from devcluster import demo

    assert demo.VALUES == VALUES
    assert yaml.safe_load(VALUES.read_text())["image"]["pullPolicy"] == "Never"
