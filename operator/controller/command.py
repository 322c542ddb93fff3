"""`fgpu operator`: run the scheduler (and, once registered, the admission webhook) against a cluster."""
from __future__ import annotations

import argparse
import gc
import logging
import os
import re

from fgpu_contracts.errors import InputError
from fgpu_contracts.keys import SCHEDULER_NAME_PATTERN, TAKEOVER_SCHEDULERS
from fgpu_contracts.signature import load_key

from ..placement.policies import LIVE_POLICIES

#: CPython's collector thresholds for the operator (young, middle, old). Every watch event decodes into hundreds of
#: dicts and lists, and a young collection runs whenever allocations outnumber frees by the first threshold: with
#: the defaults (700, 10, 10) one ran every few events and the older ones kept re-walking the long-lived cluster
#: model (13.3 s of 71.8 s CPU in a 4,000-pod run on 1,000 nodes, bench/scheduler.py). Since Kopf's event objects
#: make no cycles (`kopf_acyclic`), a young collection during a burst finds no garbage at all, only the events in
#: flight: at 10,000 the collector took 4.1-4.4 s of a 6,000-pod run's wall time (fast, then 100 pods/s offered),
#: at 100,000 0.6-1.0 s. Cyclic garbage, which error paths can still make, is still collected, later.
GC_THRESHOLDS = (100_000, 10, 10)


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0 or value != value or value == float("inf"):
            raise argparse.ArgumentTypeError(f"{text!r} must be a positive finite number")
        return value
    return parse


#: Which setting wins, said once for --help and docs/operator.md.
PRECEDENCE = (
    "Cluster defaults (--policy, --takeover-schedulers, --aliyun-memory-unit): the SchedulingPolicy object "
    "named `default` wins over these flags, field by field, and the flags win over the built-in defaults. "
    "The object is the cluster admin's live setting (changed without a restart, its status says whether it "
    "was applied); the flags are the deployment's (the Helm chart's values); a field the object leaves out, "
    "or deleting the object, falls back to the flag. A pod's own annotations win over all three.")


