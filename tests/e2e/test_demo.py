"""`make demo` (devcluster/demo.py) run as a user runs it, shortened (no report, no simulate, 3 s of workload):
every example pod of deploy/examples/pods must end as its `examples.fgpu.io/expect` annotation and the README
say (admitted pods Running on the node pool that serves their request form, with the devices their node's
plugin allocated; the one that cannot fit Pending with fgpu's reason; the invalid one denied by the webhook,
naming the field), each placed pod's workload must have run against its node's simgpu daemon, and
`demo down` must leave no process, listening port or socket behind."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "deploy" / "examples" / "pods"
# the node pool each admitted example lands on (deploy/values/quickstart.yaml): MIG and time-slicing have theirs,
# every fractional request form goes to the fractional A100s
POOL = {"mig-1g": "h100-mig", "timeslice-replica": "l4-timeslicing"}


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _alive(pid_and_start: str) -> bool:
    """A pid file's "PID STARTTIME" still names a running process (the same one: its start time matches)."""
    pid, started = pid_and_start.split()
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[19] == started


def test_demo_places_every_example_as_the_readme_says_and_down_leaves_nothing(testbin):
    from promserver import prometheus_binary

    prometheus_binary()  # skipped without it, unless CI requires it
    state = Path(tempfile.mkdtemp(prefix="fgpu-demo-", dir="/tmp"))  # short: unix socket paths
    env = {**os.environ, "FGPU_TESTBIN": str(testbin)}
    demo = [sys.executable, "-m", "devcluster.demo"]
    pids: dict[str, str] = {}
    ports: list[int] = []
    sockets: list[Path] = []
    try:
        up = subprocess.run([*demo, "up", "--state", str(state), "--no-report", "--no-simulate",
                             "--workload-seconds", "3"], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=420)
        print(up.stdout[-6000:], up.stderr[-3000:])
        assert up.returncode == 0, up.stderr[-3000:]
        facts = json.loads((state / "demo.json").read_text())
        pids = {p.stem: p.read_text() for p in (state / "pids").glob("*.pid")}
        assert len(pids) == 13 and all(_alive(p) for p in pids.values())  # 4 control plane, 3x2 node, 3 more

        from kubernetes import client, config

        with config.new_client_from_config(config_file=facts["kubeconfig"]) as api:
            core = client.CoreV1Api(api)
            for path in sorted(EXAMPLES.glob("*.yaml")):
                manifest = yaml.safe_load(path.read_text())
                name, expect = manifest["metadata"]["name"], manifest["metadata"]["annotations"][
                    "examples.fgpu.io/expect"]
                seen = facts["pods"][name]
                if expect == "denied":
                    assert seen["outcome"] == "denied", (name, seen)
                    assert "denied the request: metadata.annotations[fgpu.io/gpu-fraction]: '1.5'" in seen["message"]
                    assert f"{name} was refused by the webhook" in up.stdout
                    continue
                pod = core.read_namespaced_pod(name, "default")
                if expect == "unschedulable":
                    (cond,) = [c for c in pod.status.conditions if c.type == "PodScheduled"]
                    assert (pod.status.phase, cond.status, cond.reason) == ("Pending", "False", "Unschedulable")
                    assert cond.message.startswith("0/3 nodes are available: "), cond.message
                    assert f"why {name} is Pending" in up.stdout and cond.message in up.stdout
                    continue
                assert expect == "admitted", (name, expect)
                assert pod.status.phase == "Running", (name, pod.status.phase)
                assert pod.spec.node_name == POOL.get(name, "a100-fractional"), (name, pod.spec.node_name)
                allocated = json.loads(pod.metadata.annotations["devcluster.fgpu.io/allocated"])["main"]
                assert sum(len(ids) for ids in allocated.values()) >= 1, (name, allocated)
                # the pod's own command ran with its Allocate env against the node daemon, and reported
                log = (state / "logs" / f"workload-{name}.log").read_text()
                assert "simgpu run: resnet" in log and " it/s emulated" in log, (name, log[-1500:])
        assert "where each pod went, as `fgpu inspect` shows it" in up.stdout
        assert "default/cannot-fit  Unschedulable" in up.stdout
        ports = facts["ports"]
        assert all(_listening(p) for p in ports)
        sockets = [Path(s) for s in facts["sockets"]]
        assert all(s.is_socket() for s in sockets)
    finally:
        down = subprocess.run([*demo, "down", "--state", str(state)], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=120)
    try:
        assert down.returncode == 0, down.stdout + down.stderr
        assert [name for name, p in pids.items() if _alive(p)] == []
        assert [p for p in ports if _listening(p)] == []
        assert [s for s in sockets if s.exists()] == []
        assert sorted(p.name for p in state.iterdir()) == ["logs"]  # no report drawn here
        again = subprocess.run([*demo, "down", "--state", str(state)], cwd=REPO, env=env, capture_output=True,
                               text=True, timeout=60)
        assert again.returncode == 0 and "nothing of it is running" in again.stdout  # idempotent
    finally:
        shutil.rmtree(state, ignore_errors=True)
