"""The load a run puts on the cluster and what the client sees of it: pods created (as fast as possible or at an
offered rate) while a watch stamps each one's bind, then deleted; `summarize` turns the stamps into a run's
rates and latencies."""
from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from dataclasses import dataclass, field

from fgpu_operator.kube import ApiSession, Limits

from lib.common import GPU, SHARES, log

CREATE_IN_FLIGHT = 64
PROGRESS_S = 5.0


def fgpu_pod(i: int) -> dict:
    from operator_proc import share_pod

    return share_pod(f"p{i}", SHARES[i % len(SHARES)])


def user_pod(i: int) -> dict:
    """A fractional pod as a user writes it (`fgpu.io/gpu-fraction`, nothing else): the admission webhook routes
    it to fgpu and writes its request and device resource."""
    from fgpu_contracts import keys

    milli = SHARES[i % len(SHARES)]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p{i}", "annotations": {keys.FGPU_FRACTION: f"{milli / 1000:g}"}},
            "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}]}}


def kube_pod(i: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}"},
            "spec": {"containers": [{"name": "main", "image": "busybox",
                                     "resources": {"limits": {GPU: "1"}, "requests": {"cpu": "100m"}}}]}}


@dataclass
class Trace:
    """One run's client-side timestamps (perf_counter) per pod."""

    sent: list[float]
    acked: list[float]
    bound: list[float | None]
    count: int = 0  # pods bound so far
    created: int = 0
    finished: float = 0.0  # when the run stopped waiting (all bound, or stalled)
    done: asyncio.Event = field(default_factory=asyncio.Event)


async def create_pods(api: ApiSession, namespace: str, bodies: list[dict], rate: float | None, trace: Trace) -> None:
    """POST every body, CREATE_IN_FLIGHT at a time; with `rate`, pod i is sent no earlier than start + i/rate."""
    slots = asyncio.Semaphore(CREATE_IN_FLIGHT)
    tasks = []

    async def one(i: int) -> None:
        try:
            trace.sent[i] = time.perf_counter()
            out = await api.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=bodies[i])
            if not out.ok:
                raise RuntimeError(f"creating pod {bodies[i]['metadata']['name']} failed: {out}")
            trace.acked[i] = time.perf_counter()
            trace.created += 1
        finally:
            slots.release()

    start = time.perf_counter()
    for i in range(len(bodies)):
        if rate:
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        await slots.acquire()
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)