def _schedulers(text: str) -> tuple[str, ...]:
    """--takeover-schedulers: comma-separated scheduler names ("" takes none over)."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    bad = next((n for n in names if not _SCHEDULER_NAME.fullmatch(n)), None)
    if bad is not None:
        raise argparse.ArgumentTypeError(f"{bad!r} is not a scheduler name (a DNS subdomain, e.g. hami-scheduler)")
    return names


_SCHEDULER_NAME = re.compile(SCHEDULER_NAME_PATTERN)


def register(subparsers) -> None:
    p = subparsers.add_parser("operator", help="run fgpu's scheduler and admission webhook (Kopf)",
                              description="Run fgpu's Kopf operator: schedules pods with schedulerName "
                                          "fgpu-scheduler onto (fractions of) GPUs and binds them.",
                              epilog=PRECEDENCE)
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
    p.add_argument("--policy", default="fgpu", choices=LIVE_POLICIES,
                   help="cluster-wide node policy (default fgpu; SchedulingPolicy spec.nodePolicy wins)")
    p.add_argument("--takeover-schedulers", type=_schedulers, default=TAKEOVER_SCHEDULERS, metavar="A,B,...",
                   help="GPU pods naming one of these schedulers are scheduled by fgpu (comma-separated; '' for "
                        f"none; default {','.join(TAKEOVER_SCHEDULERS)}; SchedulingPolicy "
                        "spec.takeoverSchedulers wins)")
    p.add_argument("--aliyun-memory-unit", choices=("GiB", "MiB"), default="GiB",
                   help="what one aliyun.com/gpu-mem is, as gpushare's --memory-unit (default GiB; "
                        "SchedulingPolicy spec.aliyunMemoryUnit wins)")
    p.add_argument("--qps", type=_positive(float), default=500.0, help="client QPS for binds (default 500)")
    p.add_argument("--burst", type=_positive(int), default=1000, help="client burst (default 1000)")
    p.add_argument("--binds-in-flight", type=_positive(int), default=64, help="concurrent Binding writes")
    p.add_argument("--inline-writes", action="store_true",
                   help="write Bindings and Events from the operator's own thread, not a child process")
    p.add_argument("--no-leader-elect", action="store_true", help="bind without holding the Lease (one replica)")
    p.add_argument("--lease-namespace", default="kube-system")
    p.add_argument("--identity", help="this replica's name in the Lease (default: hostname + random)")
    p.add_argument("--liveness", default="", help="serve Kopf's liveness probe, e.g. http://0.0.0.0:8080/healthz")
    p.add_argument("--metrics-port", type=int, default=0,
                   help="serve Prometheus metrics on http://0.0.0.0:PORT/metrics (0: off; see docs/metrics.md)")
    p.add_argument("--webhook-port", type=int, default=0, help="serve the admission webhook on this port (0: off)")
    p.add_argument("--webhook-addr", default="0.0.0.0", help="address the webhook listens on")
    p.add_argument("--webhook-host", default="", help="host name the apiserver uses to reach the webhook")
    p.add_argument("--webhook-cert-dir", default="", help="directory with tls.crt, tls.key, ca.pem "
                   "(default: a self-signed CA made at start)")
    p.add_argument("--manage-webhook-config", action="store_true",
                   help="create the Mutating/ValidatingWebhookConfiguration (the Helm chart ships its own)")
    p.add_argument("--trusted-user", action="append", default=[],
                   help="user allowed to edit hand-off annotations (the operator's / plugin's service account)")
    p.add_argument("--handoff-key-file", default="", metavar="PATH",
                   help="key to sign each assignment with (fgpu.io/assignment-signature); give every device plugin "
                        "the same file (the Helm chart makes and mounts one). Default: assignments go unsigned")
    p.add_argument("--slo-feedback-prometheus", default="", metavar="URL",
                   help="Prometheus that scrapes the node daemons: a GPU whose protected pod is measured over its "
                        "SLO for --slo-feedback-window takes no new low-priority pods (docs/qos.md; default: off)")
    p.add_argument("--slo-feedback-window", type=_positive(float), default=60.0, metavar="SECONDS",
                   help="how long a protected pod must be over its bound before its GPU is held (default 60)")
    p.add_argument("--slo-feedback-every", type=_positive(float), default=15.0, metavar="SECONDS",
                   help="how often to ask Prometheus (default 15)")
    p.add_argument("--dra-claims", choices=("kube-scheduler", "fgpu-scheduler"), default=None,
                   help="DRA is on, its pools allocated by this scheduler: the webhook writes shares and MIG requests "
                        "as ResourceClaims of fgpu-dra's classes (docs/dra.md; the chart sets it with dra.enabled)")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..lean import hide_official_client

    hide_official_client()
    import kopf
    import uvloop

    from . import handlers

    if args.kubeconfig:
        if not os.path.isfile(args.kubeconfig):
            raise InputError(f"{args.kubeconfig}: no such file", field="--kubeconfig")
        os.environ["KUBECONFIG"] = args.kubeconfig  # Kopf's own login reads it too
    handoff_key = load_key(args.handoff_key_file) if args.handoff_key_file else None
    handlers.CONFIG = handlers.OperatorConfig(
        kubeconfig=args.kubeconfig, policy=args.policy, takeover_schedulers=args.takeover_schedulers,
        aliyun_memory_unit=args.aliyun_memory_unit, qps=args.qps, burst=args.burst,
        binds_in_flight=args.binds_in_flight, writer_process=not args.inline_writes,
        leader_elect=not args.no_leader_elect,
        lease_namespace=args.lease_namespace, identity=args.identity, webhook_port=args.webhook_port,
        webhook_addr=args.webhook_addr, webhook_host=args.webhook_host, webhook_cert_dir=args.webhook_cert_dir,
        manage_webhook_config=args.manage_webhook_config, handoff_key=handoff_key,
        slo_feedback_url=_prometheus_url(args.slo_feedback_prometheus),
        slo_window_s=args.slo_feedback_window, slo_every_s=args.slo_feedback_every, dra_claims=args.dra_claims)
    for flag, port in (("--webhook-port", args.webhook_port), ("--metrics-port", args.metrics_port)):
        if not 0 <= port <= 65535:
            raise InputError(f"{port} is not a TCP port", field=flag, allowed=["0..65535"])
    if args.webhook_port:
        from . import webhook

        webhook.TRUSTED_USERS.update(args.trusted_user)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # one line per watch event otherwise
    from ..kopf_patches import apply_kopf_patches

    apply_kopf_patches()  # before Kopf makes its first Body; a Kopf they were not tested on runs as shipped
    server = _serve_metrics(handlers, args.metrics_port) if args.metrics_port else None
    # uvloop: the event loop, TLS and socket I/O in C. The operator is one thread that the apiserver, etcd and
    # the node agents out-compete for CPU on a busy control-plane host; what each pod costs it sets the rate.
    loop = uvloop.new_event_loop()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        kopf.run(loop=loop, standalone=True, clusterwide=True, liveness_endpoint=args.liveness or None)
    finally:
        loop.close()
        if server is not None:
            server.shutdown()
    return 0


def _prometheus_url(url: str) -> str:
    """--slo-feedback-prometheus checked as `fgpu report --prometheus` is ("" stays off)."""
    if not url:
        return ""
    from ..observe.prom import check_url

    try:
        return check_url(url)
    except InputError as err:
        raise InputError(str(err).split(": ", 1)[-1].split(" (allowed:")[0], field="--slo-feedback-prometheus",
                         allowed=err.allowed) from None


def _serve_metrics(handlers, port: int):
    """Serve the operator's registry from now on (a scrape during start-up sees empty families), so a taken
    port fails the command at once."""
    import prometheus_client

    from .metrics import OperatorMetrics

    prometheus_client.disable_created_metrics()  # no `_created` gauge beside every counter and histogram
    handlers.METRICS = OperatorMetrics()
    try:
        server = handlers.METRICS.serve(port)
    except OSError as err:
        raise InputError(f"{port}: cannot serve metrics: {err.strerror or err}", field="--metrics-port") from None
    logging.getLogger("fgpu.metrics").info("metrics on http://0.0.0.0:%d/metrics", port)
    return server
