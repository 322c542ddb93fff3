"""Install fgpu with its Helm chart onto a running cluster and check that it works, the same way on every
kind of cluster: `make cluster-up`'s (devcluster.cluster), kind's and minikube's (deploy/quickstart.sh).

    python -m devcluster.install [--kubeconfig K] [--context C] [-f VALUES]... [--set K=V]... [--image fgpu:dev]
                                 [--namespace fgpu-system] [--release fgpu] [--helm PATH] [--uninstall]

`helm upgrade --install` with the chart's own templates and the values given, then the checks a user would
make, each timed: every pod of the release Running and Ready; one operator replica holding the scheduler's
Lease; the webhook reached by the apiserver through its Service (an invalid pod is denied with fgpu's own
message, a valid one mutated, both as dry runs); on each node of a pool, the device plugin registered with
the kubelet (the node advertises the pool's resources) and the node's GPUNode published; on a DRA pool,
fgpu-dra registered with the kubelet (its log says so) and the node's ResourceSlices published. Prints one line per
check; exit 1 with the failed check's line otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "fgpu"
LEASE = "fgpu-scheduler"  # operator/kube/leader.py's Lease, in the release namespace
INVALID = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fgpu-install-check-invalid",
           "annotations": {"fgpu.io/gpu-fraction": "1.5"}},
           "spec": {"containers": [{"name": "c", "image": "fgpu:dev"}]}}
# a share with its memory as an amount: valid on DRA too, whatever memory the cluster's GPUs have (a fraction
# alone is refused there when they differ: a claim's memory is an amount; docs/dra.md)
VALID = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fgpu-install-check-valid",
         "annotations": {"fgpu.io/gpu-fraction": "0.1", "fgpu.io/gpu-memory": "1Gi"}},
         "spec": {"containers": [{"name": "c", "image": "fgpu:dev"}]}}


class InstallError(Exception):
    """A step or check failed; the message is one line (plus the evidence) saying which and why."""


@dataclass
class Target:
    """Where to install: kubeconfig/context, release, namespace, helm binary, the check namespace."""

    kubeconfig: Path | None = None
    context: str | None = None
    release: str = "fgpu"
    namespace: str = "fgpu-system"
    helm: str = "helm"
    check_namespace: str = "default"  # a namespace the webhook covers (never the release's own)
    timings: dict[str, float] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.kubeconfig:
            env["KUBECONFIG"] = str(self.kubeconfig)
        return env

    def helm_run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        ctx = ["--kube-context", self.context] if self.context else []
        done = subprocess.run([self.helm, *ctx, *args], capture_output=True, text=True, env=self.env(),
                              timeout=timeout)
        if done.returncode != 0:
            raise InstallError(f"helm {args[0]} failed: {(done.stderr or done.stdout).strip()[-1500:]}")
        return done

    def api(self):
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig) if self.kubeconfig else None,
                                             context=self.context)


def wait(check, timeout: float, what: str, interval: float = 1.0, show=None):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise InstallError(f"{what}: not after {timeout:.0f} s" + (f"; last seen: {show()}" if show else ""))
        time.sleep(interval)


def install(target: Target, values: list[Path], sets: list[str], image: str | None, timeout: float = 600) -> None:
    args = ["upgrade", "--install", target.release, str(CHART), "--namespace", target.namespace,
            "--create-namespace", "--wait", f"--timeout={int(timeout)}s"]
    for v in values:
        args += ["-f", str(v)]
    if image:
        repo, _, tag = image.rpartition(":")
        args += ["--set", f"image.repository={repo}", "--set", f"image.tag={tag}"]
    for s in sets:
        args += ["--set", s]
    t = time.monotonic()
    target.helm_run(*args, timeout=timeout + 60)
    target.timings["helm_install_s"] = round(time.monotonic() - t, 1)


def release_pods(core, target: Target) -> list[dict]:
    raw = core.list_namespaced_pod(target.namespace, label_selector=f"app.kubernetes.io/instance={target.release}",
                                   _preload_content=False)
    return json.loads(raw.data)["items"]


def _ready(pod: dict) -> bool:
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions") or []}
    return pod.get("status", {}).get("phase") == "Running" and conditions.get("Ready") == "True" \
        and pod["metadata"].get("deletionTimestamp") is None


def pod_states(pods: list[dict]) -> dict[str, str]:
    out = {}
    for pod in pods:
        waiting = [s["state"]["waiting"].get("reason", "") for s in pod.get("status", {}).get("containerStatuses") or []
                   if "waiting" in s.get("state", {})]
        out[pod["metadata"]["name"]] = "Ready" if _ready(pod) else (
            f"{pod.get('status', {}).get('phase')} {' '.join(waiting)}".strip())
    return out


def check(target: Target, say=print, timeout: float = 300) -> dict:
    """The checks of the module docstring; returns what they found (pods, leader, resources per node)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    found: dict = {}
    with target.api() as api:
        core, coord = client.CoreV1Api(api), client.CoordinationV1Api(api)
        t0 = time.monotonic()
        pods = wait(lambda: (p := release_pods(core, target)) and all(_ready(x) for x in p) and p, timeout,
                    "every pod of the release Running and Ready",
                    show=lambda: pod_states(release_pods(core, target)))
        found["pods"] = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods}
        target.timings["pods_ready_s"] = round(time.monotonic() - t0, 1)
        say(f"ok: {len(pods)} pods Running and Ready: " +
            ", ".join(f"{n} on {node}" for n, node in sorted(found["pods"].items())))

        operators = {n for n in found["pods"] if "operator" in n}

        def leader():
            try:
                lease = coord.read_namespaced_lease(LEASE, target.namespace)
            except ApiException:
                return None
            holder = lease.spec.holder_identity or ""
            return next((n for n in operators if holder.startswith(n)), None)

        found["leader"] = wait(leader, 60, f"one of the operator pods {sorted(operators)} holding Lease {LEASE}")
        say(f"ok: {found['leader']} leads (Lease {target.namespace}/{LEASE}); "
            f"{len(operators) - 1} standby")

        try:
            core.create_namespaced_pod(target.check_namespace, INVALID, dry_run="All")
        except ApiException as e:
            message = json.loads(e.body).get("message", "") if e.body else str(e)
            if "fgpu" not in message or "gpu-fraction" not in message:
                raise InstallError(f"the invalid pod was refused, but not by fgpu's webhook: {message}") from None
            say(f"ok: the apiserver calls the webhook through its Service; an invalid pod is denied: {message}")
        else:
            raise InstallError("an invalid pod (fgpu.io/gpu-fraction: 1.5) was admitted: the webhook is not called")
        mutated = json.loads(core.create_namespaced_pod(target.check_namespace, VALID, dry_run="All",
                                                        _preload_content=False).data)
        scheduler = mutated["spec"].get("schedulerName")
        claims = [c.get("resourceClaimTemplateName") for c in mutated["spec"].get("resourceClaims") or ()]
        if scheduler == "default-scheduler" and not claims:
            raise InstallError("a valid 0.1-GPU pod was admitted unchanged: the mutating webhook is not called")
        # with dra.allocator kube-scheduler, the share is a claim and the pod stays kube-scheduler's
        say(f"ok: a 0.1-GPU pod is admitted and handed to {scheduler}" + (f" with claim {claims[0]}" if claims else ""))

        node_pods = [p for p in pods if "operator" not in p["metadata"]["name"] and p["spec"].get("nodeName")]
        dra_pods = {p["spec"]["nodeName"]: p for p in node_pods
                    if any(c["name"] == DRA_CONTAINER for c in p["spec"]["containers"])}
        found["dra"] = {}
        for node, pod in sorted(dra_pods.items()):
            found["dra"][node] = wait(lambda node=node, pod=pod: _dra_ready(core, api, node, pod), 120,
                                      f"fgpu-dra on {node} registered with its kubelet and its ResourceSlices published",
                                      show=lambda node=node, pod=pod: _dra_state(core, api, node, pod))
            say(f"ok: {node}'s fgpu-dra is registered with its kubelet and publishes {found['dra'][node]} devices")
        nodes = {p["spec"]["nodeName"] for p in node_pods} - set(dra_pods)
        found["resources"] = {}
        for node in sorted(nodes):
            def advertised(node=node):
                """Every device resource the plugin's inventory lists, with its count, is allocatable (the
                plugin registers them one by one, and the kubelet reports each a moment later)."""
                from fgpu_contracts import keys
                from fgpu_contracts.inventory import parse_inventory

                status = json.loads(core.read_node(node, _preload_content=False).data)
                raw = status["metadata"].get("annotations", {}).get(keys.INVENTORY)
                if raw is None:
                    return None
                have = {k: v for k, v in status["status"].get("allocatable", {}).items()
                        if k.startswith(("nvidia.com/", "fgpu.io/"))}
                want = parse_inventory(raw).resources
                return have if all(have.get(r) == str(n) for r, n in want.items()) else None

            found["resources"][node] = wait(advertised, 120, f"node {node} to advertise fgpu's devices")
            say(f"ok: {node}'s device plugin is registered with its kubelet: " +
                ", ".join(f"{k}: {v}" for k, v in sorted(found["resources"][node].items())))
    found["timings"] = dict(target.timings)
    return found


