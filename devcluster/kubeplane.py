"""A real Kubernetes control plane for e2e tests: etcd + kube-apiserver, and on request
kube-controller-manager, kube-scheduler and KWOK, each a child process on loopback.

No pytest here (tests/e2e/conftest.py wraps it in fixtures), so the lifecycle can be read and reused on its
own. Binaries come from the directory `make testbin` prints (env FGPU_TESTBIN). Why the flags are what they
are: docs/testing.md.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import yaml

BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubelet", "etcd", "kwok",
            "helm", "containerd", "ctr", "containerd-shim-runc-v2")
KWOK_STAGES = "kwok-stages.yaml"  # upstream KWOK stage definitions, copied there by hack/testbin.sh
KWOK_LEASE_STAGE = "kwok-stage-node-heartbeat-with-lease.yaml"  # the kubelet-like heartbeat, the same way
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
SERVICE_CIDR = "10.0.0.0/24"
# Defaults of a fake node; the caller's capacity is merged on top (and mirrored into allocatable).
BASE_NODE_CAPACITY = {"cpu": "32", "memory": "256Gi", "pods": "110"}


class TestbinError(Exception):
    """FGPU_TESTBIN is missing or incomplete; the message says what to do."""


class ComponentError(Exception):
    """A control-plane process did not start or did not become ready; the message carries its log tail."""


def find_testbin(raw: str | None) -> Path:
    """The testbin directory named by FGPU_TESTBIN, checked to hold every executable."""
    if not raw:
        raise TestbinError(
            "FGPU_TESTBIN is not set: run `make testbin` and export FGPU_TESTBIN=<the directory it prints last>"
            " (`make test` does both)"
        )
    path = Path(raw).expanduser()
    if not path.is_dir():
        raise TestbinError(f"FGPU_TESTBIN={raw} is not a directory; `make testbin` prints the right one")
    missing = [b for b in BINARIES if not os.access(path / b, os.X_OK)]
    missing += [f for f in (KWOK_STAGES, KWOK_LEASE_STAGE) if not (path / f).is_file()]
    if missing:
        raise TestbinError(
            f"FGPU_TESTBIN={raw} lacks {', '.join(missing)}; rebuild it with `make testbin`"
        )
    return path.resolve()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the process binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """Child-side: get SIGTERM if pytest dies, so no control-plane process outlives the test run."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


die_with_parent = _die_with_parent  # for the subprocesses of other test helpers (operator, plugin)


def probe_context() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # probes and bench scrapes only; clients verify through the kubeconfig's CA
    return ctx


def http_ok(url: str, token: str | None = None, timeout: float = 2.0) -> bool:
    """True if GET url answers 200."""
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=probe_context()) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


