"""`make cluster-up` / `make cluster-down`: the cluster kind would give a user, built from source, no Docker.

    python -m devcluster.cluster up   [--state DIR] [--kwok-nodes N] [--no-image]
    python -m devcluster.cluster down [--state DIR]

What `up` builds (each part cached: `make testbin`, hack/node-setup.sh, hack/image-nodocker.sh):
- the control plane of `make testbin`: etcd, kube-apiserver (advertising this host's address, so the
  `kubernetes` Service's endpoint is real and clients in pods verify its certificate), kube-controller-manager,
  kube-scheduler, and kube-proxy in iptables mode (ClusterIP Services work from pods and from this host: the
  apiserver reaches webhooks through their Service, as on kind);
- one real node, `fgpu-node-1`: containerd 2.x + runc + the CNI bridge + a kubelet (devcluster.node), labelled
  `fgpu.io/node-pool=real`, with the fgpu image (the Dockerfile, built by buildah) imported into its containerd;
- KWOK nodes for scale, tainted `kwok.x-k8s.io/node=fake:NoSchedule` so that only pods that ask for them go
  there (the chart's DaemonSets and Deployment do not: KWOK would only pretend to run them).

The processes belong to one supervisor (`serve`, started in a session of its own), so `down` is one signal:
the supervisor deletes the node's pods, stops the kubelet and containerd with every shim, removes mounts,
network namespaces, the bridge and kube-proxy's rules, then the control plane, apiserver before etcd. A
supervisor killed outright leaves what the next `up` or `down` clears (devcluster.node's stale-run cleanup,
`kube-proxy --cleanup`). The state directory holds `kubeconfig` (for kubectl and helm), logs and timings.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from devcluster import pidfiles
from devcluster.kubeplane import ControlPlane, TestbinError, cleanup_kube_proxy, find_testbin
from devcluster.node import NodeSetupError, RealNode, host_ip, node_dir

REPO = Path(__file__).resolve().parents[1]
STATE = REPO / "out" / "cluster"
NODE_NAME = "fgpu-node-1"
POOL_LABEL = "fgpu.io/node-pool"
REAL_POOL = "real"
KWOK_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
SUPERVISOR = "supervisor"


class ClusterError(Exception):
    """The cluster cannot come up; the message says why and what to do."""


def _last_line(cmd: list[str], what: str, env: dict | None = None) -> str:
    """Run one of hack/'s set-up scripts (progress on stderr, passed through); its last stdout line."""
    done = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True, env=env)
    out = done.stdout.strip().splitlines()
    if done.returncode != 0 or not out:
        raise ClusterError(f"{what} failed (its message is above)")
    return out[-1]


def prepare(image: bool) -> dict[str, str]:
    """The cached parts: control-plane binaries, the node's configs, the image archive. Timed."""
    timings, paths = {}, {}
    for name, cmd in (("testbin", ["hack/testbin.sh"]), ("node", ["hack/node-setup.sh"]),
                      *([("image", ["hack/image-nodocker.sh"])] if image else [])):
        t = time.monotonic()
        paths[name] = _last_line(cmd, cmd[0])
        timings[f"{name}_s"] = round(time.monotonic() - t, 1)
    return {**paths, "timings": timings}


