"""What one pod watch event costs the operator, apart from any decision: Kopf's per-event machinery, the watch's
JSON decoding and fgpu's handler, against a plain watch of the same events.

Pods the operator does not schedule (another schedulerName, never bound) are created, then labelled, then
deleted: one ADDED, one MODIFIED and one DELETED event each, which the operator's pod handler takes in and drops
at its first check. The operator's CPU (its main process; the writer child has nothing to write) during each
phase, less its idle CPU over the same time, divided by the pod events the phase made (counted by the plain
watch), is what Kopf and the handler cost a pod event. Beside it, a plain watch of the same pods (`fgpu_operator.kube.ApiSession.watch`, raw JSON decoded, on
uvloop, in a process of its own) gives the part no watcher can avoid. A scheduled pod makes ~3 such events
(created, bound, Running) besides its decision and its writes.

Starts etcd + kube-apiserver + KWOK from $FGPU_TESTBIN (devcluster/kubeplane.py); KWOK's nodes heartbeat by
Lease (no node events).

    FGPU_TESTBIN=$(hack/testbin.sh | tail -n1) .venv/bin/python bench/operator_events.py [--pods 3000]
        [--nodes 100] [--rounds 2]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "e2e"), str(REPO / "bench")]

from fgpu_operator.controller.command import _positive as positive  # noqa: E402
from fgpu_operator.kube import ApiSession, Limits, load_kubeconfig  # noqa: E402
from lib.cluster import kwok_stages  # noqa: E402
from lib.common import log  # noqa: E402
from lib.procs import proc_cpu  # noqa: E402
from operator_proc import share_pod  # noqa: E402

#: The plain watcher: decodes every pod event and counts them by type in a file, twice a second (its CPU is read
#: from outside; the counts say how many events each phase made).
WATCHER = """
import asyncio, collections, json, sys, uvloop
from fgpu_operator.kube import ApiSession, Limits, load_kubeconfig
async def main(kubeconfig, out):
    counts = collections.Counter()
    async def dump():
        while True:
            open(out, "w").write(json.dumps(counts))
            await asyncio.sleep(0.5)
    async with ApiSession(load_kubeconfig(kubeconfig), Limits(qps=0)) as api:
        rv = (await api.request("GET", "/api/v1/pods", params={"limit": "1"})).body["metadata"]["resourceVersion"]
        task = asyncio.create_task(dump())
        print("watching", flush=True)
        while True:
            async for event in api.watch("/api/v1/pods", {"resourceVersion": rv, "allowWatchBookmarks": "true"}):
                if event.get("type") == "ERROR":
                    break
                counts[event["type"]] += 1
                rv = event["object"]["metadata"].get("resourceVersion", rv)
