"""Faults under load, one engine for the fault e2e tests (tests/e2e/test_faults.py, the CI profile) and the soak
(bench/chaos.py): a churn of fractional pods created and deleted at a steady rate on KWOK GPU nodes, two
`fgpu operator` replicas electing a leader, and faults injected one after another:

- operator-sigkill: the leader SIGKILLed and restarted at once (it takes its own lease back);
- leader-kill: the leader SIGKILLed and left down until the standby leads, then restarted as the standby;
- apiserver-restart / etcd-restart: kube-apiserver (or etcd) stopped, down 2 s, started again;
- conflicts: another client rewriting the churn's pods (read-modify-PUT on their resourceVersion) for a while,
  so writes race and some get 409;
- gpu-unhealthy: a GPU holding shares marked unhealthy (XID 79) in its node's inventory;
- node-deleted: a node holding pods deleted, then its pods (what the pod garbage collector does);
- plugin-restart / kubelet-restart / daemon-restart: on the one node that runs real processes (devcluster.realnode:
  a simgpu node daemon, fgpu-device-plugin and the stub kubelet), one of them SIGKILLed and started again while
  workloads hold live contexts opened with the tokens Allocate issued (devcluster.contexts). The plugin must
  register again and Allocate new pods, the kubelet's restart must bring the plugin back, open contexts must not
  notice either; a killed daemon must fail its contexts' next call with an error naming it, and the workloads
  reopen theirs with the same tokens. After each, every workload's quota is checked: what it holds counted once,
  the rest still there, not a byte more.

After every fault, and every `check_every_s`, the invariant checker (fgpu_operator.inspect.audit, the one
`fgpu inspect check` runs) reads the cluster, with what the real node handed out (its Allocate records' tokens,
its daemon's open contexts); nothing may be placed on a GPU after it went unhealthy or on a
node after it was deleted. When the churn stops every pod left must be bound (capacity is ample: a pending
pod would be a share lost). Recovery of a fault: from the moment it is done (the operator killed; the apiserver
or etcd answering again; the GPU marked, the node deleted) until a pod created after that is bound: for a
killed operator that includes its restart (or the standby's takeover). For a process of the real node: from its
SIGKILL until the stub kubelet gets an Allocate answered (plugin, kubelet) or every workload has its context back
(daemon); a pod created after each must be Allocate'd there and open a context with its token (checked at the
next node fault or the end, not timed: its scheduling waits behind the churn's backlog).
"""
from __future__ import annotations

import base64
import contextlib
import json
import random
import secrets
import signal
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from fgpu_operator.inspect.audit import check, handed_from_daemon_metrics, handed_from_env
from inventories import fractional_inventory
from operator_proc import share_pod, start_operator, stop

from devcluster.contexts import WorkloadProc
from devcluster.realnode import RealNode
from fgpu_contracts import keys

NODE_KINDS = ("plugin-restart", "kubelet-restart", "daemon-restart")  # on the real node's processes
KINDS = ("operator-sigkill", "leader-kill", "apiserver-restart", "etcd-restart", "conflicts", "gpu-unhealthy",
         "node-deleted", *NODE_KINDS)
SHAPES = (250, 500)  # milli-GPU, in turn
REAL = "chaos-real"  # the node on real processes
HANDED_NOTHING = "but its device plugin handed it no share"  # audit's words for an allocation never handed
HANDOFF_IN_FLIGHT_S = 2.0  # plugin marks allocated -> kubelet writes its record, on a loaded 2-CPU machine
GIB = 1 << 30
WORKLOADS, QUOTA_GIB, HOLD_GIB = 2, 8, 3  # live contexts on the real node: each pod's quota, what it holds


@dataclass(frozen=True)
class Profile:
    nodes: int
    gpus: int  # per node
    rate_per_min: float  # pods created (and, after lifetime_s, deleted) per minute
    lifetime_s: float
    faults: tuple[str, ...]
    minutes: float = 0.0  # the soak's length; 0: as long as the faults take
    gap_s: float = 3.0  # between a fault's recovery and the next fault (the soak spreads them over `minutes`)
    check_every_s: float = 20.0
    conflict_s: float = 5.0
    qps: float = 500.0  # the operators' client limits


