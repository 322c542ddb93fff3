"""fgpu on a REAL node: Debian's containerd and runc, and a kubelet built from the control plane's Kubernetes
module (devcluster/node.py), registered with the test apiserver. fgpu's device plugin registers with
that kubelet; a pod asking for 0.3 of a GPU goes through fgpu's webhook and scheduler to the node; the kubelet
admits it, calls the plugin's Allocate, and runs the container (a static probe packed as a local OCI image by
hack/node-setup.sh). What the container prints from inside (env, mounts, whether the node daemon's socket
answers) is what fgpu handed it. The kubelet's device checkpoint records the pod's devices; deleting the pod
frees them for the next. The last test stops everything and checks that nothing is left on the machine.

Needs root, hack/node-setup.sh's directory in FGPU_NODE and kubelet in FGPU_TESTBIN (`make test` does all).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from operator_proc import install_crds, start_operator, stop, wait_webhook_live
from polling import wait_for

from devcluster.fgpu import HANDOFF_KEY_FLAG, handoff_key_file
from devcluster.kubeplane import ComponentError, die_with_parent, free_port
from devcluster.node import CHECKPOINT, DEVICE_PLUGIN_DIR, TAINT, NodeSetupError, RealNode, node_dir
from fgpu_contracts import keys
from simgpu.nodeconfig import parse_node_config
from simgpu.token import verify_token

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
NODE = "fgpu-real-node"
SECRET = b"real-kubelet-secret-0123456789ab"
# one GPU cut into ONE vGPU slot: a second pod is admitted only once the kubelet has freed the first one's
CONFIG = "version: v1\ngpus: [{model: A100-80GB, count: 1, sharing: fractional}]\nfractional: {splitCount: 1}\n"
RESOURCE = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def real_node(k8s, tmp_path_factory):
    """containerd + the real kubelet, node Ready; stopped (with everything it made) after the module."""
    try:
        directory = node_dir(os.environ.get("FGPU_NODE"))
    except NodeSetupError as e:
        problem = str(e)
    else:
        problem = None if os.access(k8s.testbin / "kubelet", os.X_OK) else (
            f"{k8s.testbin} has no kubelet: rebuild with `make testbin` (it builds only what is missing)")
    if problem:  # a skip; FGPU_REQUIRE_E2E=1 (make test, CI) turns it into a failure
        pytest.skip(problem)
    node = RealNode(k8s, directory, tmp_path_factory.mktemp("realnode"), NODE)
    try:
        node.start()
        node.wait_ready()
    except ComponentError as e:
        problem = str(e)
    if problem:
        tails = node.log_tails()
        node.stop()
        pytest.fail(f"real node did not come up: {problem}\n{tails}", pytrace=False)
    yield node
    node.stop()


class Stack:
    """fgpu on the node: the simgpu node daemon, the device plugin (in the kubelet's real device-plugin
    directory) and the operator (webhook + scheduler)."""

    def __init__(self, k8s, workdir: Path, logdir: Path):
        self.k8s, self.workdir, self.logdir = k8s, workdir, logdir  # logdir: kept after the run
        self.procs: list[subprocess.Popen] = []
        self.operator = None
        (workdir / "secret").write_bytes(SECRET)
        self.config_path = workdir / "node.yaml"
        self.config_path.write_text(CONFIG + f"tokenSecretFile: {workdir}/secret\n")
        self.cfg = parse_node_config(yaml.safe_load(CONFIG))
        self.socket = workdir / "run" / "daemon.sock"

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.logdir / f"{name}.log", "wb")  # noqa: SIM115 - the child owns it
        proc = subprocess.Popen([sys.executable, *argv], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                preexec_fn=die_with_parent)  # a killed pytest leaves no plugin behind
        proc.log_path = self.logdir / f"{name}.log"
        self.procs.append(proc)
        return proc

    def start(self) -> None:
        self.socket.parent.mkdir()
        daemon = self._spawn("daemon", ["-m", "simgpu.cli", "daemon", "--config", str(self.config_path),
                                        "--socket", str(self.socket), "--node-name", NODE])
        wait_for(lambda: self.socket.exists() or daemon.poll() is not None, 30, "the node daemon's socket")
        assert daemon.poll() is None, daemon.log_path.read_text()
        self._spawn("plugin", ["-m", "deviceplugin.cli", "--config", str(self.config_path), "--node-name", NODE,
                               "--device-plugin-path", str(DEVICE_PLUGIN_DIR), "--kubeconfig",
                               str(self.k8s.kubeconfig), "--daemon-socket", str(self.socket),
                               # the operator below signs each hand-off with the cluster's key: verify it, as the
                               # chart's plugin does
                               HANDOFF_KEY_FLAG, str(handoff_key_file(self.k8s.kubeconfig))])
        install_crds(self.k8s)
        # The plugin logs in as the test's admin (in a cluster: its own ServiceAccount, which the chart trusts):
        # only trusted users may write the hand-off annotations, so trust it as the chart would.
        self.operator = start_operator(self.k8s, self.logdir, "--webhook-port", str(free_port()), "--webhook-host",
                                       "127.0.0.1", "--manage-webhook-config", "--trusted-user", "admin")
        from kubernetes import client

        with self.k8s.api() as api:  # Kopf writes the webhook configuration after start-up; the apiserver's
            wait_webhook_live(client.CoreV1Api(api), "default")  # informer sees it later still

    def stop(self) -> None:
        if self.operator is not None:
            stop(self.operator)
            self.operator = None
        for proc in reversed(self.procs):
            stop(proc)
        self.procs = []

    def logs(self) -> str:
        paths = [p.log_path for p in self.procs] + ([self.operator.log_path] if self.operator else [])
        return "\n".join(f"----- {p.name} -----\n{p.read_text(errors='replace')[-2500:]}" for p in paths)


@pytest.fixture(scope="module")
def stack(real_node, k8s, tmp_path_factory):
    workdir = Path(real_node.run) / "fgpu"  # short: the daemon's socket path is limited to 107 bytes
    workdir.mkdir()
    fgpu = Stack(k8s, workdir, tmp_path_factory.mktemp("fgpu"))
    try:
        fgpu.start()
        yield fgpu
    finally:
        fgpu.stop()


@pytest.fixture
def core(k8s):
    from kubernetes import client

    with k8s.api() as api:
        yield client.CoreV1Api(api)


def _node(core) -> dict:
    return json.loads(core.read_node(NODE, _preload_content=False).data)


def _checkpoint() -> list[dict]:
    """The kubelet's device checkpoint: one entry per (pod, container, resource) holding devices."""
    if not CHECKPOINT.exists():
        return []
    return json.loads(CHECKPOINT.read_text())["Data"]["PodDeviceEntries"] or []