class Component:
    """One control-plane process, its argv and its log file."""

    def __init__(self, name: str, argv: list[str], log_path: Path, detach: bool = False,
                 env: dict[str, str] | None = None):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env  # None: this process's environment
        self.detach = detach  # a session of its own that outlives the parent (the demo's cluster)
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it for its whole life
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=self.detach,
                preexec_fn=None if self.detach else _die_with_parent,
            )
        finally:
            log.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        if not self.alive():
            return
        assert self.proc is not None
        self.proc.terminate()
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])

    def wait_ready(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll check() until true; fail early if the process exits, naming its log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                code = self.proc.returncode if self.proc else None
                raise ComponentError(
                    f"{self.name} exited with code {code} before {what}; log {self.log_path}:\n{self.tail()}"
                )
            if check():
                return
            time.sleep(0.2)
        raise ComponentError(f"{self.name}: no {what} after {timeout:.0f} s; log {self.log_path}:\n{self.tail()}")


class ControlPlane:
    """etcd + kube-apiserver, plus optional controller-manager, scheduler and KWOK.

    `start()` brings up etcd and the apiserver and writes `kubeconfig` (admin: a static bearer token in
    group system:masters, RBAC on); `start_*()` add the optional parts; `stop()` stops them in reverse
    order, the apiserver before etcd.
    """

    def __init__(self, testbin: Path, workdir: Path, datadir: Path, detach: bool = False,
                 address: str = "127.0.0.1"):
        self.testbin = testbin
        # where the apiserver is reached: loopback for tests of the API alone; the host's own address for a
        # cluster whose pods call it (through the `kubernetes` Service, whose endpoint is this address)
        self.address = address
        self.detach = detach  # processes outlive this one (see Component); stop() still stops them
        self.workdir = workdir  # logs, certificates, kubeconfig: kept after the run for post-mortems
        self.datadir = datadir  # etcd's data: large, removed by the caller
        self.token = secrets.token_hex(16)
        self.components: list[Component] = []
        self.server = ""
        self.kubeconfig = workdir / "admin.kubeconfig"
        self.scheduler_url = ""  # kube-scheduler's https://host:port once started (/metrics open to all)
        self._by_name: dict[str, Component] = {}

    # ---- helpers -------------------------------------------------------------------------------------
    def bin(self, name: str) -> str:
        """Absolute path of one testbin executable (kube-apiserver, etcd, kwok, helm, ...)."""
        if name not in BINARIES:
            raise ValueError(f"unknown binary {name!r}; allowed: {', '.join(BINARIES)}")
        return str(self.testbin / name)

    def api(self):
        """A new kubernetes.client.ApiClient logged in as the admin (close it, or use it as a context)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def metrics_text(self) -> str:
        """kube-apiserver's /metrics (Prometheus text), read as the admin: what it served, for benchmarks."""
        req = urllib.request.Request(f"{self.server}/metrics", headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(req, timeout=30, context=probe_context()) as resp:
            return resp.read().decode()

    def running(self, name: str) -> bool:
        comp = self._by_name.get(name)
        return comp is not None and comp.alive()

    def log_tails(self, lines: int = 30) -> str:
        """The last lines of every component's log, for failure reports."""
        return "\n".join(
            f"----- {c.name} ({c.log_path}) -----\n{c.tail(lines)}" for c in self.components
        )

    def _launch(self, name: str, argv: list[str]) -> Component:
        comp = Component(name, argv, self.workdir / f"{name}.log", self.detach)
        (self.workdir / f"{name}.argv").write_text(" \\\n  ".join(argv) + "\n")
        comp.start()
        self.components.append(comp)
        self._by_name[name] = comp
        return comp

    # ---- etcd + apiserver ----------------------------------------------------------------------------
    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._start_etcd()
        self._start_apiserver()
        self._write_kubeconfig()
        self._ensure_default_service_account()

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        etcd = self._launch("etcd", [
            self.bin("etcd"),
            "--name=default",
            f"--data-dir={self.datadir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=default=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync",  # test data: durability is not the point, speed on a shared disk is
            "--log-level=warn",
        ])
        etcd.wait_ready(lambda: http_ok(f"{self.etcd_url}/health"), 30, "/health answering")

    def _start_apiserver(self) -> None:
        certs = self.workdir / "certs"
        certs.mkdir(exist_ok=True)
        sa_key = self.workdir / "sa.key"
        _generate_rsa_key(sa_key)
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(f'{self.token},admin,admin,"system:masters"\n')
        tokens.chmod(0o600)
        port = free_port()
        self.server = f"https://{self.address}:{port}"
        self.ca_file = certs / "apiserver.crt"  # self-signed by the apiserver: its cert then its CA
        loopback = self.address.startswith("127.")
        apiserver = self._launch("kube-apiserver", [
            self.bin("kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            # The self-signed serving certificate names the advertise address and the `kubernetes` Service's
            # ClusterIP (the first of the range), so clients in pods verify it as they would on kind.
            f"--bind-address={'127.0.0.1' if loopback else '0.0.0.0'}",
            f"--advertise-address={self.address}",
            f"--secure-port={port}",
            f"--cert-dir={certs}",
            f"--token-auth-file={tokens}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={sa_key}",
            f"--service-account-signing-key-file={sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            # a loopback advertise address is not a valid Endpoints address: then don't reconcile `kubernetes`
            *(["--endpoint-reconciler-type=none"] if loopback else []),
            # the real-kubelet node's Hostname address is a name no DNS resolves: reach kubelets by IP
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--profiling=false",
        ])
        apiserver.wait_ready(lambda: http_ok(f"{self.server}/readyz", self.token), 120, "/readyz answering ok")

    def _write_kubeconfig(self) -> None:
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fgpu-e2e", "cluster": {
                "server": self.server, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "fgpu-e2e", "context": {"cluster": "fgpu-e2e", "user": "admin"}}],
            "current-context": "fgpu-e2e",
        }
        self.kubeconfig.write_text(yaml.safe_dump(cfg, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    def _ensure_default_service_account(self, namespace: str = "default", timeout: float = 30) -> None:
        """The ServiceAccount admission plugin refuses pods in a namespace without `default` SA; the
        controller-manager creates it, but it may not be running, so do it here (idempotently)."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        with self.api() as api:
            core = client.CoreV1Api(api)
            deadline = time.monotonic() + timeout
            while True:
                try:
                    core.create_namespaced_service_account(
                        namespace, {"metadata": {"name": "default"}})
                    return
                except ApiException as e:
                    if e.status == 409:
                        return
                    # 404/403: the namespace is not there yet (the apiserver creates `default` itself)
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)

    def create_namespace(self, name: str, labels: dict[str, str] | None = None) -> str:
        """Create a namespace that can take pods at once (its `default` ServiceAccount exists)."""
        from kubernetes import client

        with self.api() as api:
            client.CoreV1Api(api).create_namespace(
                {"metadata": {"name": name, "labels": labels or {}}})
        self._ensure_default_service_account(name)
        return name

    # ---- optional components -------------------------------------------------------------------------
    def start_controller_manager(self, qps: float | None = None, burst: int | None = None) -> None:
        """kube-controller-manager; with `qps`/`burst`, its client's rate limit (--kube-api-qps/-burst; its
        default of 20/30 paces, e.g., the ResourceClaims it makes from templates)."""
        if self.running("kube-controller-manager"):
            return
        port = free_port()
        limits = [*([f"--kube-api-qps={qps:g}"] if qps is not None else []),
                  *([f"--kube-api-burst={burst}"] if burst is not None else [])]
        cm = self._launch("kube-controller-manager", [
            self.bin("kube-controller-manager"),
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--service-account-private-key-file={self.workdir / 'sa.key'}",
            f"--root-ca-file={self.ca_file}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--cluster-name=fgpu-e2e",
            "--profiling=false",
            *limits,
        ])
        cm.wait_ready(lambda: http_ok(f"https://127.0.0.1:{port}/healthz"), 90, "/healthz answering ok")

    def start_scheduler(self, qps: float | None = None, burst: int | None = None,
                        nodes_to_score: int | None = None) -> None:
        """kube-scheduler; with `qps`/`burst`, its client's rate limit, with `nodes_to_score` its
        percentageOfNodesToScore (both through a KubeSchedulerConfiguration file, the only way to set them),
        otherwise its defaults (QPS 50, burst 100; a share of the nodes that falls with the cluster's size)."""
        if self.running("kube-scheduler"):
            return
        port = free_port()
        config = []
        if qps is not None or burst is not None or nodes_to_score is not None:
            path = self.workdir / "kube-scheduler.config.yaml"
            client = {"kubeconfig": str(self.kubeconfig), **({"qps": qps} if qps is not None else {}),
                      **({"burst": burst} if burst is not None else {})}
            scoring = {"percentageOfNodesToScore": nodes_to_score} if nodes_to_score is not None else {}
            path.write_text(yaml.safe_dump({
                "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                "clientConnection": client, "leaderElection": {"leaderElect": False}, **scoring}, sort_keys=False))
            config = [f"--config={path}"]  # it then ignores --kubeconfig and --leader-elect
        sched = self._launch("kube-scheduler", [
            self.bin("kube-scheduler"),
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            *config,
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "--profiling=false",
            # /metrics readable without a token (it has no delegated authentication here), for bench scrapes
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        ])
        sched.wait_ready(lambda: http_ok(f"https://127.0.0.1:{port}/readyz"), 90, "/readyz answering ok")
        self.scheduler_url = f"https://127.0.0.1:{port}"

    def start_kube_proxy(self, node_name: str, cluster_cidr: str) -> None:
        """kube-proxy in iptables mode on this host, as kind runs it on each node: ClusterIP Services then work
        from pods and from this host (the apiserver calls the webhook through its Service). Its conntrack
        limits are left as they are (maxPerCore 0, as kind does): it may not write those sysctls here.
        `stop()` runs `kube-proxy --cleanup`, so no NAT rule outlives it."""
        if self.running("kube-proxy"):
            return
        health, metrics = free_port(), free_port()
        path = self.workdir / "kube-proxy.config.yaml"
        path.write_text(yaml.safe_dump({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig)}, "mode": "iptables",
            "clusterCIDR": cluster_cidr, "hostnameOverride": node_name,
            "conntrack": {"maxPerCore": 0}, "healthzBindAddress": f"127.0.0.1:{health}",
            "metricsBindAddress": f"127.0.0.1:{metrics}"}, sort_keys=False))
        proxy = self._launch("kube-proxy", [self.bin("kube-proxy"), f"--config={path}", "--v=1"])
        proxy.wait_ready(lambda: http_ok(f"http://127.0.0.1:{health}/healthz"), 60, "/healthz answering ok")

    def cleanup_kube_proxy(self) -> None:
        """Remove kube-proxy's iptables chains and rules (`kube-proxy --cleanup`)."""
        cleanup_kube_proxy(self.testbin, self.workdir)

    def start_kwok(self, stages: Path | None = None, node_lease_seconds: int = 0) -> None:
        """KWOK manages nodes annotated kwok.x-k8s.io/node=fake (marks them Ready, heartbeats them) and runs
        the pods bound to them (Pending -> Running, pod IPs), with the upstream stages from testbin or the
        stage definitions in `stages`. With `node_lease_seconds`, KWOK also keeps each node's Lease in
        kube-node-lease as a kubelet does (renewed every quarter of that)."""
        if self.running("kwok"):
            return
        port = free_port()
        key, value = KWOK_NODE_ANNOTATION
        kwok = self._launch("kwok", [
            self.bin("kwok"),
            f"--kubeconfig={self.kubeconfig}",
            f"--config={stages or self.testbin / KWOK_STAGES}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={key}={value}",
            "--cidr=10.244.0.0/16",
            "--node-ip=10.0.1.1",
            f"--server-address=127.0.0.1:{port}",
            *([f"--node-lease-duration-seconds={node_lease_seconds}"] if node_lease_seconds else []),
        ])
        kwok.wait_ready(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 60, "/healthz answering ok")

    def make_kwok_node(
        self,
        name: str,
        capacity: dict[str, str | int],
        labels: dict[str, str] | None = None,
        timeout: float = 30,
    ):
        """Create a fake node KWOK manages, with `capacity` (merged over 32 CPUs / 256Gi / 110 pods) in both
        capacity and allocatable; wait until it is Ready and schedulable (no not-ready taint).
        Returns the V1Node."""
        from kubernetes import client

        self.make_kwok_nodes([name], capacity, labels=labels, timeout=timeout)
        with self.api() as api:
            return client.CoreV1Api(api).read_node(name)

    def make_kwok_nodes(
        self,
        names: list[str],
        capacity: dict[str, str | int],
        labels: dict[str, str] | None = None,
        annotations: Callable[[str], dict[str, str]] | None = None,
        timeout: float | None = None,
    ) -> None:
        """`make_kwok_node` for many nodes at once (a benchmark's thousand): all are created, then waited for
        together, so the cost is one create per node plus a few list calls. `annotations(name)` adds
        annotations to a node (e.g. its GPU inventory). `timeout` defaults to 30 s + 50 ms per node."""
        from kubernetes import client

        self.start_kwok()
        resources = {**BASE_NODE_CAPACITY, **{k: str(v) for k, v in capacity.items()}}
        key, value = KWOK_NODE_ANNOTATION
        timeout = 30 + 0.05 * len(names) if timeout is None else timeout
        with self.api() as api:
            core = client.CoreV1Api(api)
            for name in names:
                core.create_node({
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "annotations": {key: value, "node.alpha.kubernetes.io/ttl": "0",
                                        **(annotations(name) if annotations else {})},
                        "labels": {
                            "type": "kwok",
                            "kubernetes.io/hostname": name,
                            "kubernetes.io/os": "linux",
                            "kubernetes.io/arch": "amd64",
                            **(labels or {}),
                        },
                    },
                    "status": {"capacity": resources, "allocatable": dict(resources)},
                })
            waiting, untainted = set(names), set()
            deadline = time.monotonic() + timeout
            while True:
                listed = json.loads(core.list_node(_preload_content=False).data)["items"]
                nodes = {n["metadata"]["name"]: n for n in listed if n["metadata"]["name"] in waiting}
                for name, node in nodes.items():
                    conditions = (node.get("status") or {}).get("conditions") or []
                    taints = (node.get("spec") or {}).get("taints") or []
                    if not any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                        continue
                    if not any(t["key"] == NOT_READY_TAINT for t in taints):
                        waiting.discard(name)
                    elif name not in untainted:
                        # The TaintNodesByCondition admission plugin taints every new node not-ready; only the
                        # controller-manager lifts it, and it may not be running. KWOK made the node Ready, so
                        # lifting it here is what the controller-manager would do.
                        keep = [t for t in taints if t["key"] != NOT_READY_TAINT]
                        core.patch_node(name, {"spec": {"taints": keep or None}})
                        untainted.add(name)
                if not waiting:
                    return
                if time.monotonic() > deadline:
                    name = sorted(waiting)[0]
                    node = nodes.get(name) or {}
                    raise ComponentError(
                        f"{len(waiting)} of {len(names)} KWOK nodes not Ready and untainted after {timeout:.0f} s,"
                        f" e.g. {name}: conditions={json.dumps((node.get('status') or {}).get('conditions'))}"
                        f" taints={[t['key'] for t in (node.get('spec') or {}).get('taints') or []]}\n"
                        f"{self._by_name['kwok'].tail()}"
                    )
                time.sleep(0.2 if len(names) < 20 else 1.0)

    def pid(self, name: str) -> int | None:
        """The process id of a running component (to read its memory or CPU time), or None."""
        comp = self._by_name.get(name)
        return comp.proc.pid if comp is not None and comp.alive() and comp.proc is not None else None

    def restart(self, name: str, down_s: float = 0.0, kill: bool = False) -> float:
        """Stop one component (SIGTERM, or SIGKILL with `kill`), leave it down `down_s` seconds, start it again
        with the same argv (same ports, same data) and wait until it answers; returns the seconds it was
        unavailable. For the fault tests: kube-apiserver or etcd restarted under load."""
        comp = self._by_name[name]
        started = time.monotonic()
        if kill and comp.alive():
            comp.proc.kill()
            comp.proc.wait(10)
        comp.stop()
        time.sleep(down_s)
        comp.start()
        probes = {"etcd": lambda: http_ok(f"{self.etcd_url}/health"),
                  "kube-apiserver": lambda: http_ok(f"{self.server}/readyz", self.token)}
        comp.wait_ready(probes.get(name, comp.alive), 120, "answering again after a restart")
        return time.monotonic() - started

    def stop_component(self, name: str) -> None:
        """Stop one optional component (e.g. kube-scheduler, to start it again with other settings)."""
        comp = self._by_name.pop(name, None)
        if comp is not None:
            comp.stop()
            self.components.remove(comp)

    def stop(self) -> None:
        """Stop everything, newest first: KWOK/scheduler/controller-manager, then the apiserver, then etcd;
        kube-proxy's rules go with it."""
        for comp in reversed(self.components):
            comp.stop()
        if "kube-proxy" in self._by_name:
            self.cleanup_kube_proxy()


def cleanup_kube_proxy(testbin: Path, logdir: Path) -> None:
    """`kube-proxy --cleanup`: its KUBE-* chains and rules removed (also after a kill, from another process)."""
    with open(logdir / "kube-proxy-cleanup.log", "ab") as log:
        subprocess.run([str(testbin / "kube-proxy"), "--cleanup", "--v=1"], stdin=subprocess.DEVNULL, stdout=log,
                       stderr=subprocess.STDOUT, timeout=60, check=False)


def _generate_rsa_key(path: Path) -> None:
    """The service-account signing key (openssl is in every Debian/Ubuntu base image)."""
    try:
        subprocess.run(
            ["openssl", "genrsa", "-out", str(path), "2048"],
            check=True, capture_output=True, timeout=60,
        )
    except FileNotFoundError as e:
        raise ComponentError("the `openssl` command is needed to make the service-account key") from e
    except subprocess.CalledProcessError as e:
        raise ComponentError(f"openssl genrsa failed: {e.stderr.decode(errors='replace').strip()}") from e
    path.chmod(0o600)
