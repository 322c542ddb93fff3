"""One real Kubernetes node: containerd 2.x and a kubelet built by hack/testbin.sh (with Debian's runc and CNI
plugins), registered with a control plane (devcluster.kubeplane.ControlPlane). The e2e tests and
`make cluster-up` (devcluster.cluster) both run it.

The machine is prepared by hack/node-setup.sh (packages, containerd's CRI config, CNI config, the probe
image); its directory comes in as FGPU_NODE. This module starts a containerd of its own (root, state and
socket in a temp dir: no system service), imports the probe image into it, starts the kubelet, and on stop()
takes everything down again: pods, containers and their shims, mounts, network namespaces, the CNI bridge,
the kubelet's files in the fixed device-plugin directory. `leftovers()` lists whatever survived.

The device-plugin directory is fixed (/var/lib/kubelet/device-plugins), so one such node runs per machine at
a time: a lock file serialises concurrent test runs. Why each setting is what it is: docs/testing.md.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

from devcluster.kubeplane import Component, ComponentError, free_port, http_ok

DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")  # fixed in the kubelet
CHECKPOINT = DEVICE_PLUGIN_DIR / "kubelet_internal_checkpoint"
# The kubelet watches <root-dir>/plugins_registry for DRA (and CSI) plugins, and drivers put their own sockets in
# <root-dir>/plugins; a node's root dir is per run, so these standard paths are bind mounts of the run's dirs:
# a DRA driver with its default paths (the chart's) registers with this kubelet, and its sockets go with the run
KUBELET_PLUGIN_DIRS = {"plugins_registry": Path("/var/lib/kubelet/plugins_registry"),
                       "plugins": Path("/var/lib/kubelet/plugins")}
LOCK = Path("/run/fgpu-e2e-node.lock")
NETNS_DIR = Path("/run/netns")  # containerd's default for pod netns (ours go under its state dir instead)
MADE_VAR_LIB_KUBELET = Path("/run/fgpu-e2e-node.made-var-lib-kubelet")  # survives a killed run: remove it later
CNI_STATE = Path("/run/fgpu-e2e")  # host-local's dataDir (/run/fgpu-e2e/cni) in hack/node-setup.sh's conflist
NODE_ENV = "node.env"  # key=value facts hack/node-setup.sh wrote (image names, bridge)
K8S_NAMESPACE = "k8s.io"  # containerd namespace of the CRI plugin
CGROUPS = "/sys/fs/cgroup/*/k8s.io"  # containerd's cgroup parent for pods when the kubelet makes no QoS tree
RUN_PREFIX = "fgpu-rk"  # /tmp/fgpu-rkXXXXXXXX: one node's containerd root/state, kubelet root, sockets
TAINT = "fgpu.io/e2e-real-node"  # the test node's NoSchedule taint; pods meant for it tolerate it


class NodeSetupError(Exception):
    """This machine cannot run a real node; the message says what is missing and what to run."""


def node_dir(raw: str | None) -> Path:
    """The directory hack/node-setup.sh prints last (env FGPU_NODE), checked to be complete."""
    if os.geteuid() != 0:
        raise NodeSetupError("a real kubelet needs root (containerd, runc, mounts); run the tests as root")
    if not raw:
        raise NodeSetupError("FGPU_NODE is not set: run hack/node-setup.sh and export FGPU_NODE=<the directory it"
                             " prints last> (`make test` does both)")
    path = Path(raw)
    missing = [name for name in ("containerd.toml", "fgpu-probe.oci.tar", NODE_ENV, "net.d")
               if not (path / name).exists()]
    missing += [exe for exe in ("runc", "iptables-restore") if shutil.which(exe) is None]
    if missing:
        raise NodeSetupError(f"FGPU_NODE={raw}: missing {', '.join(missing)}; rerun hack/node-setup.sh")
    return path


def host_ip() -> str:
    """This machine's non-loopback IPv4 address: the node's InternalIP. (127.0.0.1 is refused as a node
    address, and `kubectl logs` then finds no address to reach the kubelet at.)"""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s, contextlib.suppress(OSError):
        s.connect(("192.0.2.255", 9))  # no packet is sent: this only picks the outgoing interface
        ip = s.getsockname()[0]
        if not ip.startswith("127."):
            return ip
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    ips = [a for a in out if "." in a and not a.startswith("127.")]
    if not ips:
        raise NodeSetupError("no non-loopback IPv4 address on this machine for the node's InternalIP")
    return ips[0]


def _mounts() -> list[str]:
    """Every mount point, deepest first (so unmounting in this order never hits a busy parent)."""
    points = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            points.append(line.split()[4].encode().decode("unicode_escape"))
    return sorted(points, key=len, reverse=True)


def _shims(address: Path) -> list[int]:
    """containerd-shim processes serving the containerd at `address` (their command line names it)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and b"containerd-shim" in argv[0] and str(address).encode() in argv:
            pids.append(int(entry.name))
    return pids