DRA_CONTAINER = "dra-driver"  # the node DaemonSet's container on a DRA pool (charts/fgpu/templates/node.yaml)
REGISTERED = "the kubelet registered driver"  # fgpu-dra's log line on NotifyRegistrationStatus(registered)


def _dra_state(core, api, node: str, pod: dict) -> tuple[int, bool]:
    """(devices fgpu-dra publishes for the node, whether its log says the kubelet registered it)."""
    from kubernetes import client

    from fgpu_contracts.dra import DRIVER

    slices = client.CustomObjectsApi(api).list_cluster_custom_object(
        "resource.k8s.io", "v1", "resourceslices", field_selector=f"spec.nodeName={node},spec.driver={DRIVER}")
    devices = sum(len(s["spec"].get("devices") or []) for s in slices["items"])
    log = core.read_namespaced_pod_log(pod["metadata"]["name"], pod["metadata"]["namespace"], container=DRA_CONTAINER)
    return devices, REGISTERED in log


def _dra_ready(core, api, node: str, pod: dict) -> int | None:
    devices, registered = _dra_state(core, api, node, pod)
    return devices if devices and registered else None


def uninstall(target: Target, timeout: float = 300) -> None:
    target.helm_run("uninstall", target.release, "--namespace", target.namespace, "--wait",
                    f"--timeout={int(timeout)}s", timeout=timeout + 60)