class Cluster:
    """The control plane, kube-proxy, one real node and KWOK nodes, owned by this process."""

    def __init__(self, testbin: Path, node_dir_: Path, state: Path, kwok_nodes: int = 2):
        self.state, self.kwok_nodes = state, kwok_nodes
        self.logs = state / "logs"
        self.ip = host_ip()
        self.plane = ControlPlane(testbin, state / "plane", state / "data", address=self.ip)
        self.node = RealNode(self.plane, node_dir_, self.logs / NODE_NAME, NODE_NAME, taints=[],
                             labels={POOL_LABEL: REAL_POOL})
        self.kubeconfig = state / "kubeconfig"
        self.timings: dict[str, float] = {}
        self._ip_forward: str | None = None

    def _timed(self, what: str, fn, *args) -> None:
        t = time.monotonic()
        fn(*args)
        self.timings[f"{what}_s"] = round(time.monotonic() - t, 1)

    def up(self, image_archive: Path | None) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        (self.logs / NODE_NAME).mkdir(exist_ok=True)
        self._timed("control_plane", self._control_plane)
        self._forwarding()
        self._timed("node", self._node)
        self._timed("kube_proxy", self.plane.start_kube_proxy, NODE_NAME, self.node.facts["pod_subnet"])
        if image_archive is not None:
            self._timed("image_import", self.node.import_image, image_archive)
        if self.kwok_nodes:
            self._timed("kwok_nodes", self._kwok)
        shutil.copy(self.plane.kubeconfig, self.kubeconfig)

    def _control_plane(self) -> None:
        self.plane.start()
        self.plane.start_controller_manager()
        self.plane.start_scheduler()

    def _forwarding(self) -> None:
        """Pods reach Services and each other through the bridge: the host must forward (kind's nodes do)."""
        with contextlib.suppress(OSError):
            self._ip_forward = IP_FORWARD.read_text().strip()
            if self._ip_forward != "1":
                IP_FORWARD.write_text("1\n")

    def _node(self) -> None:
        self.node.start()
        self.node.wait_ready()

    def _kwok(self) -> None:
        from kubernetes import client

        names = [f"kwok-node-{i}" for i in range(1, self.kwok_nodes + 1)]
        self.plane.make_kwok_nodes(names, {}, labels={POOL_LABEL: "kwok"})
        with self.plane.api() as api:
            core = client.CoreV1Api(api)
            for name in names:
                core.patch_node(name, {"spec": {"taints": [KWOK_TAINT]}})

    def facts(self) -> dict:
        return {"kubeconfig": str(self.kubeconfig), "server": self.plane.server, "node": NODE_NAME,
                "node_ip": self.ip, "image": self.node.image, "run": str(self.node.run),
                "testbin": str(self.plane.testbin), "timings": self.timings}

    def stop(self) -> None:
        """The node first (its pods drained while the apiserver answers), then the control plane. The
        controllers stop before the drain, or the DaemonSet's and Deployment's pods would come back as it runs."""
        try:
            for name in ("kube-controller-manager", "kube-scheduler"):
                self.plane.stop_component(name)
            self.node.stop()
        finally:
            self.plane.stop()
            if self._ip_forward not in (None, "1"):
                with contextlib.suppress(OSError):
                    IP_FORWARD.write_text(self._ip_forward + "\n")


