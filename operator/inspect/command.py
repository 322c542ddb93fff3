"""`fgpu inspect` (and `kubectl fgpu inspect`): the shell around `view` and `render`. It only logs in with the
official client (--kubeconfig, $KUBECONFIG, ~/.kube/config or in-cluster), lists raw JSON, and prints; every
failure on the way (no cluster, unknown pod or node, refused) is one InputError line, exit code 2."""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from fgpu_contracts import keys
from fgpu_contracts.errors import InputError

from .audit import check
from .render import OUTPUTS, render
from .scrape import Target, parse_target, read_contexts
from .view import cluster_report, pod_report

TIMEOUT_S = 15.0
PAGE = 500  # objects per list call, so a large cluster is read in pages
_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _options(parser: argparse.ArgumentParser, defaults: bool) -> None:
    """The connection and output options, on `inspect` and again on its subcommands, so they work on either
    side of `pod`/`node`; the subcommands' copies default to SUPPRESS and keep what `inspect` parsed."""
    def default(value):
        return value if defaults else argparse.SUPPRESS

    parser.add_argument("-o", "--output", choices=OUTPUTS, default=default("table"),
                        help="table (default), json or yaml (docs/inspect.md documents the fields)")
    parser.add_argument("--kubeconfig", default=default(None),
                        help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    parser.add_argument("--context", default=default(None),
                        help="kubeconfig context (default: the current one)")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "inspect", help="what fgpu allocated on each node and GPU; where a pod went or why not",
        description="Per node and GPU: model, MIG layout, health, allocated compute / memory / SMs and "
                    "pods; then node and cluster totals and pending pods. `inspect pod NAME` tells where one "
                    "pod went or why it did not; `inspect node NAME...` limits the view to those nodes.")
    _options(p, defaults=True)
    what = p.add_subparsers(dest="inspect_what", metavar="{pod,node,check}")
    pod = what.add_parser("pod", help="where a pod went (node, GPUs, share) or why it is pending")
    pod.add_argument("name")
    pod.add_argument("-n", "--namespace", help="the pod's namespace (default: the context's, else default)")
    _options(pod, defaults=False)
    node = what.add_parser("node", help="the GPU view of some nodes only")
    node.add_argument("names", nargs="+", metavar="NAME")
    _options(node, defaults=False)
    check = what.add_parser(
        "check", help="check fgpu's invariants on the cluster; exit 1 and one line per violation if any fail",
        description="No GPU over-allocated (compute, memory; exclusive GPUs and MIG instances held once), no "
                    "bound pod without its hand-off annotation, no hand-off annotation on an unbound pod; with "
                    "--daemon-metrics, no context a node daemon holds open for a pod that is gone, finished or "
                    "placed elsewhere.")
    check.add_argument("--daemon-metrics", action="append", default=[], metavar="[NODE=]URL",
                       help="a node daemon's metrics endpoint (simgpu daemon --metrics-port), repeatable: its open "
                            "contexts are checked too; the node is the scrape's Hostname label unless NODE= names it")
    _options(check, defaults=False)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    targets = [parse_target(v) for v in getattr(args, "daemon_metrics", ())]  # bad input before any read
    session, namespace = _connect(args.kubeconfig, args.context)
    with session as api:
        if args.inspect_what == "pod":
            report = _inspect_pod(api, args.name, args.namespace or namespace)
        elif args.inspect_what == "check":
            report = _check(api, targets)
        else:
            report = _inspect_cluster(api, getattr(args, "names", None))
    sys.stdout.write(render(report, args.output))
    return 1 if getattr(report, "ok", True) is False else 0


# --- reading the cluster -------------------------------------------------------------------------------------
def _inspect_cluster(api, only: list[str] | None):
    from kubernetes import client

    core = client.CoreV1Api(api)
    nodes = list(_pages(core.list_node))
    if only:
        missing = sorted(set(only) - {(n.get("metadata") or {}).get("name") for n in nodes})
        if missing:
            raise InputError(f"no such node: {', '.join(missing)}", field="node")
        nodes = [n for n in nodes if n["metadata"]["name"] in only]
    pods = list(_pages(core.list_pod_for_all_namespaces))
    if only:
        pods = [p for p in pods if (p.get("spec") or {}).get("nodeName") in only]
    return cluster_report(nodes, pods, _gpunodes(api))


def _check(api, targets: list[Target]):
    """Pods are listed before the daemons are scraped: a context then open belongs to a pod listed, unless
    that pod was created in between (seconds before its container could open one)."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    nodes, pods, gpunodes = list(_pages(core.list_node)), list(_pages(core.list_pod_for_all_namespaces)), _gpunodes(api)
    slices, claims = _dra_objects(api, "resourceslices"), _dra_objects(api, "resourceclaims")
    contexts = read_contexts(targets) if targets else None
    return check(nodes, pods, gpunodes, contexts=contexts, slices=slices, claims=claims)


def _dra_objects(api, plural: str) -> list[dict]:
    """resource.k8s.io/v1 objects of every namespace, or none where the API is not served or not readable to
    us (a cluster without DRA has nothing to check)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    custom = client.CustomObjectsApi(api)
    try:
        return list(_pages(lambda **kw: custom.list_cluster_custom_object("resource.k8s.io", "v1", plural, **kw)))
    except ApiException as e:
        if e.status in (403, 404):
            return []
        raise