def _checkpoint_ids(entry: dict) -> list[str]:
    return sorted(i for ids in entry["DeviceIDs"].values() for i in ids)  # keyed by NUMA node


def probe_pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": {
                keys.FGPU_FRACTION: "0.3", keys.FGPU_MEMORY: "6Gi"}},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": NODE},
                     "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                     "automountServiceAccountToken": False, "enableServiceLinks": False,
                     "terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "main", "image": "fgpu.local/e2e/fgpu-probe:v1",
                                     "imagePullPolicy": "Never"}]}}


def run_pod(core, namespace: str, name: str) -> tuple[dict, dict[str, str], list[str], str]:
    """Create the probe pod and wait until it runs; returns (pod, env, mount points, socket line) as the
    container printed them."""
    from kubernetes.client.rest import ApiException

    def create():
        try:
            return core.create_namespaced_pod(namespace, probe_pod(name))
        except ApiException as e:  # the webhook may answer a moment after its configuration exists
            if e.status == 400 and "fgpu" in (e.body or ""):
                raise
            return None

    created = wait_for(create, what=f"pod {name} admitted by the apiserver")
    assert created.spec.scheduler_name == keys.SCHEDULER_NAME  # routed by fgpu's webhook

    def phase():
        pod = json.loads(core.read_namespaced_pod(name, namespace, _preload_content=False).data)
        return pod if pod["status"].get("phase") == "Running" else None

    def state():
        pod = json.loads(core.read_namespaced_pod(name, namespace, _preload_content=False).data)
        return pod["spec"].get("nodeName"), pod["status"]

    pod = wait_for(phase, 120, f"pod {name} Running on {NODE}", interval=0.5, show=state)
    assert pod["spec"]["nodeName"] == NODE
    log = wait_for(lambda: (text := core.read_namespaced_pod_log(name, namespace, container="main"))
                   and "ready" in text.split("\n") and text, 30, f"pod {name}'s probe output")
    env, mounts, sock = {}, [], ""
    for line in log.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "env":
            key, _, value = rest.partition("=")
            env[key] = value
        elif kind == "mount":
            mounts.append(rest.split()[0])
        elif kind == "socket":
            sock = rest
    return pod, env, mounts, sock