# ---- up / serve / down -----------------------------------------------------------------------------------
def serve(state: Path, testbin: Path, node: Path, image: Path | None, kwok_nodes: int) -> int:
    """Bring the cluster up, write ready.json, hold it until SIGTERM/SIGINT, tear it down."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    cluster = Cluster(testbin, node, state, kwok_nodes)
    try:
        cluster.up(image)
        (state / "ready.json").write_text(json.dumps(cluster.facts(), indent=1))
        print(f"cluster up: {json.dumps(cluster.facts())}", flush=True)
        while not stop:
            time.sleep(0.5)
        print("stopping", flush=True)
        return 0
    except Exception as e:  # noqa: BLE001 - whatever stopped it, `up` reports it in one place
        (state / "failed.txt").write_text(f"{type(e).__name__}: {e}\n"
                                          f"{cluster.node.log_tails() if cluster.node.components else ''}")
        print(f"cluster failed: {e}", flush=True)
        return 1
    finally:
        cluster.stop()
        (state / "ready.json").unlink(missing_ok=True)


def up(state: Path, kwok_nodes: int, image: bool, say=print, timeout: float = 900) -> dict:
    """Prepare the cached parts, start the supervisor, wait for ready.json; returns its facts."""
    if pidfiles.alive(state, SUPERVISOR):
        raise ClusterError(f"a cluster is already up in {state} (KUBECONFIG={state / 'kubeconfig'}); "
                           "`make cluster-down` first")
    down(state, say=lambda m: say(f"an earlier cluster was left behind: {m}"))
    for old in ("data", "plane", "logs"):  # a fresh cluster: no etcd data, certificates or logs of the last one
        shutil.rmtree(state / old, ignore_errors=True)
    state.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    parts = prepare(image)
    try:
        testbin, node = find_testbin(parts["testbin"]), node_dir(parts["node"])
    except (TestbinError, NodeSetupError) as e:
        raise ClusterError(str(e)) from None
    for stale in ("ready.json", "failed.txt"):
        (state / stale).unlink(missing_ok=True)
    argv = [sys.executable, "-m", "devcluster.cluster", "serve", "--state", str(state), "--testbin", str(testbin),
            "--node-dir", str(node), "--kwok-nodes", str(kwok_nodes),
            *(["--image", parts["image"]] if image else [])]
    with open(state / "cluster.log", "ab") as log:
        proc = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    pidfiles.remember(state, SUPERVISOR, proc.pid)
    deadline = time.monotonic() + timeout
    while not (state / "ready.json").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            why = (state / "failed.txt").read_text() if (state / "failed.txt").exists() else \
                (state / "cluster.log").read_text(errors="replace")[-3000:]
            down(state)
            raise ClusterError(f"the cluster did not come up:\n{why}")
        time.sleep(0.3)
    facts = json.loads((state / "ready.json").read_text())
    facts["timings"] = {**parts["timings"], **facts["timings"], "total_s": round(time.monotonic() - t0, 1)}
    (state / "ready.json").write_text(json.dumps(facts, indent=1))
    return facts


def down(state: Path, say=print, timeout: float = 180) -> list[str]:
    """Signal the supervisor and wait for its teardown; then clear whatever a killed one left. Returns what
    is still alive (nothing, normally)."""
    was_up = pidfiles.alive(state, SUPERVISOR)
    # the supervisor alone: it drains the node and stops its children in order (a signal to the whole group would
    # stop the kubelet and containerd before they could take the pods' containers down)
    pidfiles.stop_all(pidfiles.files(state), grace=timeout, group=False)
    left = pidfiles.still_alive(state)
    facts = {}
    with contextlib.suppress(OSError, ValueError):
        facts = json.loads((state / "last-facts.json").read_text())
    if facts.get("testbin") and Path(facts["testbin"]).is_dir():
        cleanup_kube_proxy(Path(facts["testbin"]), state)  # no-op when the supervisor already did it
    pidfiles.forget(state)
    if was_up:
        say(f"stopped the cluster in {state}")
    return left


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m devcluster.cluster", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    up_p = sub.add_parser("up", help="build what is missing, start the cluster in the background")
    down_p = sub.add_parser("down", help="stop the cluster; nothing of it is left running")
    serve_p = sub.add_parser("serve", help=argparse.SUPPRESS)
    for q in (up_p, down_p, serve_p):
        q.add_argument("--state", type=Path, default=STATE, help=f"state directory (default {STATE})")
    for q in (up_p, serve_p):
        q.add_argument("--kwok-nodes", type=int, default=2, help="KWOK nodes beside the real one (default 2)")
    up_p.add_argument("--no-image", action="store_true", help="do not build or import the fgpu image")
    serve_p.add_argument("--testbin", type=Path, required=True)
    serve_p.add_argument("--node-dir", type=Path, required=True)
    serve_p.add_argument("--image", type=Path)
    args = p.parse_args(argv)
    state = args.state.resolve()
    if getattr(args, "kwok_nodes", 0) < 0:
        p.error(f"--kwok-nodes: {args.kwok_nodes} is not a count of nodes (0 or more)")
    if args.command == "serve":
        return serve(state, args.testbin, args.node_dir, args.image, args.kwok_nodes)
    if args.command == "down":
        left = down(state)
        if left:
            print(f"still running: {', '.join(left)}", file=sys.stderr)
            return 1
        print(f"cluster down: nothing of it is running (state {state})")
        return 0
    try:
        facts = up(state, args.kwok_nodes, not args.no_image)
    except ClusterError as e:
        print(f"cluster-up: {e}", file=sys.stderr)
        return 1
    (state / "last-facts.json").write_text(json.dumps(facts, indent=1))
    t = facts["timings"]
    print(f"cluster up in {t['total_s']:.0f} s ({', '.join(f'{k[:-2]} {v:.0f} s' for k, v in t.items() if k != 'total_s')})")
    print(f"  apiserver {facts['server']}; real node {facts['node']} ({facts['node_ip']}); image {facts['image']}")
    print(f"  export KUBECONFIG={facts['kubeconfig']}   # kubectl get nodes; helm install ...")
    print("  stop it: make cluster-down")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