QUICK = Profile(nodes=12, gpus=4, rate_per_min=300, lifetime_s=15,
                faults=("operator-sigkill",) * 20 + KINDS[1:] + ("operator-sigkill",), gap_s=1.0)
SOAK = Profile(nodes=200, gpus=4, rate_per_min=1000, lifetime_s=60, faults=KINDS * 3, minutes=10.0,
               conflict_s=10.0)


@dataclass
class FaultResult:
    kind: str
    started: float  # time.monotonic()
    injected_s: float = 0.0  # how long injecting took (e.g. the apiserver's downtime)
    done: float = 0.0  # when the fault was complete: recovery counts from here
    recovery_s: float | None = None  # None: no pod created after `done` was bound in time
    note: str = ""


@dataclass
class Report:
    profile: Profile
    faults: list[FaultResult] = field(default_factory=list)
    created: int = 0
    deleted: int = 0
    create_errors: int = 0
    checks: int = 0
    violations: list[str] = field(default_factory=list)
    latencies: dict[str, float] = field(default_factory=dict)  # pod -> create->bound seconds
    during_faults: list[float] = field(default_factory=list)  # latencies of pods created during a fault
    pending_at_end: int = 0
    elapsed_s: float = 0.0

    @staticmethod
    def p99(values: list[float]) -> float | None:
        if len(values) < 2:
            return max(values) if values else None
        return statistics.quantiles(values, n=100, method="inclusive")[98]


class Churn:
    """Creates pods at a steady rate and deletes each `lifetime_s` later; a watch records when each is bound
    and what it was given. Survives the apiserver going away (creates then fail and are counted)."""

    def __init__(self, k8s, namespace: str, rate_per_min: float, lifetime_s: float, avoid: tuple[str, ...] = ()):
        from kubernetes import client

        self.k8s, self.namespace = k8s, namespace
        self.avoid = avoid  # GPU UUIDs no churn pod may use
        self.interval, self.lifetime = 60.0 / rate_per_min, lifetime_s
        self._api = k8s.api()
        self.core = client.CoreV1Api(self._api)
        self.created: dict[str, float] = {}  # name -> when its create was sent
        self.bound: dict[str, float] = {}  # name -> when the watch first saw it bound
        self.placed: dict[str, tuple[str, tuple[str, ...]]] = {}  # name -> (node, GPU uuids)
        self.deleted = 0
        self.create_errors = 0
        self._stop = threading.Event()
        self._stop_creating = threading.Event()
        self._pool = ThreadPoolExecutor(8)
        self._threads = [threading.Thread(target=self._create_loop, daemon=True),
                         threading.Thread(target=self._watch_loop, daemon=True)]
        self._lock = threading.Lock()

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def _create_loop(self) -> None:
        i, due = 0, time.monotonic()
        doomed: list[tuple[float, str]] = []
        while not self._stop.is_set():
            now = time.monotonic()
            if not self._stop_creating.is_set() and now >= due:
                name = f"c{i}"
                self._pool.submit(self._create, name, SHAPES[i % len(SHAPES)])
                doomed.append((now + self.lifetime, name))
                i, due = i + 1, due + self.interval
            while doomed and doomed[0][0] <= now:
                self._pool.submit(self._delete, doomed.pop(0)[1])
            time.sleep(max(0.0, min(due - time.monotonic(), 0.05)))

    def _create(self, name: str, milli: int) -> None:
        sent = time.monotonic()
        try:
            self.core.create_namespaced_pod(self.namespace, share_pod(name, milli, exclude_uuids=self.avoid), _request_timeout=10)
        except Exception:  # the apiserver is down or slow: a fault, counted
            with self._lock:
                self.create_errors += 1
            return
        with self._lock:
            self.created[name] = sent

    def _delete(self, name: str) -> None:
        with self._lock:
            if name not in self.created:
                return
        for _ in range(30):  # the apiserver may be restarting: a pod must not outlive its lifetime for long
            try:
                self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0, _request_timeout=10)
            except Exception as e:
                if getattr(e, "status", None) == 404:
                    break
                time.sleep(1.0)
                continue
            break
        with self._lock:
            self.deleted += 1

    def _watch_loop(self) -> None:
        from kubernetes import watch

        while not self._stop.is_set():
            try:
                listed = json.loads(self.core.list_namespaced_pod(self.namespace, _preload_content=False,
                                                                  _request_timeout=30).data)
                for pod in listed["items"]:
                    self._saw(pod)
                w = watch.Watch()
                for event in w.stream(self.core.list_namespaced_pod, self.namespace, timeout_seconds=30,
                                      resource_version=listed["metadata"]["resourceVersion"]):
                    self._saw(event["raw_object"])
                    if self._stop.is_set():
                        w.stop()
            except Exception:  # the apiserver restarting: list and watch again
                time.sleep(0.5)

    def _saw(self, pod: dict) -> None:
        name, node = pod["metadata"]["name"], (pod.get("spec") or {}).get("nodeName")
        if not node or name in self.bound:
            return
        now = time.monotonic()
        raw = (pod["metadata"].get("annotations") or {}).get(keys.ASSIGNMENT, "{}")
        uuids = tuple(d["uuid"] for c in json.loads(raw).get("containers", []) for d in c["devices"])
        with self._lock:
            self.bound[name] = now
            self.placed[name] = (node, uuids)

    def first_bound_after(self, t: float) -> float | None:
        """When the first pod created after `t` was bound (None: none yet)."""
        with self._lock:
            times = [self.bound[n] for n, c in self.created.items() if c >= t and n in self.bound]
        return min(times) if times else None

    def stop_creating(self) -> None:
        self._stop_creating.set()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(40)
        self._pool.shutdown(wait=True)
        self._api.close()


