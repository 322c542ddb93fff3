"""A scheduler that decides nothing: the floor under any scheduler's latency on this machine.

It binds each pending pod of `--scheduler-name` to the next node in turn (no filtering, no scoring, no model of
the cluster) and posts the same writes fgpu and kube-scheduler make for a pod: one Binding, carrying a hand-off
annotation of fgpu's size, and one Scheduled Event. It watches only the pods it must bind (field selector on
schedulerName and an empty nodeName), on asyncio with raw JSON (`fgpu_operator.kube`, the client fgpu's own
writes use) and uvloop, as the operator does.

`bench/scheduler.py --schedulers null,...` runs it beside the real schedulers: whatever p99 it gets at an
offered rate is what the apiserver, etcd, KWOK and the pod creator leave to a scheduler that costs nothing to
decide, so a real scheduler on the same machine can only do worse.

With --burn-ms M it spends M ms of CPU on its loop per pod before binding it, as a scheduler's decision would:
how much a scheduler may spend per pod and still keep a latency target on this machine.

    .venv/bin/python bench/helpers/null_binder.py --kubeconfig FILE [--qps 500 --burst 1000] [--in-flight 64] [--burn-ms 0]
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import signal
import sys
import time

from fgpu_operator.controller.translate import binding_annotations
from fgpu_operator.kube import ApiSession, Limits, bind, load_kubeconfig
from fgpu_operator.kube.events import EventRecorder
from fgpu_operator.objects import timestamp

from fgpu_contracts import keys
from fgpu_contracts.assignment import Assignment, ContainerAssignment, DeviceShare
from fgpu_contracts.cli import number


def handoff(node: str) -> dict[str, str]:
    """The hand-off fgpu writes on a Binding for a half-GPU pod on `node` (so each Binding carries as much)."""
    share = DeviceShare(uuid=f"GPU-{node}-0", milli_gpu=500, mem_bytes=40 << 30, sm_pct=50)
    assignment = Assignment(node=node, containers=[ContainerAssignment(name="main", devices=[share])])
    return binding_annotations(assignment, timestamp(micro=True))


async def serve(args: argparse.Namespace) -> None:
    creds = load_kubeconfig(args.kubeconfig)
    limits = Limits(qps=args.qps, burst=args.burst, max_in_flight=args.in_flight)
    async with ApiSession(creds, limits, user_agent="null-binder") as api, \
            ApiSession(creds, limits, user_agent="null-binder-events") as events_api:
        events = EventRecorder(events_api, component="null-binder")
        nodes = await api.request("GET", "/api/v1/nodes")
        if not nodes.ok:
            raise SystemExit(f"listing nodes: {nodes}")
        names = sorted(n["metadata"]["name"] for n in nodes.body.get("items", []))
        if not names:
            raise SystemExit("no nodes to bind to")
        burn_s = args.burn_ms / 1000
        turn = itertools.cycle([(name, handoff(name)) for name in names])
        slots = asyncio.Semaphore(args.in_flight)
        started: set[str] = set()  # uids whose Binding went out (a watch may show a pod again)
        tasks: set[asyncio.Task] = set()

        async def one(pod: dict) -> None:
            meta = pod["metadata"]
            node, annotations = next(turn)
            try:
                out = await bind(api, meta["namespace"], meta["name"], meta["uid"], node, annotations)
                if out.ok:
                    events.post(meta["namespace"], meta["name"], meta["uid"], "Scheduled",
                                f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}", type="Normal")
            finally:
                slots.release()

        async def take(pod: dict) -> None:
            uid = pod["metadata"]["uid"]
            if uid in started or pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp"):
                return
            started.add(uid)
            if burn_s:  # a decision's CPU, on the loop, as a scheduler's decisions are
                until = time.thread_time() + burn_s
                while time.thread_time() < until:
                    pass
            await slots.acquire()
            task = asyncio.create_task(one(pod))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        selector = {"fieldSelector": f"spec.schedulerName={args.scheduler_name},spec.nodeName="}
        print(f"null binder: {len(names)} nodes, QPS {args.qps:g}/{args.burst}, {args.in_flight} in flight",
              flush=True)
        while True:  # list, then watch from there; relist when the watch ends or expires
            listed = await api.request("GET", "/api/v1/pods", params=selector)
            if not listed.ok:
                await asyncio.sleep(1)
                continue
            for pod in listed.body.get("items", []):
                await take(pod)
            rv = listed.body["metadata"]["resourceVersion"]
            async for event in api.watch("/api/v1/pods", {**selector, "resourceVersion": rv,
                                                          "allowWatchBookmarks": "true"}):
                if event.get("type") == "ERROR":
                    break
                if event.get("type") == "ADDED":
                    await take(event["object"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--qps", type=number(float, lo=0, lo_open=True), default=500.0)
    ap.add_argument("--burst", type=number(int, lo=1), default=1000)
    ap.add_argument("--in-flight", type=number(int, lo=1), default=64)
    ap.add_argument("--scheduler-name", default=keys.SCHEDULER_NAME)
    ap.add_argument("--burn-ms", type=number(float, lo=0, hi=1000), default=0.0,
                    help="CPU to spend per pod on the loop before binding it, as a decision would (default 0)")
    args = ap.parse_args()
    import uvloop

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    uvloop.run(serve(args))


if __name__ == "__main__":
    main()
