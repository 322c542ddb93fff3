"""The Kopf shell: watch events in, calls on the scheduler out, and nothing else.

Pods and nodes are watched with `@kopf.on.event` only: create/update handlers would PATCH Kopf's progress
annotations (and post Events) on every pod, one extra write per pod on the hot path. The handlers are
coroutines: Kopf runs a plain function in its thread pool, and the model must change only on the loop the
scheduler decides on. The scheduler's own writes go through `fgpu_operator.kube`: Bindings and Events from a
child process (`kube/offload.py`, unless --inline-writes), status and the Lease on this same asyncio loop.

Start-up order matters for crash safety: every node and every bound pod is listed and restored into the
model *before* the scheduler may bind anything, so a restarted operator never hands out a share that a
running pod holds. Kopf's own watches then re-deliver the same objects; restoring is idempotent.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass

import kopf

from fgpu_contracts import keys
from fgpu_contracts.policy import SchedulingPolicySpec

from ..admission import AdmissionConfig
from ..kube import config as kubeconfig
from ..kube.events import EventRecorder
from ..kube.leader import LeaderElector, default_identity
from ..kube.offload import WriterProcess
from ..kube.session import ApiSession, Limits
from ..placement.live import LiveCluster
from .gpunodes import StatusWriter
from .metrics import OperatorMetrics
from .policy import PolicyWatch
from .scheduler import Scheduler

log = logging.getLogger("fgpu.operator")


@dataclass
class OperatorConfig:
    """What `fgpu operator` was started with (CLI flags; the Helm chart sets them)."""

    kubeconfig: str | None = None
    policy: str = "fgpu"
    takeover_schedulers: tuple[str, ...] = keys.TAKEOVER_SCHEDULERS
    aliyun_memory_unit: str = "GiB"
    qps: float = 500.0
    burst: int = 1000
    binds_in_flight: int = 64
    leader_elect: bool = True
    lease_namespace: str = "kube-system"
    lease_name: str = "fgpu-scheduler"
    identity: str | None = None
    webhook_port: int = 0  # 0: no admission webhook in this process
    webhook_addr: str = "0.0.0.0"
    webhook_host: str = ""  # the name the apiserver dials (Service DNS name, or 127.0.0.1 in tests)
    webhook_cert_dir: str = ""  # tls.crt / tls.key / ca.pem mounted by the chart; empty: self-signed
    manage_webhook_config: bool = False  # let Kopf create the (Mutating|Validating)WebhookConfiguration
    handoff_key: bytes | None = None  # --handoff-key-file's key: signs every assignment (None: unsigned)
    writer_process: bool = True  # Bindings and Events written by a child process (False: --inline-writes)
    slo_feedback_url: str = ""  # Prometheus with the daemons' QoS series (empty: no measured-SLO feedback)
    slo_window_s: float = 60.0  # how long a protected pod must be over its bound before its GPU is held
    slo_every_s: float = 15.0  # how often the feedback asks Prometheus
    dra_claims: str | None = None  # --dra-claims: who allocates the DRA pools; the webhook writes claims (None: off)

    def policy_flags(self) -> SchedulingPolicySpec:
        """The cluster defaults the flags give (a SchedulingPolicy object wins over them, field by field)."""
        return SchedulingPolicySpec(node_policy=self.policy, takeover_schedulers=self.takeover_schedulers,
                                    aliyun_memory_unit=self.aliyun_memory_unit)


DRA_API = "/apis/resource.k8s.io/v1"
#: The name of the (Mutating|Validating)WebhookConfiguration that --manage-webhook-config has Kopf write.
MANAGED_WEBHOOKS = "fgpu.io"
#: Set by `run` before Kopf starts (Kopf handlers are module-level functions).
CONFIG = OperatorConfig()
#: The registry `run` serves on --metrics-port (None: not served; `start` then keeps an unserved one).
METRICS: OperatorMetrics | None = None


async def initial_sync(api: ApiSession, scheduler: Scheduler, policy: PolicyWatch | None = None) -> None:
    """List the cluster's defaults, GPUNodes, nodes, DRA slices and claims, then pods into the model (raw JSON,
    one request each) before any decision. The custom resources are optional: without their CRDs, nodes carry
    the inventory; without resource.k8s.io (or its RBAC), no pod's claims are allocated by fgpu."""
    crds = f"/apis/{keys.CRD_GROUP}/{keys.CRD_VERSION}"
    lists = [(f"{crds}/{keys.SCHEDULING_POLICY_PLURAL}", policy.on_event if policy else None, True),
             (f"{crds}/{keys.GPUNODE_PLURAL}", scheduler.on_gpunode, True),
             ("/api/v1/nodes", scheduler.on_node, False),
             (f"{DRA_API}/deviceclasses", scheduler.on_deviceclass, True),  # KEP-5004's extendedResourceName
             (f"{DRA_API}/resourceslices", scheduler.on_resourceslice, True),
             (f"{DRA_API}/resourceclaims", scheduler.on_resourceclaim, True),  # before pods: their claims' devices
             ("/api/v1/pods", scheduler.on_pod, False)]
    for path, feed, optional in lists:
        if feed is None:
            continue
        out = await api.request("GET", path)
        if not out.ok:
            if optional and out.status in (403, 404):
                log.info("%s not readable (%s): going on without it", path, out.status)
                continue
            raise kopf.PermanentError(f"cannot list {path}: {out}")
        for item in out.body.get("items", []):
            feed("ADDED", item)


