"""DRA claim allocation: kube-scheduler's DynamicResources plugin against fgpu-scheduler's own allocator, beside
fgpu's device-plugin path, on KWOK nodes whose GPUs fgpu-dra's ResourceSlices publish (docs/dra.md).

    FGPU_TESTBIN=$(hack/testbin.sh) .venv/bin/python bench/dra.py [--nodes 1000] [--gpus-per-node 8]
        [--pods 400] [--rate 50] [--qps 500] [--burst 1000] [--paths kube-dra,fgpu-dra,fgpu-dp] [--policy fgpu]

Each pod asks for "8Gi and 30%" of a GPU: through a ResourceClaimTemplate (gpu-share.fgpu.io) on the DRA paths,
through fgpu's request annotation on the device-plugin path. Every path runs twice: `fast` (all pods created
at once: pods bound per second) and at `--rate` pods/s offered (p50/p99 create->bound). kube-scheduler, fgpu's
operator and kube-controller-manager (which makes the claims from templates, at 20 QPS by default) get the same
client QPS/burst. The slices are published untainted for kube-scheduler's runs and with fgpu-scheduler's
allocator taint for fgpu's (`fgpu-dra --allocator fgpu-scheduler`); the device-plugin path's nodes carry
fgpu's inventory annotation instead. Tables on stdout, progress on stderr.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "e2e"), str(REPO / "bench")]

from lib.common import GPU, SLOTS_PER_GPU, log  # noqa: E402
from lib.load import delete_pods, run_pods, summarize  # noqa: E402
from lib.procs import proc_cpu  # noqa: E402

DRA = "/apis/resource.k8s.io/v1"
PATHS = ("kube-dra", "fgpu-dra", "fgpu-dp")
CONFIG = "version: v1\ngpus:\n  - {{model: A100-80GB, count: {n}, sharing: fractional}}\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from fgpu_contracts.cli import OneLineParser

    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--pods", type=int, default=400, help="pods per run")
    p.add_argument("--rate", type=float, default=50.0, help="pods/s offered in the rate runs")
    p.add_argument("--qps", type=float, default=500.0, help="client QPS of every component")
    p.add_argument("--burst", type=int, default=1000, help="client burst of every component")
    p.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated, of {', '.join(PATHS)}")
    p.add_argument("--policy", default="fgpu", help="fgpu's node policy")
    p.add_argument("--stall", type=float, default=30.0, help="give up a run when nothing binds this long")
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args(argv)
    args.paths = [x.strip() for x in args.paths.split(",") if x.strip()]
    bad = [x for x in args.paths if x not in PATHS]
    if bad:
        p.error(f"--paths: {bad[0]!r}; allowed: {', '.join(PATHS)}")
    for name in ("nodes", "gpus_per_node", "pods", "burst"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}: {getattr(args, name)}; allowed: 1 or more")
    if args.rate <= 0 or args.qps <= 0:
        p.error("--rate and --qps: allowed: above 0")
    return args


# --- the cluster's objects ---------------------------------------------------------------------------------
def template() -> dict:
    from fgpu_contracts import dra as names

    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "share"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": names.CLASS_SHARE,
                "capacity": {"requests": {names.CAP_MEMORY: "8Gi", names.CAP_SM_SHARE: "30"}}}}]}}}}


def claim_pod(i: int, scheduler: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}"},
            "spec": {"schedulerName": scheduler, "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "share"}],
                     "containers": [{"name": "main", "image": "busybox", "resources": {
                         "requests": {"cpu": "100m"}, "claims": [{"name": "gpu"}]}}]}}


def annotated_pod(i: int) -> dict:
    from operator_proc import share_pod

    return share_pod(f"p{i}", 300, 8)


async def _all(api, calls, what: str, created: bool = False) -> None:
    """`created`: a create the session retried after a timeout may find its own first attempt (409): written."""
    outs = await asyncio.gather(*calls)
    bad = [o for o in outs if not o.ok and not (created and o.status == 409)]
    if bad:
        raise RuntimeError(f"{what}: {len(bad)} failed, e.g. {bad[0]}")


async def publish(creds, nodes: list[str], gpus: int, allocator: str) -> None:
    """Every node's fgpu-dra slices, replaced (the allocator's taint is part of each device)."""
    import yaml
    from fgpu_operator.kube import ApiSession, Limits

    from deviceplugin.dra.devices import node_devices
    from deviceplugin.dra.slices import resource_slices
    from simgpu.nodeconfig import parse_node_config

    cfg = parse_node_config(yaml.safe_load(CONFIG.format(n=gpus)))
    async with ApiSession(creds, Limits(qps=0, max_in_flight=32), user_agent="fgpu-bench") as api:
        out = await api.request("DELETE", f"{DRA}/resourceslices",
                                params={"labelSelector": "app.kubernetes.io/managed-by=fgpu-dra"})
        if not out.ok:
            raise RuntimeError(f"deleting slices: {out}")
        bodies = [s for n in nodes for s in resource_slices(n, node_devices(cfg, n), {}, "default",
                                                            allocator=allocator)]
        await _all(api, [api.request("POST", f"{DRA}/resourceslices", body=b) for b in bodies], "creating slices",
                   created=True)


async def annotate(creds, nodes: list[str], gpus: int, on: bool) -> None:
    """fgpu's inventory annotation (the device-plugin path) on or off every node, and its GPU slots."""
    from fgpu_operator.kube import ApiSession, Limits
    from inventories import fractional_inventory

    from fgpu_contracts import keys

    merge = "application/merge-patch+json"
    slots = str(SLOTS_PER_GPU * gpus) if on else "0"
    async with ApiSession(creds, Limits(qps=0, max_in_flight=32), user_agent="fgpu-bench") as api:
        await _all(api, [api.request("PATCH", f"/api/v1/nodes/{n}", content_type=merge, body={"metadata": {
            "annotations": {keys.INVENTORY: fractional_inventory(n, gpus) if on else None}}}) for n in nodes],
            "annotating nodes")
        await _all(api, [api.request("PATCH", f"/api/v1/nodes/{n}/status", content_type=merge, body={"status": {
            "capacity": {GPU: slots}, "allocatable": {GPU: slots}}}) for n in nodes], "node GPU slots")