uvloop.run(main(sys.argv[1], sys.argv[2]))
"""
PHASES = ("ADDED", "MODIFIED", "DELETED")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=positive(int), default=3000, help="pods per round (default 3000)")
    ap.add_argument("--nodes", type=positive(int), default=100, help="KWOK nodes (default 100)")
    ap.add_argument("--rounds", type=positive(int), default=2, help="rounds of the three phases (default 2)")
    ap.add_argument("--in-flight", type=positive(int), default=32, help="requests in flight (default 32)")
    args = ap.parse_args(argv)
    args.node_heartbeat, args.no_pod_stages = "lease", True  # kwok_stages' options: no node events, no pod stages
    return args


def cpu(pid: int) -> float:
    """CPU seconds of a process and its children (the operator's writer child takes its per-pod forgets)."""
    return proc_cpu(pid, children=True)


def quiet(pids: list[int], idle: float = 0.03, step: float = 1.0, limit: float = 120.0) -> None:
    """Wait until each process uses under `idle` of a core over `step` s (it has taken in every event)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = [cpu(p) for p in pids]
        time.sleep(step)
        if all(cpu(p) - b < idle * step for p, b in zip(pids, before, strict=True)):
            return


async def phase(api: ApiSession, kind: str, namespace: str, names: list[str], in_flight: int) -> None:
    """One request per pod: create it (another scheduler's, so never bound), label it, or delete it."""
    base = f"/api/v1/namespaces/{namespace}/pods"
    queue: asyncio.Queue[str] = asyncio.Queue()
    for name in names:
        queue.put_nowait(name)

    async def one(name: str) -> None:
        if kind == "ADDED":
            body = share_pod(name, 500)
            body["spec"]["schedulerName"] = "bench-nobody"
            out = await api.request("POST", base, body=body)
        elif kind == "MODIFIED":
            out = await api.request("PATCH", f"{base}/{name}", body={"metadata": {"labels": {"touched": "yes"}}},
                                    content_type="application/merge-patch+json")
        else:
            out = await api.request("DELETE", f"{base}/{name}", body={"gracePeriodSeconds": 0})
        if not out.ok:
            raise SystemExit(f"{kind} {name}: {out}")

    async def worker() -> None:
        while not queue.empty():
            await one(queue.get_nowait())

    await asyncio.gather(*(worker() for _ in range(in_flight)))


def seen(counts: Path) -> dict[str, int]:
    """The plain watcher's pod events so far, by type (it rewrites the file twice a second)."""
    time.sleep(1.0)
    return json.loads(counts.read_text() or "{}")


def measure(plane, creds, pids: dict[str, int], counts: Path, args, rounds: list[dict]) -> None:
    idle_s = 10.0
    quiet(list(pids.values()))
    before = {k: cpu(p) for k, p in pids.items()}
    time.sleep(idle_s)
    idle = {k: (cpu(p) - before[k]) / idle_s for k, p in pids.items()}  # CPU seconds per second, idle
    for r in range(args.rounds):
        namespace = plane.create_namespace(f"events-{r}")
        names = [f"p{i}" for i in range(args.pods)]
        for kind in PHASES:
            events0 = seen(counts)
            start, cpu0 = time.monotonic(), {k: cpu(p) for k, p in pids.items()}
            asyncio.run(_with_session(creds, kind, namespace, names, args.in_flight))
            quiet(list(pids.values()))
            took = time.monotonic() - start
            cpu1 = {k: cpu(p) for k, p in pids.items()}
            made = {t: n - events0.get(t, 0) for t, n in seen(counts).items() if n != events0.get(t, 0)}
            events = sum(made.values())
            row = {"round": r + 1, "request": kind, "pods": len(names), "events": events, "by_type": made,
                   "seconds": took}
            for k in pids:
                row[k] = 1e6 * (cpu1[k] - cpu0[k] - idle[k] * took) / events  # microseconds per event
            rounds.append(row)
            log(f"round {r + 1}, {kind}: {events} pod events ({made}) in {took:.1f} s; per event: operator "
                f"{row['operator']:.0f} us, plain watch {row['watch']:.0f} us")


async def _with_session(creds, kind: str, namespace: str, names: list[str], in_flight: int) -> None:
    async with ApiSession(creds, Limits(qps=0, max_in_flight=64)) as api:
        await phase(api, kind, namespace, names, in_flight)


REQUESTS = {"ADDED": "create", "MODIFIED": "label", "DELETED": "delete"}


def table(rows: list[dict]) -> str:
    out = ["| request per pod | pod events (by type) | operator (Kopf + handler), µs per event | plain watch, µs per "
           "event | difference |", "|---|---|---:|---:|---:|"]
    for kind in PHASES:
        mine = [r for r in rows if r["request"] == kind]
        types: dict[str, int] = {}
        for r in mine:
            for t, n in r["by_type"].items():
                types[t] = types.get(t, 0) + n
        op = statistics.median(r["operator"] for r in mine)
        plain = statistics.median(r["watch"] for r in mine)
        runs = " / ".join(f"{r['operator']:.0f}" for r in mine)
        what = ", ".join(f"{n} {t}" for t, n in sorted(types.items()))
        out.append(f"| {REQUESTS[kind]} | {what} | {op:.0f} ({runs}) | {plain:.0f} | {op - plain:.0f} |")
    return "\n".join(out)


def main() -> int:
    args = parse_args()
    from devcluster import fgpu
    from devcluster.kubeplane import ControlPlane, find_testbin

    workdir = Path(tempfile.mkdtemp(prefix="fgpu-bench-events-"))
    plane = ControlPlane(find_testbin(os.environ.get("FGPU_TESTBIN")), workdir / "plane", workdir / "etcd")
    operator = watcher = None
    rows: list[dict] = []
    try:
        plane.start()
        plane.start_kwok(kwok_stages(plane, workdir, args), node_lease_seconds=40)
        plane.make_kwok_nodes([f"n{i:04d}" for i in range(args.nodes)], {"nvidia.com/gpu": 80})
        operator = fgpu.start_operator(plane.kubeconfig, workdir / "operator.log", policy="fgpu")
        counts = workdir / "watch-counts.json"
        watcher = subprocess.Popen([sys.executable, "-c", WATCHER, str(plane.kubeconfig), str(counts)],
                                   stdout=subprocess.PIPE, text=True)
        watcher.stdout.readline()  # "watching"
        log(f"{args.nodes} nodes; operator pid {operator.pid}, plain watch pid {watcher.pid}; "
            f"load average {os.getloadavg()[0]:.2f}")
        measure(plane, load_kubeconfig(plane.kubeconfig), {"operator": operator.pid, "watch": watcher.pid}, counts,
                args, rows)
    finally:
        for proc in (watcher, operator):
            if proc is not None:
                proc.terminate()
                proc.wait(30)
        plane.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\n{os.cpu_count()} CPUs; {args.pods} pods a round, {args.rounds} rounds, {args.nodes} KWOK nodes "
          f"(Lease heartbeat); median over rounds (each round's operator figure in brackets); the idle CPU of "
          f"each process over the same time taken off\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