@kopf.on.login()
def login(**kwargs) -> kopf.ConnectionInfo | None:
    """In a pod, log Kopf in as client-go's InClusterConfig does (and as this operator's own writer does:
    kube.config.in_cluster): the apiserver at KUBERNETES_SERVICE_HOST:PORT, the `kubernetes` Service's ClusterIP.
    Kopf's built-in service-account login dials https://kubernetes.default.svc, a name only cluster DNS resolves:
    on a cluster without it (the first real node the chart ran on) the operator never got to watch anything.
    Outside a pod, Kopf's kubeconfig login as before."""
    if not os.environ.get("KUBECONFIG") and os.environ.get("KUBERNETES_SERVICE_HOST"):
        with contextlib.suppress(kubeconfig.ConfigError, OSError):
            return kubeconfig.in_cluster(kubeconfig.SERVICE_ACCOUNT_DIR).info
    return kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    settings.peering.standalone = True  # Kopf peering only pauses handlers; the Lease below elects
    settings.posting.enabled = False  # no Kopf log events on objects
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.persistence.progress_storage = NoProgress()
    if CONFIG.webhook_port:
        settings.admission.server = _webhook_server()
        if CONFIG.manage_webhook_config:
            settings.admission.managed = MANAGED_WEBHOOKS
    creds = kubeconfig.load(CONFIG.kubeconfig)
    limits = Limits(qps=CONFIG.qps, burst=CONFIG.burst, max_in_flight=CONFIG.binds_in_flight)
    memo.api = ApiSession(creds, limits)
    memo.api.open()
    # Events get a client of their own with the binds' QPS and in-flight cap: each bind posts one Scheduled
    # Event, so fewer event writes in flight than binds fall behind and the recorder's backlog drops them
    # (QPS 50 dropped 808 of a 4,000-pod burst's Events, 16 in flight 783-1,075 at 120-180 binds/s).
    identity = CONFIG.identity or default_identity()  # which replica decided, on every Event
    memo.metrics = METRICS or OperatorMetrics()
    memo.writer = None
    if CONFIG.writer_process:  # Bindings and the event recorder in a child process, beside the decisions
        memo.writer = WriterProcess(CONFIG.kubeconfig, {"binds": limits, "events": limits},
                                    events={"session": "events", "instance": identity})
        await memo.writer.start()
        binds_api = memo.writer.session("binds")
        memo.events = memo.writer.recorder(on_drop=memo.metrics.event_dropped)
    else:
        memo.events_api = ApiSession(creds, limits)
        memo.events_api.open()
        binds_api = memo.api
        memo.events = EventRecorder(memo.events_api, instance=identity, on_drop=memo.metrics.event_dropped)
    memo.lease_api = ApiSession(creds, Limits(qps=5, burst=10, max_in_flight=2))  # never queued behind events
    memo.lease_api.open()
    elector = None
    if CONFIG.leader_elect:
        elector = LeaderElector(memo.lease_api, CONFIG.lease_name, CONFIG.lease_namespace, identity)
    memo.elector = elector
    memo.scheduler = Scheduler(LiveCluster(policy=CONFIG.policy), binds_api, memo.events,
                               is_leader=(lambda: elector.is_leader) if elector else (lambda: True),
                               max_binds_in_flight=CONFIG.binds_in_flight, metrics=memo.metrics,
                               handoff_key=CONFIG.handoff_key)
    is_leader = memo.scheduler.is_leader
    memo.metrics.attach(memo.scheduler, identity, is_leader, asyncio.get_running_loop())
    flags = CONFIG.policy_flags()
    memo.admission = AdmissionConfig(  # what the webhook reads: the flags, until a SchedulingPolicy says otherwise
        takeover_schedulers=flags.takeover_schedulers, aliyun_memory_unit=flags.aliyun_memory_unit,
        dra_allocator=CONFIG.dra_claims)
    memo.status_api = ApiSession(creds, Limits(qps=20, burst=40, max_in_flight=4))  # GPUNode/policy status
    memo.status_api.open()
    memo.status = StatusWriter(memo.status_api, memo.scheduler.held, memo.scheduler.live.specs.get, is_leader)
    memo.policy = PolicyWatch(flags, lambda spec: _apply_policy(memo, spec))
    await initial_sync(memo.api, memo.scheduler, memo.policy)
    memo.tasks = [asyncio.create_task(memo.scheduler.run(), name="fgpu-scheduler"),
                  asyncio.create_task(memo.status.run(), name="fgpu-gpunode-status"),
                  asyncio.create_task(memo.policy.run(memo.status_api, is_leader), name="fgpu-policy-status")]
    if CONFIG.slo_feedback_url:
        from .slo_feedback import SloFeedback

        feedback = SloFeedback(CONFIG.slo_feedback_url, memo.scheduler, CONFIG.slo_window_s, CONFIG.slo_every_s)
        memo.tasks.append(asyncio.create_task(feedback.run(), name="fgpu-slo-feedback"))
    if elector is not None:
        memo.tasks.append(asyncio.create_task(elector.run(), name="fgpu-leader-election"))
        memo.tasks.append(asyncio.create_task(_wake_on_leadership(elector, memo)))
    if CONFIG.handoff_key is None:
        log.warning("no --handoff-key-file: assignments go unsigned, and device plugins that verify refuse them")
    log.info("fgpu scheduler started: %d nodes, %d allocations restored", len(memo.scheduler.live.specs),
             len(memo.scheduler.live.allocations))