def delete_pod(core, namespace: str, name: str) -> None:
    """Delete with the pod's grace period and wait until the kubelet has stopped it and removed the object."""
    from kubernetes.client.rest import ApiException

    core.delete_namespaced_pod(name, namespace)

    def gone():
        try:
            core.read_namespaced_pod(name, namespace)
        except ApiException as e:
            return e.status == 404
        return False

    wait_for(gone, 60, f"the kubelet to stop pod {name} and delete it")


def _gpunode_allocations(k8s) -> list[dict]:
    from kubernetes import client

    with k8s.api() as api:
        obj = client.CustomObjectsApi(api).get_cluster_custom_object(
            keys.CRD_GROUP, keys.CRD_VERSION, keys.GPUNODE_PLURAL, NODE)
    return (obj.get("status") or {}).get("allocations") or []


def test_node_registers_and_advertises_the_plugins_devices(real_node, stack, core):
    names = stack.cfg.fractional.resources

    def checkpointed() -> dict:
        try:
            return json.loads(CHECKPOINT.read_text())["Data"]["RegisteredDevices"]
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return {}

    def advertised():
        """The kubelet reports the plugin's devices (and writes its checkpoint just after, from memory), and
        the plugin has patched its accounting resources onto the node status: writers in no fixed order (the
        plugin retries every 5 s until the kubelet has registered the node)."""
        capacity = (n := _node(core))["status"]["capacity"]
        return capacity.get(RESOURCE) == "1" and names.memory in capacity and RESOURCE in checkpointed() and n

    node = wait_for(advertised, 60, f"the kubelet to report {RESOURCE} and the plugin {names.memory}",
                    show=lambda: (_node(core)["status"]["capacity"], checkpointed()))
    status = node["status"]
    assert status["allocatable"][RESOURCE] == "1"  # one GPU, splitCount 1: one vGPU slot
    info = status["nodeInfo"]
    from kubernetes import client

    with real_node.plane.api() as api:  # the kubelet is built from the control plane's own Kubernetes module
        assert info["kubeletVersion"] == client.VersionApi(api).get_code().git_version
    assert info["containerRuntimeVersion"].startswith("containerd://")
    assert {"type": "InternalIP", "address": real_node.ip} in status["addresses"]
    assert [t["key"] for t in node["spec"]["taints"]] == [TAINT]  # registered with it; not-ready lifted
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True", ready
    # the plugin published the node's fractional inventory and accounting resources next to the kubelet's own
    assert keys.INVENTORY in node["metadata"]["annotations"]
    cfg = stack.cfg
    assert status["capacity"][names.memory] == str(cfg.gpu_devices(NODE)[0].spec.mem_bytes >> 20)
    assert status["capacity"][names.cores] == "100"
    # and the kubelet recorded the plugin's devices in its checkpoint
    assert len(checkpointed()[RESOURCE]) == 1


