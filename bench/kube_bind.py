"""Bind throughput of fgpu_operator.kube.bind against a real kube-apiserver: N pending pods exist, then a
pool of 64 workers binds them all (Binding with hand-off annotations, round-robin over KWOK nodes), once per
client rate limit. Compare with the do-nothing binders' backlog drain in docs/architecture.md ("Decisions").

Starts etcd + kube-apiserver + KWOK from $FGPU_TESTBIN (devcluster/kubeplane.py), or uses --kubeconfig.

    FGPU_TESTBIN=$(hack/testbin.sh | tail -n1) .venv/bin/python bench/kube_bind.py [--pods 2000] [--nodes 10]
        [--limits none,500/1000,50/100] [--in-flight 64]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "e2e")]

from fgpu_operator.kube import ApiSession, Limits, Result, bind, load_kubeconfig  # noqa: E402

HANDOFF = {"fgpu.io/assignment": '{"version":"v1","gpus":[{"uuid":"GPU-0","memMiB":8192}]}'}


def parse_limit(text: str) -> tuple[float, int]:
    """'500/1000' -> (500, 1000); 'none' -> no client-side limit."""
    if text == "none":
        return 0.0, 0
    qps, burst = text.split("/")
    return float(qps), int(burst)


async def create_pods(api: ApiSession, namespace: str, count: int, in_flight: int) -> list[tuple[str, str]]:
    """(name, uid) of `count` pending pods, created `in_flight` at a time."""
    made: list[tuple[str, str]] = []

    async def one(i: int) -> None:
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}"},
                "spec": {"containers": [{"name": "main", "image": "busybox",
                                         "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
        out = await api.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=body)
        if not out.ok:
            raise SystemExit(f"creating pod p{i} failed: {out}")
        made.append((out.body["metadata"]["name"], out.body["metadata"]["uid"]))

    await run_pool(count, in_flight, one)
    return made


async def run_pool(count: int, workers: int, job) -> None:
    """Run job(0..count-1) with `workers` at a time."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(count):
        queue.put_nowait(i)

    async def worker() -> None:
        while not queue.empty():
            await job(queue.get_nowait())

    await asyncio.gather(*(worker() for _ in range(workers)))


async def bind_all(api: ApiSession, namespace: str, pods, nodes: list[str], in_flight: int) -> dict:
    latencies: list[float] = []
    results: Counter[Result] = Counter()

    async def one(i: int) -> None:
        name, uid = pods[i]
        start = time.perf_counter()
        out = await bind(api, namespace, name, uid, nodes[i % len(nodes)], HANDOFF)
        latencies.append(time.perf_counter() - start)
        results[out.result] += 1

    start, cpu = time.perf_counter(), time.process_time()
    await run_pool(len(pods), in_flight, one)
    took = time.perf_counter() - start
    latencies.sort()
    return {"seconds": took, "rate": len(pods) / took, "cpu": (time.process_time() - cpu) / took, "p50": statistics.median(latencies),
            "p99": latencies[int(0.99 * (len(latencies) - 1))], "results": results}


async def bench(kubeconfig: Path, nodes: list[str], args) -> None:
    creds = load_kubeconfig(kubeconfig)
    async with ApiSession(creds, Limits(qps=0, max_in_flight=args.in_flight)) as setup:
        for n, text in enumerate(args.limits.split(",")):
            namespace = f"bench-bind-{n}"
            ns = await setup.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
            sa = await setup.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                                     body={"metadata": {"name": "default"}})
            if not (ns.ok and sa.result in (Result.OK, Result.CONFLICT)):
                raise SystemExit(f"namespace {namespace}: {ns} / {sa}")
            made = time.perf_counter()
            pods = await create_pods(setup, namespace, args.pods, args.in_flight)
            created = args.pods / (time.perf_counter() - made)
            qps, burst = parse_limit(text)
            async with ApiSession(creds, Limits(qps=qps, burst=burst, max_in_flight=args.in_flight)) as api:
                row = await bind_all(api, namespace, pods, nodes, args.in_flight)
            print_row({"limit": text, "created": created, **row})


def print_header(args) -> None:
    print(f"\n{args.pods} pods, {args.nodes} KWOK nodes, {args.in_flight} binds in flight\n")
    print("| client QPS/burst | pods created/s | bind time | pods/s | bind p50 | bind p99 | binder CPU | outcomes |")
    print("|---|---|---|---|---|---|---|---|")


def print_row(row: dict) -> None:
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(row["results"].items()))
    print(f"| {row['limit']} | {row['created']:.0f} | {row['seconds']:.2f} s | **{row['rate']:.0f}** | "
          f"{row['p50'] * 1000:.1f} ms | {row['p99'] * 1000:.1f} ms | {row['cpu']:.0%} | {outcomes} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--in-flight", type=int, default=64)
    ap.add_argument("--limits", default="none,500/1000,50/100", help="comma-separated QPS/burst or 'none'")
    ap.add_argument("--kubeconfig", type=Path, help="an existing cluster (nodes must exist: node-0..N-1)")
    args = ap.parse_args()
    print_header(args)
    if args.kubeconfig:
        asyncio.run(bench(args.kubeconfig, [f"node-{i}" for i in range(args.nodes)], args))
        return
    from devcluster.kubeplane import ControlPlane, find_testbin

    workdir = Path(tempfile.mkdtemp(prefix="fgpu-bench-bind-"))
    plane = ControlPlane(find_testbin(os.environ.get("FGPU_TESTBIN")), workdir / "plane", workdir / "etcd")
    try:
        plane.start()
        nodes = [f"bench-node-{i}" for i in range(args.nodes)]
        for node in nodes:
            plane.make_kwok_node(node, {"nvidia.com/gpu": 8})
        asyncio.run(bench(plane.kubeconfig, nodes, args))
    finally:
        plane.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