class NoDiffBase(kopf.DiffBaseStorage):
    """Kopf builds (deep-copies) a diff-base of every object on every event for change-detecting handlers;
    fgpu has none (only on.event, indexes, webhooks), so there is nothing to diff: with this the copy of each
    pod, 13% of the operator's CPU under a burst (py-spy, 2,400 pods), is not made."""

    def build(self, *, body, extra_fields=None):
        return kopf.BodyEssence()

    def fetch(self, *, body):
        return None

    def store(self, *, body, patch, essence) -> None:
        return None


class NoProgress(kopf.ProgressStorage):
    """Kopf keeps change-detecting handlers' progress on the object and, on every event, deep-copies the pod's
    essence to strip that progress out before diffing; fgpu has no such handlers, so there is none to keep or
    strip (6.4 us a call alone; py-spy put 1.8% of the operator's samples there at 50 pods/s, its garbage
    included). Add an on.create/update/resume handler and this must go, with NoDiffBase."""

    def fetch(self, *, key, body):
        return None

    def store(self, *, key, record, body, patch) -> None:
        return None

    def purge(self, *, key, body, patch) -> None:
        return None

    def touch(self, *, body, patch, value) -> None:
        return None

    def clear(self, *, essence):
        return essence


def _webhook_server() -> kopf.WebhookServer:
    """Kopf's server on the mounted certificate, else on a self-signed one whose files (Kopf re-reads them to
    notice a renewal) are removed when the process exits; a SIGKILLed operator leaves them in its TMPDIR."""
    import atexit
    import shutil
    import tempfile
    from pathlib import Path

    from .certs import ServingCert, self_signed

    host = CONFIG.webhook_host or "127.0.0.1"
    if CONFIG.webhook_cert_dir:
        d = Path(CONFIG.webhook_cert_dir)
        cert = ServingCert(d / "tls.crt", d / "tls.key", d / "ca.pem")
    else:
        d = Path(tempfile.mkdtemp(prefix="fgpu-webhook-"))
        atexit.register(shutil.rmtree, d, ignore_errors=True)
        cert = self_signed(d, [host])
    return kopf.WebhookServer(addr=CONFIG.webhook_addr, port=CONFIG.webhook_port, host=host,
                              certfile=cert.certfile, pkeyfile=cert.pkeyfile, cafile=cert.cafile)


