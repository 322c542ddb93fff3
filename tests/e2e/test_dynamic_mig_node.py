"""The node's side of dynamic MIG on real processes: a simgpu node daemon and fgpu-device-plugin (with the stub
kubelet) for a node whose A100 is `mig: {dynamic: true}` cut into seven 1g.10gb. A desired layout written in
its GPUNode status.migChanges (what the operator's leader writes) is taken up: the plugin reports Applying,
the daemon destroys the idle instances and creates the new one after the reconfiguration time, ListAndWatch
re-advertises (nvidia.com/mig-3g.40gb appears, three 1g go), the inventory shows the new layout and Done. A
workload on an untouched instance keeps running throughout; a change that would destroy an instance with a
live context is refused (Failed, the layout unchanged)."""
from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from pathlib import Path

import pytest
from operator_proc import install_crds
from plugin_proc import stop_process
from polling import wait_for

from devcluster import fgpu
from devcluster.stub_kubelet import StubKubelet
from fgpu_contracts import keys
from simgpu.client import DaemonClient
from simgpu.nodeconfig import mig_uuid
from simgpu.perf import GemmOp
from simgpu.token import Grant, issue_token

pytestmark = pytest.mark.e2e
NODE = "dm-real"
SECRET = b"k" * 32
RECONFIGURE_S = 1.5
GROUP, VERSION, PLURAL = keys.CRD_GROUP, keys.CRD_VERSION, keys.GPUNODE_PLURAL


@pytest.fixture
def mig_node(k8s, tmp_path):
    from kubernetes import client

    install_crds(k8s)
    work = Path(tempfile.mkdtemp(prefix="dmn", dir="/tmp"))  # short: unix socket paths
    (work / "secret").write_bytes(SECRET)
    config = work / "node.yaml"
    config.write_text("version: v1\ngpus:\n  - model: A100-80GB\n    mig: {layout: all-1g.10gb, dynamic: true, "
                      f"reconfigureSeconds: {RECONFIGURE_S}}}\ntokenSecretFile: {work}/secret\n")
    socket = work / "daemon.sock"
    with k8s.api() as api:
        core = client.CoreV1Api(api)
        core.create_node({"metadata": {"name": NODE}})
        kubelet = StubKubelet(str(work))
        kubelet.start()
        daemon = fgpu.start_daemon(config, socket, NODE, tmp_path / "daemon.log")
        plugin = fgpu.start_plugin(config, NODE, work, k8s.kubeconfig, socket, tmp_path / "plugin.log")
        try:
            yield client.CustomObjectsApi(api), kubelet, socket
        finally:
            stop_process(plugin)
            stop_process(daemon)
            kubelet.stop()
            with contextlib.suppress(Exception):
                client.CustomObjectsApi(api).delete_cluster_custom_object(GROUP, VERSION, PLURAL, NODE)
            core.delete_node(NODE)
            print((tmp_path / "plugin.log").read_text()[-3000:])
            print((tmp_path / "daemon.log").read_text()[-2000:])


def gpu_spec(custom) -> dict | None:
    """The node's GPU as its plugin published it on the GPUNode (None until it has)."""
    from kubernetes.client.rest import ApiException

    try:
        return custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, NODE)["spec"]["gpus"][0]
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def ask(custom, gpu: str, change_id: str, layout: list[tuple[str, int]]) -> None:
    """What the operator's leader writes for a re-layout of `gpu`."""
    change = {"gpu": gpu, "id": change_id, "phase": "Pending", "startedTime": "2026-12-02T00:00:00Z",
              "layout": [{"profile": p, "start": s} for p, s in layout]}
    custom.patch_cluster_custom_object_status(GROUP, VERSION, PLURAL, NODE, {"status": {"migChanges": [change]}})


class Workload(threading.Thread):
    """Kernels on one instance, in rounds, until stopped; any error is kept."""

    def __init__(self, socket: Path, uuid: str):
        super().__init__(daemon=True)
        self.client = DaemonClient(str(socket))
        self.ctx = self.client.open_context(issue_token(SECRET, Grant(device_uuid=uuid)))
        self.rounds, self.error, self.halt = 0, None, threading.Event()

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                for _ in range(4):
                    self.ctx.launch(GemmOp(1024, 1024, 1024))
                self.ctx.synchronize()
                self.rounds += 1
        except Exception as err:  # kept for the test to report
            self.error = err

    def stop(self) -> None:
        self.halt.set()
        self.join(10)
        self.client.close()


def test_the_daemon_re_lays_the_gpu_and_the_plugin_re_advertises_while_a_kept_instance_runs(mig_node):
    custom, kubelet, socket = mig_node
    assert len(kubelet.wait_devices("nvidia.com/mig-1g.10gb", lambda d: len(d) == 7, timeout=30)) == 7
    gpu = wait_for(lambda: gpu_spec(custom), 30, "the plugin's GPUNode")
    assert gpu["migDynamic"] is True and len(gpu["mig"]) == 7
    uuid = gpu["uuid"]
    work = Workload(socket, mig_uuid(NODE, 0, "1g.10gb", 0))
    work.start()
    try:
        wait_for(lambda: work.rounds >= 2, 20, "the workload running")
        asked = time.monotonic()
        ask(custom, uuid, "c1", [("1g.10gb", s) for s in range(4)] + [("3g.40gb", 4)])
        wait_for(lambda: (gpu_spec(custom).get("migChange") or {}).get("phase") == "Applying", 10, "Applying")
        done = wait_for(lambda: (g := gpu_spec(custom)).get("migChange", {}).get("phase") == "Done" and g, 30,
                        "Done", show=lambda: gpu_spec(custom).get("migChange"))
        took = time.monotonic() - asked
        assert took >= RECONFIGURE_S
        print(f"\nnode side: desired layout written -> Done in the inventory: {took:.2f} s "
              f"(reconfiguration {RECONFIGURE_S} s emulated)")
        assert sorted((m["profile"], m["start"]) for m in done["mig"]) == \
            [("1g.10gb", 0), ("1g.10gb", 1), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)]
        (new,) = kubelet.wait_devices("nvidia.com/mig-3g.40gb", lambda d: len(d) == 1, timeout=10)
        assert mig_uuid(NODE, 0, "3g.40gb", 4) == new.ID
        assert len(kubelet.wait_devices("nvidia.com/mig-1g.10gb", lambda d: len(d) == 4, timeout=10)) == 4
        with DaemonClient(str(socket)) as daemon:
            assert sorted(d["profile"] for d in daemon.devices() if d["parent"]) == ["1g.10gb"] * 4 + ["3g.40gb"]
        before = work.rounds
        wait_for(lambda: work.rounds > before + 1, 20, "the workload still running")
        assert work.error is None, work.error

        # a change that would destroy the instance the workload holds is refused; nothing changes
        ask(custom, uuid, "c2", [("3g.40gb", 0), ("3g.40gb", 4)])
        failed = wait_for(lambda: (g := gpu_spec(custom)).get("migChange", {}).get("phase") == "Failed" and g, 20,
                          "Failed", show=lambda: gpu_spec(custom).get("migChange"))
        assert failed["migChange"]["id"] == "c2" and "in use would be destroyed" in failed["migChange"]["message"]
        assert len(failed["mig"]) == 5 and work.error is None
    finally:
        work.stop()