async def claims_gone(creds, namespace: str, timeout: float = 180.0) -> None:
    """The controller-manager deletes a template's claims after their pods; the next run needs the devices."""
    from fgpu_operator.kube import ApiSession, Limits

    async with ApiSession(creds, Limits(qps=0, max_in_flight=1), user_agent="fgpu-bench") as api:
        deadline = time.monotonic() + timeout
        while (await api.request("GET", f"{DRA}/namespaces/{namespace}/resourceclaims",
                                 params={"limit": "1"})).body.get("items"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"claims of {namespace} still there {timeout:.0f} s after their pods")
            await asyncio.sleep(0.5)


# --- runs ---------------------------------------------------------------------------------------------------
def one_run(plane, creds, path: str, mode: str, args, pid: int, serial: int) -> dict:
    from fgpu_contracts import keys

    namespace = plane.create_namespace(f"dra-{serial}-{path}-{mode}")
    if path != "fgpu-dp":
        with plane.api() as api:
            from kubernetes import client

            client.CustomObjectsApi(api).create_namespaced_custom_object(
                "resource.k8s.io", "v1", namespace, "resourceclaimtemplates", template())
    scheduler = "default-scheduler" if path == "kube-dra" else keys.SCHEDULER_NAME
    bodies = [annotated_pod(i) if path == "fgpu-dp" else claim_pod(i, scheduler) for i in range(args.pods)]
    rate = args.rate if mode == "rate" else None
    pids = {"scheduler": pid, "controller-manager": plane.pid("kube-controller-manager"),
            "apiserver": plane.pid("kube-apiserver")}
    cpu0 = {k: proc_cpu(p, children=k == "scheduler") for k, p in pids.items()}
    label = f"{path} {mode}"
    log(f"run {serial}: {label}, {args.pods} pods on {args.nodes} nodes")
    trace = asyncio.run(run_pods(creds, namespace, bodies, rate, args.stall, label))
    row = summarize(trace, {k: proc_cpu(p, children=k == "scheduler") - cpu0[k] for k, p in pids.items()})
    row.pop("bound_at", None)
    row.update(path=path, mode=mode, rate_offered=rate, pods=args.pods)
    log(f"  -> {row['bound']}/{args.pods} bound, {row['pods_per_s']:.1f} pods/s, p50 {row['p50']:.2f} s, "
        f"p99 {row['p99']:.2f} s")
    asyncio.run(delete_pods(creds, namespace, [b["metadata"]["name"] for b in bodies]))
    if path != "fgpu-dp":
        asyncio.run(claims_gone(creds, namespace))
    return row