class Rig:
    """KWOK GPU nodes, one node on real processes with workloads holding contexts, two operator replicas, the
    churn; `inject(kind)` one fault."""

    def __init__(self, k8s, namespace: str, workdir: Path, profile: Profile, log: Callable[[str], None] = print,
                 seed: int = 14):
        self.k8s, self.namespace, self.workdir, self.profile, self.log = k8s, namespace, workdir, profile, log
        self.rng = random.Random(seed)
        self.nodes = [f"chaos-{i}" for i in range(profile.nodes)]
        self.operators: dict[str, object] = {}  # identity -> process
        self.starts = 0
        self.unhealthy: list[tuple[str, str, float]] = []  # (node, GPU uuid, since)
        self.deleted_nodes: list[tuple[str, float]] = []
        self.churn: Churn | None = None
        self.real: RealNode | None = None
        self.workloads: list[WorkloadProc] = []
        self.probes: list[str] = []  # pods created after a node fault, checked by settle_probes()
        self.probe_violations: list[str] = []
        self.probe_count = 0

    # --- set-up ----------------------------------------------------------------------------------------
    def setup(self) -> None:
        p = self.profile
        self.handoff_key = self.workdir / "handoff.key"  # the operators sign hand-offs, the real node's plugin verifies
        self.handoff_key.write_text(base64.b64encode(secrets.token_bytes(48)).decode())
        self.k8s.make_kwok_nodes(self.nodes, {"nvidia.com/gpu": 10 * p.gpus}, annotations=lambda name: {
            keys.INVENTORY: fractional_inventory(name, p.gpus)})
        if set(p.faults) & set(NODE_KINDS):
            from kubernetes import client

            self.real = RealNode(self.k8s.kubeconfig, REAL, self.workdir, handoff_key_file=self.handoff_key)
            with self.k8s.api() as api:
                self.real.create(client.CoreV1Api(api))
            self.real.start()
        for identity in ("replica-a", "replica-b"):
            self.start_operator(identity)
        self.wait(lambda: self.leader() in self.operators, 30, "a replica to lead")
        for i in range(WORKLOADS if self.real else 0):
            self.workloads.append(self._workload(f"live-{i}", HOLD_GIB))

    def start_operator(self, identity: str) -> None:
        self.starts += 1
        self.operators[identity] = start_operator(
            self.k8s, self.workdir, "--lease-namespace", self.namespace, "--identity", identity, "--qps",
            str(self.profile.qps), "--burst", str(int(2 * self.profile.qps)), "--handoff-key-file",
            str(self.handoff_key), leader_elect=True,
            log_name=f"{identity}.{self.starts}.log")

    def leader(self) -> str | None:
        from kubernetes import client

        try:
            with self.k8s.api() as api:
                lease = client.CoordinationV1Api(api).read_namespaced_lease("fgpu-scheduler", self.namespace,
                                                                            _request_timeout=5)
            return lease.spec.holder_identity or None
        except Exception:
            return None

    @staticmethod
    def wait(fn: Callable, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if value := fn():
                return value
            time.sleep(0.2)
        raise TimeoutError(f"no {what} after {timeout:.0f} s")

    # --- faults ----------------------------------------------------------------------------------------
    def inject(self, kind: str) -> FaultResult:
        result = FaultResult(kind, time.monotonic())
        self._done: float | None = None
        note = getattr(self, "_" + kind.replace("-", "_"))()
        result.injected_s = time.monotonic() - result.started
        result.done = self._done or time.monotonic()
        result.note = note or ""
        return result

    def _kill_leader(self) -> str:
        leader = self.wait(lambda: (who := self.leader()) in self.operators and who, 30, "leader")
        proc = self.operators.pop(leader)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        self._done = time.monotonic()  # the restart (or the takeover) is part of the recovery
        return leader

    def _operator_sigkill(self) -> str:
        leader = self._kill_leader()
        self.start_operator(leader)
        return f"{leader} killed and restarted"

    def _leader_kill(self) -> str:
        leader = self._kill_leader()
        other = next(iter(self.operators))
        self.wait(lambda: self.leader() == other, 40, f"{other} to take the lease")
        self.start_operator(leader)
        return f"{leader} killed; {other} took over"

    def _apiserver_restart(self) -> str:
        return f"down {self.k8s.restart('kube-apiserver', down_s=2.0):.1f} s"

    def _etcd_restart(self) -> str:
        return f"down {self.k8s.restart('etcd', down_s=2.0):.1f} s"

    def _conflicts(self) -> str:
        """Another client rewrites the churn's pods on their resourceVersion while the operator binds them."""
        from kubernetes import client

        stop_at, counts = time.monotonic() + self.profile.conflict_s, {"updated": 0, "conflicts": 0}
        lock = threading.Lock()

        def writer(seed: int) -> None:
            rng = random.Random(seed)
            with self.k8s.api() as api:
                core = client.CoreV1Api(api)
                while time.monotonic() < stop_at:
                    pods = json.loads(core.list_namespaced_pod(self.namespace, _preload_content=False).data)["items"]
                    for pod in rng.sample(pods, min(len(pods), 20)):
                        pod["metadata"].setdefault("labels", {})["chaos/touched"] = str(rng.randrange(10**6))
                        try:
                            core.replace_namespaced_pod(pod["metadata"]["name"], self.namespace, pod)
                            outcome = "updated"
                        except Exception as e:
                            outcome = "conflicts" if getattr(e, "status", None) == 409 else ""
                        if outcome:
                            with lock:
                                counts[outcome] += 1

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return f"{counts['updated']} pods rewritten, {counts['conflicts']} writes refused 409"

    def _holding_node(self) -> str:
        """A live node that holds shares now (the busiest one)."""
        gone = {n for n, _ in self.deleted_nodes}
        counts: dict[str, int] = {}
        for pod in self._pods():
            node = (pod.get("spec") or {}).get("nodeName")
            if node in self.nodes and node not in gone:  # KWOK nodes only: the real node's faults are its own
                counts[node] = counts.get(node, 0) + 1
        return max(counts, key=counts.get) if counts else self.rng.choice([n for n in self.nodes if n not in gone])

    def _gpu_unhealthy(self) -> str:
        from kubernetes import client

        node = self._holding_node()
        used = {u for p in self._pods() if (p.get("spec") or {}).get("nodeName") == node
                for u in _uuids(p)}
        bad = {i: 79 for i in range(self.profile.gpus) if f"GPU-{node}-{i}" in used}
        first = min(bad) if bad else 0
        already = {int(u.rsplit("-", 1)[1]): 79 for n, u, _ in self.unhealthy if n == node}
        with self.k8s.api() as api:
            client.CoreV1Api(api).patch_node(node, {"metadata": {"annotations": {
                keys.INVENTORY: fractional_inventory(node, self.profile.gpus, unhealthy={**already, first: 79})}}})
        uuid = f"GPU-{node}-{first}"
        self.unhealthy.append((node, uuid, time.monotonic()))
        holders = sum(1 for p in self._pods() if uuid in _uuids(p))
        return f"{uuid} unhealthy under {holders} pods"

    def _node_deleted(self) -> str:
        from kubernetes import client

        node = self._holding_node()
        with self.k8s.api() as api:
            core = client.CoreV1Api(api)
            core.delete_node(node)
            self.deleted_nodes.append((node, time.monotonic()))
            on_it = [p["metadata"]["name"] for p in self._pods() if (p.get("spec") or {}).get("nodeName") == node]
            for name in on_it:  # the pod garbage collector's work (no controller-manager here)
                try:
                    core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
                except Exception as e:
                    if getattr(e, "status", None) != 404:
                        raise
        return f"{node} deleted with {len(on_it)} pods"

    # --- the real node's processes -------------------------------------------------------------------------
    def _workload(self, name: str, hold_gib: int, timeout: float = 60.0, created: bool = False) -> WorkloadProc:
        """A pod pinned to the real node (`created`: already), Allocate'd there by the stub kubelet; a workload
        holding a context opened with the token Allocate issued it."""
        if not created:
            self._pin(name)
        key = f"{self.namespace}.{name}.main"
        self.wait(lambda: self.real.records().get(key), timeout, f"{name} Allocate'd on {REAL}")
        work = WorkloadProc(name, self.real.plugin_dir / "pods" / f"{key}.json", hold_gib * GIB,
                            self.workdir / f"workload-{name}.log")
        try:
            work.wait_open(timeout)
        except TimeoutError:
            work.stop()
            raise
        return work

    def _pin(self, name: str) -> None:
        from kubernetes import client

        pod = share_pod(name, 250, mem_gib=QUOTA_GIB)
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": REAL}
        with self.k8s.api() as api:
            client.CoreV1Api(api).create_namespaced_pod(self.namespace, pod, _request_timeout=10)

    def _restart(self, which: str) -> str:
        self.probe_violations += self.settle_probes()  # the previous node fault's, long Allocate'd by now
        self.real.kill(which)
        self._done = time.monotonic()  # the restart is part of the recovery
        self.real.start_one(which)
        return f"{which} SIGKILLed under {len(self.workloads)} open contexts, up again in " \
               f"{time.monotonic() - self._done:.1f} s"

    def _plugin_restart(self) -> str:
        return self._restart("plugin")

    def _kubelet_restart(self) -> str:
        return self._restart("kubelet")

    def _daemon_restart(self) -> str:
        return self._restart("daemon")

    def node_recovered(self, fault: FaultResult, timeout: float = 120.0) -> float:
        """When the real node served again: after a daemon restart, when the last workload had its context back;
        else when the stub kubelet got the first Allocate answered after the fault. A pod is created now, to be
        Allocate'd there and open a context with its token (settle_probes(), at the next node fault or the end:
        its scheduling waits behind the churn's backlog)."""
        self.probe_count += 1
        name = f"probe-{self.probe_count}"
        self._pin(name)
        self.probes.append(name)
        if fault.kind == "daemon-restart":
            when = self.wait(lambda: all(w.opened_at > fault.done for w in self.workloads) and max(
                w.opened_at for w in self.workloads), timeout, "every workload's context back")
        else:
            offset = time.time() - time.monotonic()
            when = self.wait(lambda: self.real.allocated_since(fault.done + offset), timeout,
                             "an Allocate answered") - offset
        return when

    def settle_probes(self, timeout: float = 120.0) -> list[str]:
        """Every pod created after a node fault was Allocate'd on the real node and opened a context with the
        token it was issued; then its context closes and the pod goes."""
        out, opened = [], []
        for name in self.probes:
            try:
                opened.append(self._workload(name, 1, timeout, created=True))
            except TimeoutError as e:
                out.append(f"pod {self.namespace}/{name}, created after a node fault: {e}")
        for work in opened:
            work.stop()
        for name in self.probes:  # a pod goes once the daemon shows no context of it (none outlives its pod)
            self.wait(lambda n=name: f'pod="{n}"' not in self._scrape(), 10, f"{name}'s context gone")
            self._delete_pod(name)
        self.probes.clear()
        return out

    def node_violations(self, fault: FaultResult) -> list[str]:
        """What a node fault may not do to the workloads' contexts, and their quotas after it."""
        out, self.probe_violations = self.probe_violations, []
        for w in self.workloads:
            errors = [(e, clear) for t, e, clear in w.errors if t >= fault.started]
            if fault.kind != "daemon-restart":
                out += [f"workload {w.name}: its context failed under a {fault.kind}: {e}" for e, _ in errors]
            elif not errors:
                out.append(f"workload {w.name}: its context kept working through a daemon SIGKILL")
            else:
                out += [f"workload {w.name}: unclear error after a daemon SIGKILL: {e}" for e, clear in errors
                        if not clear]
            out += w.audit_quota()
        return out

    def _scrape(self) -> str:
        try:
            return self.real.scrape()
        except OSError:  # the daemon restarting
            return ""

    def _handed(self) -> list:
        out = []
        for record in self.real.records().values():
            out += handed_from_env(REAL, record["env"], self.real.secret,
                                   to=(record["namespace"], record["pod"], record["container"]))
        return out + handed_from_daemon_metrics(REAL, self._scrape())

    def _read(self) -> tuple[list[dict], list, list]:
        """The pods, with what the real node handed out read just before and just after them."""
        before = self._handed() if self.real else []
        pods = self._pods()
        return pods, before, self._handed() if self.real else []

    def _delete_pod(self, name: str) -> None:
        from kubernetes import client

        with self.k8s.api() as api:
            client.CoreV1Api(api).delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)

    # --- reading the cluster ---------------------------------------------------------------------------
    def _pods(self) -> list[dict]:
        from kubernetes import client

        with self.k8s.api() as api:
            return json.loads(client.CoreV1Api(api).list_namespaced_pod(
                self.namespace, _preload_content=False, _request_timeout=30).data)["items"]

    def check(self) -> list[str]:
        """The invariant checker over the cluster now, and nothing placed where a fault forbade it."""
        from kubernetes import client

        with self.k8s.api() as api:
            nodes = json.loads(client.CoreV1Api(api).list_node(_preload_content=False,
                                                               _request_timeout=30).data)["items"]
        # What the real node handed out is read before the pods and checked against them: a grant made after the
        # pods were read may be for a pod they show not yet bound. Read again after the pods, it only clears a
        # pod's "handed nothing": a grant made or dropped while the pods are read is in one of the two reads.
        pods, before, after = self._read()
        out = list(check(nodes, pods, grants={REAL: before} if self.real else None).violations)
        out = _still_handed_nothing(out, lambda: check(nodes, pods, grants={REAL: before + after}).violations)

        def later() -> list[str]:
            # the plugin marks a container allocated before it answers the kubelet, which then writes its record:
            # a pod read between the two looks handed nothing. Read again once that hand-off has landed; what is
            # still missing then is a real violation.
            time.sleep(HANDOFF_IN_FLIGHT_S)
            pods, before, after = self._read()
            return check(nodes, pods, grants={REAL: before + after}).violations

        out = _still_handed_nothing(out, later)
        churn = self.churn
        if churn is not None:
            with churn._lock:
                placed = {n: (churn.bound[n], *churn.placed[n]) for n in churn.placed}
            for name, (when, node, uuids) in placed.items():
                for _node, uuid, since in self.unhealthy:
                    if when > since + 2.0 and uuid in uuids:  # (2 s: the watch event on its way)
                        out.append(f"pod {self.namespace}/{name}: placed on {uuid} {when - since:.1f} s after it "
                                   "went unhealthy")
                for gone, since in self.deleted_nodes:
                    if when > since + 2.0 and node == gone:
                        out.append(f"pod {self.namespace}/{name}: bound to {gone} {when - since:.1f} s after the "
                                   "node was deleted")
        return out

    def stop(self) -> None:
        if self.churn is not None:
            self.churn.stop()
        for work in self.workloads:
            work.stop()
        if self.real is not None:
            self.real.stop()
        for proc in self.operators.values():
            stop(proc)
        self._delete_nodes()

    def _delete_nodes(self) -> None:
        """The rig's KWOK nodes and their GPUNodes go with it: the control plane is shared with later tests,
        whose operators would otherwise place pods on them."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        with self.k8s.api() as api:
            core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
            for node in [*self.nodes, *([REAL] if self.real else [])]:
                for delete in (lambda n=node: core.delete_node(n),
                               lambda n=node: custom.delete_cluster_custom_object(
                                   keys.CRD_GROUP, keys.CRD_VERSION, keys.GPUNODE_PLURAL, n)):
                    try:
                        delete()
                    except ApiException as e:
                        if e.status != 404:  # already gone (node-deleted), or no GPUNode CRD installed
                            raise


def _still_handed_nothing(found: list[str], recheck: Callable[[], list[str]]) -> list[str]:
    """`found` less the "handed nothing" violations that `recheck` no longer finds (run only if there are any)."""
    if not any(HANDED_NOTHING in v for v in found):
        return found
    again = recheck()
    return [v for v in found if HANDED_NOTHING not in v or v in again]


def _uuids(pod: dict) -> set[str]:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.ASSIGNMENT)
    if not raw:
        return set()
    return {d["uuid"] for c in json.loads(raw).get("containers", []) for d in c["devices"]}


def run(k8s, namespace: str, workdir: Path, profile: Profile, log: Callable[[str], None] = print) -> Report:
    """Set up, churn, inject every fault of the profile, settle, and report. Leaves the rig stopped."""
    report = Report(profile)
    rig = Rig(k8s, namespace, workdir, profile, log)
    began = time.monotonic()
    try:
        rig.setup()
        # churn pods go to the real node too, on all but its last GPU: that one keeps room for the pinned
        # workloads and for the pod each node fault is followed by, whose Allocate times the recovery (with the
        # node full of churn it would wait for a churn pod's lifetime instead)
        avoid = tuple(rig.real.gpu_uuids()[-1:]) if rig.real else ()
        rig.churn = churn = Churn(k8s, namespace, profile.rate_per_min, profile.lifetime_s, avoid)
        churn.start()
        time.sleep(min(profile.lifetime_s, 10.0))  # a live population before the first fault
        spacing = profile.minutes * 60 / len(profile.faults) if profile.minutes else 0.0
        last_check = time.monotonic()
        for i, kind in enumerate(profile.faults):
            if spacing:  # the soak: faults spread evenly, the churn goes on in between
                while time.monotonic() < began + (i + 0.5) * spacing:
                    if time.monotonic() - last_check > profile.check_every_s:
                        report.checks += 1
                        report.violations += rig.check()
                        last_check = time.monotonic()
                    time.sleep(0.5)
            result = rig.inject(kind)
            try:
                if kind in NODE_KINDS:
                    recovered = rig.node_recovered(result)
                else:
                    recovered = rig.wait(lambda r=result: churn.first_bound_after(r.done), 120, "recovery")
                result.recovery_s = recovered - result.done
            except TimeoutError:
                result.recovery_s = None
            report.faults.append(result)
            found = rig.check() + (rig.node_violations(result) if kind in NODE_KINDS else [])
            report.checks += 1
            report.violations += found
            last_check = time.monotonic()
            log(f"fault {i + 1}/{len(profile.faults)} {kind}: {result.note}; recovered in "
                f"{'never' if result.recovery_s is None else f'{result.recovery_s:.1f} s'}"
                + (f"; {len(found)} violations: {found[:3]}" if found else ""))
            time.sleep(profile.gap_s)
        if profile.minutes:
            while time.monotonic() < began + profile.minutes * 60:
                time.sleep(0.5)
        if rig.real is not None:
            report.violations += rig.settle_probes()
        churn.stop_creating()
        pending = []

        def settled():
            nonlocal pending
            pending = [p["metadata"]["name"] for p in rig._pods() if not (p.get("spec") or {}).get("nodeName")]
            return not pending

        with contextlib.suppress(TimeoutError):
            rig.wait(settled, 60, "every pod left bound")
        report.pending_at_end = len(pending)
        report.checks += 1
        report.violations += rig.check()
        if pending:
            report.violations.append(f"{len(pending)} pods still pending with capacity free, e.g. {pending[:3]}")
    finally:
        rig.stop()
    churn = rig.churn
    if churn is not None:
        report.created, report.deleted, report.create_errors = len(churn.created), churn.deleted, churn.create_errors
        report.latencies = {n: churn.bound[n] - c for n, c in churn.created.items() if n in churn.bound}
        windows = [(f.started, f.done + (f.recovery_s or 0.0) + 5.0) for f in report.faults]
        report.during_faults = [report.latencies[n] for n, c in churn.created.items()
                                if n in report.latencies and any(a <= c <= b for a, b in windows)]
    report.elapsed_s = time.monotonic() - began
    return report


def table(report: Report) -> str:
    """The soak's summary, as docs/reliability.md shows it (markdown)."""
    def secs(v: float | None) -> str:
        return "—" if v is None else f"{v:.1f} s"

    p = report.profile
    by_kind: dict[str, list[FaultResult]] = {}
    for f in report.faults:
        by_kind.setdefault(f.kind, []).append(f)
    all_lat = list(report.latencies.values())
    lines = [
        f"{p.nodes} KWOK nodes x {p.gpus} GPUs, {p.rate_per_min:g} pods/min created and deleted "
        f"(each lives {p.lifetime_s:g} s), 2 operator replicas; {report.elapsed_s / 60:.1f} min",
        "",
        "| | |", "|---|---|",
        f"| faults injected | {len(report.faults)} ({', '.join(f'{k} x{len(v)}' for k, v in by_kind.items())}) |",
        f"| pods created / deleted | {report.created} / {report.deleted} ({report.create_errors} creates refused "
        "while the apiserver was down) |",
        f"| invariant checks / violations | {report.checks} / **{len(report.violations)}** |",
        f"| pods pending at the end | {report.pending_at_end} |",
        f"| scheduling p99 (create→bound), all / during faults | {secs(report.p99(all_lat))} / "
        f"{secs(report.p99(report.during_faults))} |",
        "", "| fault | count | recovery median | recovery max |", "|---|---|---|---|"]
    for kind, items in by_kind.items():
        rec = [f.recovery_s for f in items if f.recovery_s is not None]
        never = len(items) - len(rec)
        lines.append(f"| {kind} | {len(items)} | {secs(statistics.median(rec) if rec else None)} | "
                     f"{secs(max(rec) if rec else None)}{f' ({never} never)' if never else ''} |")
    return "\n".join(lines) + "\n"