def _remove_cgroups(cgroups) -> None:
    """rmdir each cgroup and its children, deepest first; the kernel refuses any that still holds a process."""
    for cgroup in cgroups:
        for sub in sorted((d for d in cgroup.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
            with contextlib.suppress(OSError):
                sub.rmdir()
        with contextlib.suppress(OSError):
            cgroup.rmdir()


# The chains a kubelet makes on start (its iptables canary, the localnet firewall, the hint kube-proxy reads),
# in both iptables back ends; kube-proxy's own are removed by `kube-proxy --cleanup`.
KUBELET_CHAINS = ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT")
IPTABLES = ("iptables", "ip6tables", "iptables-legacy", "ip6tables-legacy")


def _iptables_rules(binary: str, table: str) -> list[str]:
    if shutil.which(binary) is None:
        return []
    out = subprocess.run([binary, "-w", "-t", table, "-S"], capture_output=True, text=True)
    return out.stdout.splitlines() if out.returncode == 0 else []


def kubelet_chains() -> list[str]:
    """The kubelet's chains still present, as `binary/table/chain`."""
    return [f"{b}/{t}/{line.split()[1]}" for b in IPTABLES for t in ("filter", "nat", "mangle")
            for line in _iptables_rules(b, t) if line.startswith("-N ") and line.split()[1] in KUBELET_CHAINS]


def remove_kubelet_chains() -> None:
    """Delete the jumps into the kubelet's chains, then the chains (a stopped node leaves no rule behind)."""
    for binary in IPTABLES:
        for table in ("filter", "nat", "mangle"):
            rules = _iptables_rules(binary, table)
            for line in rules:
                parts = line.split()
                if parts[0] == "-A" and "-j" in parts and parts[parts.index("-j") + 1] in KUBELET_CHAINS \
                        and parts[1] not in KUBELET_CHAINS:
                    subprocess.run([binary, "-w", "-t", table, "-D", *parts[1:]], capture_output=True)
            for line in rules:
                if line.startswith("-N ") and line.split()[1] in KUBELET_CHAINS:
                    subprocess.run([binary, "-w", "-t", table, "-F", line.split()[1]], capture_output=True)
                    subprocess.run([binary, "-w", "-t", table, "-X", line.split()[1]], capture_output=True)


def _kill_cgroup_processes(cgroups) -> None:
    """SIGKILL every process left in the pods' cgroups: a container outlives its shim when the shim is killed
    first (it is reparented to init), so its cgroup is what still names it."""
    for cgroup in cgroups:
        for procs in cgroup.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                for pid in procs.read_text().split():
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)


def _read_pids(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def _probe_processes() -> list[int]:
    """Processes running the probe image's program (a pod's container or a sandbox that outlived its pod)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "cmdline").read_bytes().split(b"\0")[0] == b"/fgpu-probe":
                    pids.append(int(entry.name))
    return pids


class RealNode:
    """containerd + kubelet for node `name`, against the control plane `plane`; logs in `logdir`.

    `taints`: what the node registers with (the tests' node keeps stray pods off with TAINT; a cluster's node
    takes any pod). With the plane's `detach`, the processes outlive this one (`make cluster-up`); `down()`
    in another process then clears what they left (`clear_stale`)."""

    def __init__(self, plane, node_dir: Path, logdir: Path, name: str = "fgpu-real-node",
                 taints: list[dict] | None = None, labels: dict[str, str] | None = None):
        self.plane = plane
        self.taints = [{"key": TAINT, "value": "true", "effect": "NoSchedule"}] if taints is None else taints
        self.labels = labels or {}
        self.node_dir = node_dir
        self.logdir = logdir
        self.name = name
        self.facts = dict(line.split("=", 1) for line in (node_dir / NODE_ENV).read_text().split())
        self.image = self.facts["image"]
        self.ip = host_ip()
        # short: unix socket paths are limited to 107 bytes, and containerd nests sockets deep in its state
        self.run = Path(tempfile.mkdtemp(prefix=RUN_PREFIX, dir="/tmp"))
        self.sock = self.run / "containerd.sock"
        self.root_dir = self.run / "kubelet"
        self.components: list[Component] = []
        self.healthz = ""
        self._lock = None
        self._netns_before: set[str] | None = None  # None: the directory did not exist
        self._made_var_lib_kubelet = False
        self._cgroups_before: set[Path] = set()
        self._stopped = False
        self._made_plugin_dirs: list[Path] = []

    # ---- start ---------------------------------------------------------------------------------------------
    def start(self, lock_timeout: float = 600) -> None:
        self._take_lock(lock_timeout)
        self._clear_stale()
        self._netns_before = set(os.listdir(NETNS_DIR)) if NETNS_DIR.is_dir() else None
        if not Path("/var/lib/kubelet").exists():
            MADE_VAR_LIB_KUBELET.touch()
        self._made_var_lib_kubelet = MADE_VAR_LIB_KUBELET.exists()
        self._cgroups_before = set(Path("/").glob(CGROUPS.lstrip("/")))
        self._bind_plugin_dirs()
        self._start_containerd()
        self._start_kubelet()

    def _take_lock(self, timeout: float) -> None:
        self._lock = open(LOCK, "w")  # noqa: SIM115 - held for the node's life
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ComponentError(f"another real-kubelet test holds {LOCK} (one per machine: the "
                                         f"device-plugin directory is fixed)") from None
                time.sleep(1)

    def _clear_stale(self) -> None:
        """What a run that was killed outright (no teardown) left: its shims and containers, mounts, run
        directory, CNI leases and the kubelet's checkpoint. Safe: we hold the lock, so no such run is alive."""
        stale = [d for d in Path("/tmp").glob(RUN_PREFIX + "*") if d != self.run and d.is_dir()]
        for run in stale:
            for pid in _shims(run / "containerd.sock"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for pid in _probe_processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _kill_cgroup_processes(Path("/").glob(CGROUPS.lstrip("/")))  # any other image's containers
        deadline = time.monotonic() + 10
        while _probe_processes() and time.monotonic() < deadline:  # gone before their cgroups are removed
            time.sleep(0.1)
        for standard in KUBELET_PLUGIN_DIRS.values():  # bound to a dead run's dirs
            while str(standard) in _mounts():
                if subprocess.run(["umount", "-l", str(standard)], capture_output=True).returncode:
                    break
        for run in stale:
            for point in _mounts():
                if point.startswith(f"{run}/"):
                    subprocess.run(["umount", "-l", point], capture_output=True)
            shutil.rmtree(run, ignore_errors=True)
        _remove_cgroups(Path("/").glob(CGROUPS.lstrip("/")))  # only empty ones go: rmdir refuses the others
        shutil.rmtree(CNI_STATE, ignore_errors=True)
        remove_kubelet_chains()
        for leftover in (DEVICE_PLUGIN_DIR / "kubelet.sock", CHECKPOINT):
            leftover.unlink(missing_ok=True)
        if DEVICE_PLUGIN_DIR.is_dir():  # plugins' sockets: their processes died with that run
            for sock in DEVICE_PLUGIN_DIR.iterdir():
                if sock.is_socket():
                    sock.unlink(missing_ok=True)

    def _bind_plugin_dirs(self) -> None:
        """The kubelet's plugin dirs (KUBELET_PLUGIN_DIRS) at their standard paths, bound to this run's."""
        for sub, standard in KUBELET_PLUGIN_DIRS.items():
            (self.root_dir / sub).mkdir(parents=True, exist_ok=True)
            if not standard.exists():
                standard.mkdir(parents=True)
                self._made_plugin_dirs.append(standard)
            done = subprocess.run(["mount", "--bind", str(self.root_dir / sub), str(standard)],
                                  capture_output=True, text=True)
            if done.returncode:
                raise ComponentError(f"mount --bind {self.root_dir / sub} {standard}: {done.stderr.strip()}")

    def _launch(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Component:
        comp = Component(name, argv, self.logdir / f"{name}.log", self.plane.detach, env=env)
        (self.logdir / f"{name}.argv").write_text(" \\\n  ".join(argv) + "\n")
        comp.start()
        self.components.append(comp)
        return comp

    def ctr(self, *args: str, timeout: float = 60) -> str:
        out = subprocess.run([str(self.plane.testbin / "ctr"), "--address", str(self.sock), "-n", K8S_NAMESPACE, *args],
                             capture_output=True, text=True, timeout=timeout)
        if out.returncode:
            raise ComponentError(f"ctr {' '.join(args)}: {out.stderr.strip() or out.stdout.strip()}")
        return out.stdout

    def _start_containerd(self) -> None:
        # containerd finds its runc shim on PATH: testbin's, built with it (not Debian's 1.6 one, if installed)
        env = {**os.environ, "PATH": f"{self.plane.testbin}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        comp = self._launch("containerd", [
            str(self.plane.testbin / "containerd"), "--config", str(self.node_dir / "containerd.toml"), "--root", str(self.run / "root"),
            "--state", str(self.run / "state"), "--address", str(self.sock), "--log-level", "info"], env)
        comp.wait_ready(lambda: self.sock.is_socket() and self._ctr_ok(), 60, "its socket answering")
        self.import_image(self.node_dir / "fgpu-probe.oci.tar")

    def import_image(self, archive: Path, timeout: float = 600) -> None:
        """Load an OCI/docker archive into the node's image store, as `kind load image-archive` does."""
        self.ctr("images", "import", "--all-platforms", str(archive), timeout=timeout)

    def _ctr_ok(self) -> bool:
        try:
            self.ctr("version", timeout=5)
        except (ComponentError, subprocess.TimeoutExpired):
            return False
        return True

    def kubelet_config(self) -> dict:
        port, self.healthz_port = free_port(), free_port()
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # cgroup v1 machines (Firecracker VMs here): kubelet >= 1.35 refuses them unless told otherwise
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",  # no systemd
            "cgroupsPerQOS": False,  # no QoS cgroup tree to build or clean up
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.sock}",
            "evictionHard": {},  # {} (not null): no eviction thresholds on a shared CI disk
            "localStorageCapacityIsolation": False,
            "address": self.ip,  # the apiserver reaches the kubelet (logs) at the node's InternalIP
            "port": port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.healthz_port,
            # test only: the test apiserver has no kubelet client certificate; a cluster uses webhook authn/authz
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "podLogsDir": str(self.run / "pod-logs"),
            "nodeStatusUpdateFrequency": "2s",  # capacity from the device plugin shows up quickly
            "registerNode": True,
            # the tests' node: only pods that ask for it land on it (in a whole-suite run, a stray pending pod bound
            # here by a scheduler would take the node's devices, and never start: its image cannot be pulled)
            "registerWithTaints": self.taints,
            "serializeImagePulls": False,
        }

    def _start_kubelet(self) -> None:
        cfg = self.logdir / "kubelet.config.yaml"
        cfg.write_text(yaml.safe_dump(self.kubelet_config(), sort_keys=False))
        self.root_dir.mkdir(exist_ok=True)
        comp = self._launch("kubelet", [
            str(self.plane.testbin / "kubelet"), f"--config={cfg}", f"--kubeconfig={self.plane.kubeconfig}",
            f"--root-dir={self.root_dir}", f"--cert-dir={self.root_dir / 'pki'}", f"--hostname-override={self.name}", f"--node-ip={self.ip}", "--v=2",
            *([f"--node-labels={','.join(f'{k}={v}' for k, v in sorted(self.labels.items()))}"] if self.labels else [])])
        comp.wait_ready(lambda: http_ok(f"http://127.0.0.1:{self.healthz_port}/healthz"), 90, "/healthz answering")

    def restart_kubelet(self, timeout: float = 90) -> None:
        """Stop the kubelet (SIGTERM, as a service manager would) and start it again with the same flags; the
        containers it started keep running under containerd meanwhile. Returns once /healthz answers."""
        kubelet = next(c for c in self.components if c.name == "kubelet")
        kubelet.stop()
        kubelet.start()
        kubelet.wait_ready(lambda: http_ok(f"http://127.0.0.1:{self.healthz_port}/healthz"), timeout,
                           "/healthz answering after a restart")

    def wait_ready(self, timeout: float = 120) -> dict:
        """Wait until the Node is Ready, and lift the not-ready taint it was created with (the node lifecycle
        controller's job, and the controller-manager may not run); returns the Node as a dict."""
        from kubernetes import client

        kubelet = self.components[-1]
        deadline = time.monotonic() + timeout
        last = None
        with self.plane.api() as api:
            core = client.CoreV1Api(api)
            while time.monotonic() < deadline:
                if not kubelet.alive():
                    raise ComponentError(f"kubelet exited with {kubelet.proc.returncode}; {kubelet.log_path}:\n"
                                         f"{kubelet.tail()}")
                try:
                    last = json.loads(core.read_node(self.name, _preload_content=False).data)
                except client.ApiException as e:
                    if e.status != 404:
                        raise
                    time.sleep(0.5)
                    continue
                conditions = {c["type"]: c for c in last["status"].get("conditions", [])}
                taints = last["spec"].get("taints") or []
                if conditions.get("Ready", {}).get("status") == "True":
                    if not any(t["key"] == "node.kubernetes.io/not-ready" for t in taints):
                        return last
                    keep = [t for t in taints if t["key"] != "node.kubernetes.io/not-ready"]
                    core.patch_node(self.name, {"spec": {"taints": keep or None}})
                time.sleep(0.5)
        ready = (last or {}).get("status", {}).get("conditions")
        raise ComponentError(f"node {self.name} not Ready after {timeout:.0f} s: {json.dumps(ready)}\n"
                             f"{kubelet.tail()}")

    def log_tails(self, lines: int = 40) -> str:
        return "\n".join(f"----- {c.name} ({c.log_path}) -----\n{c.tail(lines)}" for c in self.components)

    # ---- stop ----------------------------------------------------------------------------------------------
    def containers(self) -> list[str]:
        return self.ctr("containers", "ls", "-q").split() if self.sock.is_socket() else []

    def tasks(self) -> list[str]:
        """Running containers (pods' and sandboxes')."""
        return self.ctr("tasks", "ls", "-q").split() if self.sock.is_socket() else []

    def stop(self, pod_timeout: float = 60) -> None:
        """Delete the node's pods and let the kubelet tear them down (volumes unmounted, sandboxes and their
        network removed); then stop the kubelet, kill what is left in containerd, stop it and its shims, and
        clear mounts, network namespaces, the bridge and the kubelet's device-plugin files. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self._drain(pod_timeout)
        finally:
            self._teardown()

    def _drain(self, timeout: float) -> None:
        from kubernetes import client

        kubelet = next((c for c in self.components if c.name == "kubelet"), None)
        if kubelet is None or not kubelet.alive():
            return
        with self.plane.api() as api:
            core = client.CoreV1Api(api)
            pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.name}").items
            for pod in pods:
                with contextlib.suppress(client.ApiException):
                    # SIGTERM first: a pod's process that cleans up after itself (the node daemon removes its socket
                    # from the host) gets to; the kubelet kills it 5 s later at the latest
                    core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=5)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                left = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.name}").items
                # stopped: volumes unmounted, sandbox network and namespace gone; the kubelet's garbage
                # collector would remove the dead containers only a minute later, ctr does it below
                if not left and not self.tasks():
                    break
                time.sleep(0.5)
            with contextlib.suppress(client.ApiException):
                core.delete_node(self.name)

    def _teardown(self) -> None:
        for comp in reversed(self.components):
            if comp.name == "kubelet":
                comp.stop()
        if any(c.alive() for c in self.components if c.name == "containerd"):
            with contextlib.suppress(ComponentError, subprocess.TimeoutExpired):
                for task in self.tasks():
                    with contextlib.suppress(ComponentError):
                        self.ctr("tasks", "kill", "-s", "SIGKILL", task)
                    with contextlib.suppress(ComponentError):
                        self.ctr("tasks", "delete", "-f", task)
                for container in self.containers():
                    with contextlib.suppress(ComponentError):
                        self.ctr("containers", "delete", container)
        for comp in reversed(self.components):
            comp.stop()
        for pid in _shims(self.sock):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _kill_cgroup_processes(self._new_cgroups())
        time.sleep(0.2)  # the kernel reaps them before their cgroups can go
        self._unmount_all()
        for made in self._made_plugin_dirs:
            with contextlib.suppress(OSError):
                made.rmdir()
        _remove_cgroups(self._new_cgroups())  # empty by now: runc removed each container's own
        for ns in self._new_netns():
            (NETNS_DIR / ns).unlink(missing_ok=True)
        if self._netns_before is None:
            with contextlib.suppress(OSError):
                NETNS_DIR.rmdir()
        bridge = self.facts.get("bridge")
        if bridge and Path(f"/sys/class/net/{bridge}").exists():
            subprocess.run(["ip", "link", "delete", bridge], capture_output=True)
        shutil.rmtree(CNI_STATE, ignore_errors=True)
        remove_kubelet_chains()
        for leftover in (DEVICE_PLUGIN_DIR / "kubelet.sock", CHECKPOINT):
            leftover.unlink(missing_ok=True)
        if self._made_var_lib_kubelet:
            shutil.rmtree("/var/lib/kubelet", ignore_errors=True)
            MADE_VAR_LIB_KUBELET.unlink(missing_ok=True)
        shutil.rmtree(self.run, ignore_errors=True)
        if self._lock is not None:
            self._lock.close()  # releases the flock
            self._lock = None

    def _ours(self, point: str) -> bool:
        return point.startswith(str(self.run) + "/") or point in map(str, KUBELET_PLUGIN_DIRS.values()) or (
            point.startswith(str(NETNS_DIR) + "/") and Path(point).name not in (self._netns_before or set()))

    def _unmount_all(self) -> None:
        for point in _mounts():
            if self._ours(point):
                subprocess.run(["umount", "-l", point], capture_output=True)

    def _new_cgroups(self) -> list[Path]:
        return sorted(set(Path("/").glob(CGROUPS.lstrip("/"))) - self._cgroups_before)

    def _new_netns(self) -> list[str]:
        return sorted(set(os.listdir(NETNS_DIR)) - (self._netns_before or set())) if NETNS_DIR.is_dir() else []

    def leftovers(self) -> list[str]:
        """Whatever this node left on the machine: processes, mounts, sockets, network namespaces, files."""
        found = [f"process {c.name} (pid {c.proc.pid})" for c in self.components if c.alive()]
        found += [f"shim pid {pid}" for pid in _shims(self.sock)]
        found += [f"mount {p}" for p in _mounts() if self._ours(p)]
        found += [f"netns {ns}" for ns in self._new_netns()]
        found += [f"cgroup {cg}" for cg in self._new_cgroups()]
        found += [f"file {p}" for p in (DEVICE_PLUGIN_DIR / "kubelet.sock", CHECKPOINT, self.run, CNI_STATE,
                                        MADE_VAR_LIB_KUBELET)
                  if p.exists()]
        if DEVICE_PLUGIN_DIR.is_dir():
            found += [f"socket {p}" for p in DEVICE_PLUGIN_DIR.iterdir() if p.is_socket()]
        if self._made_var_lib_kubelet and Path("/var/lib/kubelet").exists():
            found.append("directory /var/lib/kubelet")
        found += [f"container process pid {pid}" for pid in _probe_processes()]
        found += [f"container process pid {pid} (cgroup {cg})" for cg in self._new_cgroups()
                  for procs in cg.rglob("cgroup.procs") for pid in _read_pids(procs)]
        bridge = self.facts.get("bridge")
        if bridge and Path(f"/sys/class/net/{bridge}").exists():
            found.append(f"interface {bridge}")
        found += [f"iptables chain {c}" for c in kubelet_chains()]
        return found