def run_path(plane, workdir: Path, creds, path: str, args, rows: list[dict]) -> None:
    from operator_proc import start_operator, stop

    from fgpu_contracts import dra as names

    gpus = args.gpus_per_node
    if path == "fgpu-dp":
        asyncio.run(publish(creds, [], gpus, names.ALLOCATOR_KUBE))  # no slices: the inventory is the node's
        asyncio.run(annotate(creds, plane_nodes(args), gpus, on=True))
    else:
        allocator = names.ALLOCATOR_KUBE if path == "kube-dra" else names.ALLOCATOR_FGPU
        asyncio.run(publish(creds, plane_nodes(args), gpus, allocator))
    operator = None
    try:
        if path == "kube-dra":
            plane.start_scheduler(args.qps, args.burst)
            pid = plane.pid("kube-scheduler")
        else:
            operator = start_operator(plane, workdir, "--qps", f"{args.qps:g}", "--burst", str(args.burst),
                                      policy=args.policy, log_name=f"operator-{path}.log")
            pid = operator.pid
        time.sleep(0.5)
        for mode in ("fast", "rate"):
            rows.append(one_run(plane, creds, path, mode, args, pid, len(rows) + 1))
    finally:
        if operator is not None:
            stop(operator)
        plane.stop_component("kube-scheduler")


def plane_nodes(args) -> list[str]:
    return [f"dra-node-{i:04d}" for i in range(args.nodes)]


def table(rows: list[dict], args) -> str:
    lines = ["path      mode   offered  bound  pods/s  p50 s  p99 s  scheduler CPU  controller-manager CPU",
             "--------  -----  -------  -----  ------  -----  -----  -------------  ----------------------"]
    for r in rows:
        offered = f"{r['rate_offered']:g}/s" if r["rate_offered"] else "all"
        lines.append(f"{r['path']:<8}  {r['mode']:<5}  {offered:>7}  {r['bound']:>5}  {r['pods_per_s']:>6.1f}  "
                     f"{r['p50']:>5.2f}  {r['p99']:>5.2f}  {r['cpu']['scheduler']:>12.0%}  "
                     f"{r['cpu']['controller-manager']:>21.0%}")
    by = {(r["path"], r["mode"]): r for r in rows}
    kube, fgpu = by.get(("kube-dra", "fast")), by.get(("fgpu-dra", "fast"))
    if kube and fgpu and kube["pods_per_s"] > 0:
        ratio = fgpu["pods_per_s"] / kube["pods_per_s"]
        lines.append(f"\nfgpu-dra / kube-dra (fast): {ratio:.2f}x (target >= 2x): {'met' if ratio >= 2 else 'NOT met'}")
    if (rated := by.get(("fgpu-dra", "rate"))) is not None:
        ok = rated["p99"] <= 1.0 and rated["bound"] == rated["pods"]
        lines.append(f"fgpu-dra p99 at {args.rate:g}/s offered: {rated['p99']:.2f} s (target <= 1 s): "
                     f"{'met' if ok else 'NOT met'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from fgpu_operator.kube import load_kubeconfig

    from devcluster.kubeplane import ControlPlane, TestbinError, find_testbin

    args = parse_args(argv)
    try:
        testbin = find_testbin(os.environ.get("FGPU_TESTBIN"))
    except TestbinError as err:
        print(f"bench/dra.py: {err}", file=sys.stderr)
        return 2
    began = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="fgpu-bench-dra-"))
    plane = ControlPlane(testbin, workdir / "plane", workdir / "etcd")
    rows: list[dict] = []
    ok = False
    try:
        plane.start()
        plane.start_kwok(None)
        plane.start_controller_manager(args.qps, args.burst)
        creds = load_kubeconfig(plane.kubeconfig)
        start = time.perf_counter()
        plane.make_kwok_nodes(plane_nodes(args), {GPU: 0})
        log(f"{args.nodes} KWOK nodes Ready in {time.perf_counter() - start:.1f} s")
        from kubernetes import client

        from deviceplugin.dra.classes import device_classes
        with plane.api() as api:
            for cls in device_classes():
                client.CustomObjectsApi(api).create_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", cls)
        for path in args.paths:  # the DRA paths first: the device-plugin path's annotation stays on after it
            start = time.perf_counter()
            run_path(plane, workdir, creds, path, args, rows)
            log(f"{path}: {time.perf_counter() - start:.0f} s")
        ok = True
    except KeyboardInterrupt:
        log("interrupted: stopping everything")
    except Exception:
        traceback.print_exc()
    finally:
        plane.stop()
        shutil.rmtree(workdir / "etcd", ignore_errors=True)
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            log(f"logs kept in {workdir}")
    print(f"bench/dra.py: {args.nodes} KWOK nodes x {args.gpus_per_node} GPUs, {args.pods} pods per run of "
          f"\"8Gi and 30%\", client QPS/burst {args.qps:g}/{args.burst} for kube-scheduler, fgpu and "
          f"kube-controller-manager, fgpu policy {args.policy}; {time.perf_counter() - began:.0f} s in all\n")
    print(table(rows, args))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