def default_helm() -> str:
    testbin = os.environ.get("FGPU_TESTBIN")
    if testbin and os.access(Path(testbin) / "helm", os.X_OK):
        return str(Path(testbin) / "helm")
    return shutil.which("helm") or "helm"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m devcluster.install", description=__doc__.split("\n\n")[0])
    p.add_argument("--kubeconfig", type=Path, help="default: $KUBECONFIG, then ~/.kube/config")
    p.add_argument("--context", help="kubeconfig context (kind-fgpu, minikube, ...)")
    p.add_argument("-f", "--values", type=Path, action="append", default=[], help="a values file (repeatable)")
    p.add_argument("--set", dest="sets", action="append", default=[], help="a value, KEY=VALUE (repeatable)")
    p.add_argument("--image", help="the image as REPO:TAG (sets image.repository and image.tag)")
    p.add_argument("--namespace", default="fgpu-system")
    p.add_argument("--release", default="fgpu")
    p.add_argument("--helm", default=default_helm(), help="the helm binary (default: testbin's, then PATH)")
    p.add_argument("--check-only", action="store_true", help="only run the checks on an installed release")
    p.add_argument("--uninstall", action="store_true", help="helm uninstall the release and wait for it")
    args = p.parse_args(argv)
    for v in args.values:
        if not v.is_file():
            p.error(f"--values: {v} is not a file")
    if args.image and ":" not in args.image:
        p.error(f"--image: {args.image!r} is not REPO:TAG (e.g. fgpu:dev)")
    target = Target(args.kubeconfig, args.context, args.release, args.namespace, args.helm)
    try:
        if args.uninstall:
            uninstall(target)
            print(f"uninstalled {args.release} from {args.namespace}")
            return 0
        if not args.check_only:
            install(target, args.values, args.sets, args.image)
            print(f"ok: helm upgrade --install {args.release} ({target.timings['helm_install_s']:.0f} s)")
        found = check(target)
    except (InstallError, subprocess.TimeoutExpired) as e:
        print(f"install: {e}", file=sys.stderr)
        return 1
    print(yaml.safe_dump({"timings": found["timings"]}, sort_keys=False).strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