async def watch_bound(api: ApiSession, namespace: str, rv: str, index: dict[str, int], trace: Trace) -> None:
    """Stamp each pod the first time the watch shows it with spec.nodeName."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    while True:
        params = {"resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": "3600"}
        async for event in api.watch(path, params):
            now = time.perf_counter()
            obj = event.get("object") or {}
            if event.get("type") == "ERROR":
                log(f"  watch: {obj.get('code')} {obj.get('message')}; watching again")
                if obj.get("code") == 410:  # too old: list, and take what is bound as bound now
                    listed = await api.request("GET", path)
                    rv = listed.body.get("metadata", {}).get("resourceVersion", rv)
                    for pod in listed.body.get("items", []):
                        _saw(pod, now, index, trace)
                await asyncio.sleep(0.5)
                break
            rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
            if event.get("type") in ("ADDED", "MODIFIED"):
                _saw(obj, now, index, trace)


def _saw(pod: dict, now: float, index: dict[str, int], trace: Trace) -> None:
    i = index.get(pod["metadata"]["name"])
    if i is not None and trace.bound[i] is None and (pod.get("spec") or {}).get("nodeName"):
        trace.bound[i] = now
        trace.count += 1
        if trace.count == len(trace.bound):
            trace.done.set()


async def progress(label: str, trace: Trace, start: float) -> None:
    while True:
        await asyncio.sleep(PROGRESS_S)
        log(f"  [{label}] {time.perf_counter() - start:5.0f} s: created {trace.created}/{len(trace.sent)}, "
            f"bound {trace.count}")


async def run_pods(creds, namespace: str, bodies: list[dict], rate: float | None, stall: float, label: str) -> Trace:
    """Create `bodies` in `namespace` (fast, or at `rate`) while watching them get bound; returns when all are
    bound or nothing was bound for `stall` seconds after the last create."""
    n = len(bodies)
    trace = Trace([0.0] * n, [0.0] * n, [None] * n)
    index = {b["metadata"]["name"]: i for i, b in enumerate(bodies)}
    async with ApiSession(creds, Limits(qps=0, max_in_flight=CREATE_IN_FLIGHT), user_agent="fgpu-bench") as api, \
            ApiSession(creds, Limits(qps=0, max_in_flight=1), user_agent="fgpu-bench-watch") as watcher:
        listed = await api.request("GET", f"/api/v1/namespaces/{namespace}/pods", params={"limit": "1"})
        if not listed.ok:
            raise RuntimeError(f"listing pods in {namespace}: {listed}")
        start = time.perf_counter()
        helpers = [asyncio.create_task(watch_bound(watcher, namespace, listed.body["metadata"]["resourceVersion"],
                                                   index, trace)),
                   asyncio.create_task(progress(label, trace, start))]
        try:
            await create_pods(api, namespace, bodies, rate, trace)
            last, last_count = time.perf_counter(), trace.count
            while not trace.done.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(trace.done.wait(), 1.0)
                if trace.count != last_count:
                    last, last_count = time.perf_counter(), trace.count
                elif time.perf_counter() - last > stall:
                    log(f"  [{label}] nothing bound for {stall:.0f} s: giving up with {n - trace.count} unbound")
                    break
        finally:
            trace.finished = time.perf_counter()
            for task in helpers:
                task.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
    return trace


async def delete_pods(creds, namespace: str, names: list[str], timeout: float = 180) -> None:
    """Delete (grace 0) and wait until the namespace has no pods left."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    async with ApiSession(creds, Limits(qps=0, max_in_flight=32), user_agent="fgpu-bench") as api:
        await asyncio.gather(*(api.request("DELETE", f"{path}/{name}", params={"gracePeriodSeconds": "0"})
                               for name in names))
        deadline = time.monotonic() + timeout
        while (await api.request("GET", path, params={"limit": "1"})).body.get("items"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"pods of {namespace} still there {timeout:.0f} s after deleting them")
            await asyncio.sleep(0.5)


async def set_gpu_slots(creds, nodes: list[str], slots: int) -> None:
    """Every node's nvidia.com/gpu capacity and allocatable := slots (node status, merge patch)."""
    body = {"status": {"capacity": {GPU: str(slots)}, "allocatable": {GPU: str(slots)}}}
    async with ApiSession(creds, Limits(qps=0, max_in_flight=32), user_agent="fgpu-bench") as api:
        outs = await asyncio.gather(*(api.request("PATCH", f"/api/v1/nodes/{n}/status", body=body,
                                                  content_type="application/merge-patch+json") for n in nodes))
    bad = [o for o in outs if not o.ok]
    if bad:
        raise RuntimeError(f"patching {len(bad)} nodes' {GPU} to {slots} failed, e.g. {bad[0]}")


def summarize(trace: Trace, cpu: dict[str, float]) -> dict:
    first = min(trace.sent)
    bound = [(b, s) for b, s in zip(trace.bound, trace.sent, strict=True) if b is not None]
    lat = sorted(b - s for b, s in bound)
    last = max((b for b, _ in bound), default=first)
    span = last - first
    created_span = max(trace.acked) - first
    wall = trace.finished - first  # CPU is measured over the whole run, stall wait included
    timeline = sorted(round(b - first, 3) for b, _ in bound)
    return {
        "bound": len(bound), "seconds": span, "wall": wall, "pods_per_s": len(bound) / span if span > 0 else 0.0,
        "created_per_s": len(trace.sent) / created_span if created_span > 0 else 0.0,
        "p50": statistics.median(lat) if lat else float("nan"),
        "p99": lat[int(0.99 * (len(lat) - 1))] if lat else float("nan"),
        "cpu": {k: v / wall if wall > 0 else 0.0 for k, v in cpu.items()},
        "cpu_ms_per_pod": {k: 1000 * v / len(bound) if bound else float("nan") for k, v in cpu.items()},
        "bound_at": timeline,
    }