async def _wake_on_leadership(elector: LeaderElector, memo: kopf.Memo) -> None:
    """A standby that becomes leader places whatever waited meanwhile and rewrites every status."""
    while True:
        await elector.became_leader.wait()
        elector.became_leader.clear()
        memo.scheduler.retry_waiting()
        memo.status.mark(memo.status.known)
        memo.policy.forget_written()


def _apply_policy(memo: kopf.Memo, spec: SchedulingPolicySpec) -> None:
    """The cluster's new defaults: node and GPU policy for the scheduler, takeover and units for the webhook."""
    memo.scheduler.live.set_default_policy(spec.node_policy)
    memo.scheduler.gpu_policy = spec.gpu_policy
    memo.scheduler.default_slo = spec.default_slo_slowdown
    memo.admission = memo.admission.model_copy(update={
        "takeover_schedulers": spec.takeover_schedulers, "aliyun_memory_unit": spec.aliyun_memory_unit,
        "protected_priority": spec.protected_priority})
    memo.scheduler.slo_filter = spec.slo_filter


SHUTDOWN_GRACE_S = 5.0


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_) -> None:
    for task in getattr(memo, "tasks", []):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    # In-flight binds and pending event counts get a few seconds: with the apiserver gone they would retry
    # for minutes and the operator would not exit on SIGTERM.
    if getattr(memo, "scheduler", None) is not None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(memo.scheduler.drain(), SHUTDOWN_GRACE_S)
    if getattr(memo, "events", None) is not None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(memo.events.aclose(), SHUTDOWN_GRACE_S)
    if getattr(memo, "writer", None) is not None:
        await memo.writer.close()
    for name in ("api", "events_api", "lease_api", "status_api"):
        if getattr(memo, name, None) is not None:
            await getattr(memo, name).close()


@kopf.on.event("", "v1", "nodes")
async def node_event(event: dict, memo: kopf.Memo, **_) -> None:
    memo.scheduler.on_node(event.get("type") or "ADDED", event["object"])


@kopf.on.event("", "v1", "pods")
async def pod_event(event: dict, memo: kopf.Memo, **_) -> None:
    memo.scheduler.on_pod(event.get("type") or "ADDED", event["object"])


@kopf.on.event("resource.k8s.io", "v1", "resourceslices")
async def resourceslice_event(event: dict, memo: kopf.Memo, **_) -> None:
    memo.scheduler.on_resourceslice(event.get("type") or "ADDED", event["object"])


@kopf.on.event("resource.k8s.io", "v1", "deviceclasses")
async def deviceclass_event(event: dict, memo: kopf.Memo, **_) -> None:
    memo.scheduler.on_deviceclass(event.get("type") or "ADDED", event["object"])


@kopf.on.event("resource.k8s.io", "v1", "resourceclaims")
async def resourceclaim_event(event: dict, memo: kopf.Memo, **_) -> None:
    memo.scheduler.on_resourceclaim(event.get("type") or "ADDED", event["object"])


@kopf.on.event(keys.CRD_GROUP, keys.CRD_VERSION, keys.GPUNODE_PLURAL)
async def gpunode_event(event: dict, memo: kopf.Memo, **_) -> None:
    kind = event.get("type") or "ADDED"
    memo.scheduler.on_gpunode(kind, event["object"])
    memo.status.seen(event["object"]["metadata"]["name"], exists=kind != "DELETED")


@kopf.on.event(keys.CRD_GROUP, keys.CRD_VERSION, keys.SCHEDULING_POLICY_PLURAL)
async def policy_event(event: dict, memo: kopf.Memo, **_) -> None:
    memo.policy.on_event(event.get("type") or "ADDED", event["object"])