def _gpunodes(api) -> list[dict]:
    """GPUNode objects, or none where the CRD is not installed or not readable to us (the annotation is the
    source that is always there)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    custom = client.CustomObjectsApi(api)
    try:
        return list(_pages(lambda **kw: custom.list_cluster_custom_object(
            keys.CRD_GROUP, keys.CRD_VERSION, keys.GPUNODE_PLURAL, **kw)))
    except ApiException as e:
        if e.status in (403, 404):
            return []
        raise


def _inspect_pod(api, name: str, namespace: str):
    from kubernetes import client

    core = client.CoreV1Api(api)
    pod = _get(lambda **kw: core.read_namespaced_pod(name, namespace, **kw), f"pod {namespace}/{name}")
    node_name = (pod.get("spec") or {}).get("nodeName")
    node = _get(lambda **kw: core.read_node(node_name, **kw), None) if node_name else None
    events = []
    if not node_name:
        events = list(_pages(lambda **kw: core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.kind=Pod,involvedObject.name={name}", **kw)))
    return pod_report(pod, node, events)


def _pages(list_call: Callable[..., object]) -> Iterator[dict]:
    """Every item of a list call, page by page, as raw JSON."""
    token = None
    while True:
        page = _json(list_call(limit=PAGE, _continue=token, _preload_content=False, _request_timeout=TIMEOUT_S))
        yield from page.get("items") or ()
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return


def _get(read_call: Callable[..., object], what: str | None) -> dict | None:
    """One object as raw JSON; a 404 is an InputError naming `what`, or None when `what` is None."""
    from kubernetes.client.rest import ApiException

    try:
        return _json(read_call(_preload_content=False, _request_timeout=TIMEOUT_S))
    except ApiException as e:
        if e.status != 404:
            raise
        if what is None:
            return None
        raise InputError(f"{what} not found") from None


def _json(response) -> dict:
    return json.loads(response.data)


# --- logging in ----------------------------------------------------------------------------------------------
class _Api:
    """An ApiClient whose API errors and connection failures leave as one-line InputErrors."""

    def __init__(self, configuration):
        from kubernetes import client

        self.client = client.ApiClient(configuration)
        self.server = configuration.host

    def __enter__(self):
        return self.client

    def __exit__(self, kind, error, tb) -> None:
        from kubernetes.client.rest import ApiException
        from urllib3.exceptions import HTTPError

        self.client.close()
        if isinstance(error, ApiException):
            raise InputError(f"the Kubernetes API at {self.server} answered {error.status} {error.reason}: "
                             f"{_api_message(error)}") from None
        if isinstance(error, HTTPError | OSError):
            raise InputError(f"cannot reach the Kubernetes API at {self.server}: {_root(error)}",
                             ) from None


def _api_message(error) -> str:
    try:
        return json.loads(error.body).get("message", "")
    except (TypeError, ValueError, AttributeError):
        return str(error.body or "")[:200]


def _root(error: BaseException) -> str:
    """The innermost cause (urllib3 wraps the refused connection twice), on one line."""
    while getattr(error, "reason", None) is not None and isinstance(error.reason, BaseException):
        error = error.reason
    return " ".join(str(error).split())


def _connect(kubeconfig: str | None, context: str | None) -> tuple[_Api, str]:
    """The API client and the namespace `-n` defaults to, found as kubectl finds them."""
    from kubernetes import client, config

    logging.getLogger("urllib3").setLevel(logging.ERROR)  # no retry warnings around the one error line
    cfg = client.Configuration()
    cfg.retries = 0  # a CLI answers at once; the user re-runs it
    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    in_cluster = not (kubeconfig or os.environ.get("KUBECONFIG") or os.path.exists(path))
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=cfg)
            return _Api(cfg), _SA_NAMESPACE.read_text().strip() if _SA_NAMESPACE.exists() else "default"
        config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
        return _Api(cfg), _context_namespace(path, context)
    except (config.ConfigException, OSError, ValueError, TypeError) as e:
        where = "no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not in a pod" if in_cluster \
            else f"cannot use kubeconfig {path}"
        raise InputError(f"{where}: {' '.join(str(e).split())}", field="kubeconfig") from None


def _context_namespace(path: str, context: str | None) -> str:
    from kubernetes import config

    contexts, current = config.list_kube_config_contexts(config_file=path)
    chosen = next((c for c in contexts if c.get("name") == context), current) if context else current
    return ((chosen or {}).get("context") or {}).get("namespace") or "default"