def test_fractional_pod_runs_with_fgpu_env_and_socket(real_node, stack, core, k8s, namespace):
    gpu = stack.cfg.gpu_devices(NODE)[0]
    try:
        pod, env, mounts, sock = run_pod(core, namespace, "probe-1")
    except BaseException:
        print(stack.logs())
        print(real_node.log_tails())
        raise
    (device,) = json.loads(pod["metadata"]["annotations"][keys.ASSIGNMENT])["containers"][0]["devices"]
    assert device["uuid"] == gpu.uuid

    # What Allocate returned, read back from inside the running container
    assert env["NVIDIA_VISIBLE_DEVICES"] == gpu.uuid
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "6144m"  # 6Gi, as asked
    assert env["CUDA_DEVICE_SM_LIMIT"] == "30"  # the SM share defaults to the fraction
    assert (env["NODE_NAME"], env["FGPU_SHARING_MODE"]) == (NODE, "fractional")
    grant = verify_token(SECRET, env["FGPU_CONTEXT_TOKEN"])
    assert (grant.pod_namespace, grant.pod_name, grant.container) == (namespace, "probe-1", "main")
    # the node daemon's socket directory is mounted where the env says, and the daemon answers there
    sock_path = env["FGPU_DAEMON_SOCKET"]
    assert sock_path == "/var/run/fgpu/daemon.sock"
    assert os.path.dirname(sock_path) in mounts
    assert sock == f"{sock_path} ok"

    # The kubelet's device checkpoint holds the pod's device
    (entry,) = [e for e in _checkpoint() if e["PodUID"] == pod["metadata"]["uid"]]
    assert (entry["ContainerName"], entry["ResourceName"]) == ("main", RESOURCE)
    slot_ids = _checkpoint_ids(entry)
    assert len(slot_ids) == 1
    # fgpu's own records: the plugin marked the container allocated, the operator lists it on the GPUNode
    allocated = pod["metadata"]["annotations"].get(keys.ALLOCATED) or wait_for(
        lambda: core.read_namespaced_pod("probe-1", namespace).metadata.annotations.get(keys.ALLOCATED),
        what="the plugin's allocation record")
    assert json.loads(allocated) == ["main"]
    wait_for(lambda: [a for a in _gpunode_allocations(k8s) if a["pod"] == "probe-1"], 30,
             "the operator to list probe-1 on the GPUNode")

    # Deleted: the kubelet stops it, fgpu releases the share, and the node's one slot goes to the next pod
    delete_pod(core, namespace, "probe-1")
    wait_for(lambda: not [a for a in _gpunode_allocations(k8s) if a["pod"] == "probe-1"], 30,
             "the operator to drop probe-1 from the GPUNode", show=lambda: _gpunode_allocations(k8s))
    pod2, env2, _, sock2 = run_pod(core, namespace, "probe-2")
    assert env2["NVIDIA_VISIBLE_DEVICES"] == gpu.uuid and sock2.endswith(" ok")
    entries = _checkpoint()
    assert pod["metadata"]["uid"] not in {e["PodUID"] for e in entries}  # released by the kubelet
    (entry2,) = [e for e in entries if e["PodUID"] == pod2["metadata"]["uid"]]
    assert _checkpoint_ids(entry2) == slot_ids  # the very slot probe-1 held
    delete_pod(core, namespace, "probe-2")


def _container_lines(core, namespace: str, name: str, container: str) -> dict[str, str]:
    """What one probe container printed, by kind (env/mount lines left out), once it printed `ready`."""
    text = wait_for(lambda: (t := core.read_namespaced_pod_log(name, namespace, container=container))
                    and "ready" in t.split("\n") and t, 60, f"{name}/{container}'s probe output")
    return {kind: rest for kind, _, rest in (line.partition(" ") for line in text.splitlines())
            if kind not in ("env", "mount")}


def test_the_daemon_socket_reaches_only_the_containers_it_was_mounted_into(real_node, stack, core, namespace):
    """Only a container Allocate handed a share to gets the daemon's socket: a sidecar of the same GPU pod and a
    plain pod on the same node, both told the socket's path, find nothing there."""
    sock_path = "/var/run/fgpu/daemon.sock"
    told = [{"name": "FGPU_DAEMON_SOCKET", "value": sock_path}]
    gpu_pod = probe_pod("probe-3")
    gpu_pod["spec"]["containers"].append({"name": "sidecar", "image": "fgpu.local/e2e/fgpu-probe:v1",
                                          "imagePullPolicy": "Never", "env": told})
    plain = probe_pod("plain")
    plain["metadata"]["annotations"] = {}  # asks for no GPU: the webhook leaves it alone
    plain["spec"].pop("nodeSelector")
    plain["spec"]["nodeName"] = NODE  # bound by hand (no kube-scheduler here), the kubelet runs it
    plain["spec"]["containers"][0]["env"] = told
    for body in (gpu_pod, plain):
        wait_for(lambda body=body: core.create_namespaced_pod(namespace, body), 30, f"pod {body['metadata']['name']}")
    try:
        for name in ("probe-3", "plain"):
            wait_for(lambda name=name: json.loads(core.read_namespaced_pod(name, namespace, _preload_content=False)
                                                  .data)["status"].get("phase") == "Running", 120, f"{name} Running")
        assert _container_lines(core, namespace, "probe-3", "main")["socket"] == f"{sock_path} ok"
        for name, container in (("probe-3", "sidecar"), ("plain", "main")):
            line = _container_lines(core, namespace, name, container)["socket"]
            assert line.startswith(sock_path) and "no such file or directory" in line, (name, container, line)
    except BaseException:
        print(stack.logs())
        print(real_node.log_tails())
        raise
    finally:
        for name in ("probe-3", "plain"):
            delete_pod(core, namespace, name)


def test_teardown_leaves_nothing_behind(real_node, stack):
    t0 = time.monotonic()
    stack.stop()
    t1 = time.monotonic()
    real_node.stop()
    print(f"teardown: fgpu stopped in {t1 - t0:.1f} s, the node in {time.monotonic() - t1:.1f} s")
    assert real_node.leftovers() == []
