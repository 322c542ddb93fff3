"""What one Prometheus scrape of the operator's /metrics costs, by cluster size: CPU to write the exposition
(fgpu's writer of the model's gauges against prometheus_client writing the same samples, the exporter before
2026-11-27) and to gzip it, and its size.

In process, no control plane: a `Scheduler` (the operator's, with the API faked) is given --nodes-list nodes of
--gpus-per-node fractional GPUs and --pods-per-node pods of 0.1-0.7 GPU, placed by its own loop; then the
model is scraped --scrapes times from another thread, as the HTTP server does, and each writer's CPU time
(time.thread_time of the scraping thread) is taken. The first scrape (no series cached yet) is reported apart;
the others by median. Then --scrapes more, each after --churn of the pods were replaced (deleted, and as many
new ones placed), fgpu's writer only. Both writers' bytes are compared every time (they must be equal).

With --memory, instead: what scrapes cost the operator's memory, at each --nodes-list size, each way in a process
of its own (freed memory is not given back to the OS reliably, so one process cannot measure both): the RSS
after the model is built, the peak and the RSS after --scrapes scrapes, each in a new thread as the HTTP server
serves them, gzipped. `pieces`: as /metrics answers (`exposition_chunks`, sent and gzipped piece by piece);
`joined`: the same text joined whole and gzipped at once, as /metrics did before 2026-11-28.

    .venv/bin/python bench/operator_scrape.py [--nodes-list 100,1000,2000] [--gpus-per-node 8]
        [--pods-per-node 5] [--scrapes 7] [--churn 0.05] [--out-json FILE] [--memory]
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import gzip
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "controller"), str(REPO / "tests")]

from fgpu_operator.controller.command import GC_THRESHOLDS  # noqa: E402
from fgpu_operator.controller.metrics import OperatorMetrics  # noqa: E402
from fgpu_operator.controller.scheduler import Scheduler  # noqa: E402
from fgpu_operator.objects import timestamp  # noqa: E402
from fgpu_operator.placement.live import LiveCluster  # noqa: E402
from prometheus_client import generate_latest  # noqa: E402

from fgpu_contracts import keys  # noqa: E402
from fgpu_contracts.request import ContainerRequest, GpuRequest, dump_request  # noqa: E402

SHARES = (100, 250, 300, 500, 700)  # milli-GPU of the pods, in turn (as bench/scheduler.py's)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from fgpu_operator.controller.command import _positive as positive

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes-list", default="100,1000,2000", help="comma-separated node counts (default 100,1000,2000)")
    p.add_argument("--gpus-per-node", type=positive(int), default=8)
    p.add_argument("--pods-per-node", type=positive(int), default=5)
    p.add_argument("--scrapes", type=positive(int), default=7, help="scrapes per size (default 7)")
    p.add_argument("--churn", type=positive(float), default=0.05,
                   help="share of the pods replaced (deleted, new ones placed) before each of a second series of "
                        "scrapes (default 0.05: 250 pods at 1,000 nodes, 5 s of a 50 pods/s burst)")
    p.add_argument("--out-json", type=Path)
    p.add_argument("--memory", action="store_true", help="measure what scrapes cost in memory instead of CPU")
    p.add_argument("--memory-way", choices=MEMORY_WAYS, help=argparse.SUPPRESS)  # one way, in this process
    args = p.parse_args(argv)
    try:
        args.nodes = [int(n) for n in args.nodes_list.split(",")]
        if any(n <= 0 for n in args.nodes):
            raise ValueError
    except ValueError:
        p.error(f"--nodes-list: {args.nodes_list!r} is not a comma-separated list of positive integers")
    return args


def pod(i: int) -> dict:
    req = GpuRequest(containers=[ContainerRequest(container="main", milli_gpu=SHARES[i % len(SHARES)])])
    return {"metadata": {"name": f"p{i}", "namespace": "bench", "uid": f"uid-{i}", "creationTimestamp": timestamp(),
                         "annotations": {keys.REQUEST: dump_request(req)}},
            "spec": {"schedulerName": keys.SCHEDULER_NAME, "containers": [{"name": "main"}]}}


def node(name: str, gpus: int) -> dict:
    from inventories import fractional_inventory

    return {"metadata": {"name": name, "annotations": {keys.INVENTORY: fractional_inventory(name, gpus)}},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}}}


def reference_text(metrics: OperatorMetrics, samples: dict) -> bytes:
    """The same exposition written by prometheus_client: the registry, then one family object per gauge."""
    from promcheck import prometheus_client_gauges

    return generate_latest(metrics.registry) + prometheus_client_gauges(metrics.model.FAMILIES, samples)


async def placed_all(s) -> None:
    deadline = time.monotonic() + 600
    while (len(s.queue) or s.binding) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


def timed(fn):
    start = time.thread_time()
    out = fn()
    return out, time.thread_time() - start


async def placed_model(nodes: int, args: argparse.Namespace) -> tuple[OperatorMetrics, Scheduler, asyncio.Task]:
    """The operator's scheduler (API faked) with `nodes` nodes and their pods placed, its metrics attached; the
    scheduler's loop task (cancel it when done)."""
    from scheduler_fakes import FakeApi, FakeEvents

    metrics = OperatorMetrics()
    s = Scheduler(LiveCluster(policy="fgpu"), FakeApi(), FakeEvents(), metrics=metrics)
    metrics.attach(s, "bench", s.is_leader, asyncio.get_running_loop())
    loop = asyncio.create_task(s.run())
    for i in range(nodes):
        s.on_node("ADDED", node(f"node-{i:05d}", args.gpus_per_node))
    for i in range(nodes * args.pods_per_node):
        s.on_pod("ADDED", pod(i))
        if i % 500 == 0:
            await asyncio.sleep(0)
    await placed_all(s)
    return metrics, s, loop


async def measure(nodes: int, args: argparse.Namespace) -> dict:
    metrics, s, loop = await placed_model(nodes, args)
    pods = nodes * args.pods_per_node

    def scrape() -> dict:
        text, ours = timed(metrics.exposition)
        samples = metrics.model.samples()
        reference, theirs = timed(lambda: reference_text(metrics, samples))
        _, fast = timed(lambda: gzip.compress(text, compresslevel=1))
        small, slow = timed(lambda: gzip.compress(text, compresslevel=9))
        return {"fgpu_s": ours, "prometheus_client_s": theirs, "gzip1_s": fast, "gzip9_s": slow,
                "same": text == reference, "lines": text.count(b"\n"), "mb": len(text) / 1e6,
                "gzip9_mb": len(small) / 1e6, "gzip1_mb": len(gzip.compress(text, compresslevel=1)) / 1e6}

    runs = [await asyncio.to_thread(scrape) for _ in range(args.scrapes)]
    churn = max(1, round(args.churn * pods))
    changed = []
    for round_ in range(args.scrapes):  # pods replaced between scrapes, as a busy cluster does
        for i in range(round_ * churn, (round_ + 1) * churn):
            s.on_pod("DELETED", pod(i % pods))
            s.on_pod("ADDED", pod(pods + i))
        await placed_all(s)
        text, took = await asyncio.to_thread(lambda: timed(metrics.exposition))
        changed.append((took, text == reference_text(metrics, metrics.model.samples())))
    loop.cancel()
    warm = runs[1:] or runs
    row = {"nodes": nodes, "gpus": nodes * args.gpus_per_node, "pods": pods, "bound": len(s.held),
           "first_fgpu_s": runs[0]["fgpu_s"], "same": all(r["same"] for r in runs) and all(ok for _, ok in changed),
           "churn": churn, "churned_fgpu_s": statistics.median(t for t, _ in changed)}
    for key in ("fgpu_s", "prometheus_client_s", "gzip1_s", "gzip9_s", "lines", "mb", "gzip1_mb", "gzip9_mb"):
        row[key] = statistics.median(r[key] for r in warm)
    return row


MEMORY_WAYS = ("pieces", "joined")


def status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def memory_one(nodes: int, way: str, args: argparse.Namespace) -> dict:
    """This process's RSS around `args.scrapes` gzipped scrapes of the model, answered `way`."""
    import threading

    from fgpu_operator.controller.exposition import gzipped

    metrics, _, loop = await placed_model(nodes, args)
    gc.collect()
    before, before_peak = status_mb("VmRSS"), status_mb("VmHWM")

    def scrape() -> None:
        if way == "pieces":
            gzipped(metrics.exposition_chunks())
        else:
            gzip.compress(metrics.exposition(), compresslevel=1)

    for _ in range(args.scrapes):
        thread = threading.Thread(target=scrape)
        await asyncio.to_thread(lambda t=thread: (t.start(), t.join()))
    loop.cancel()
    return {"nodes": nodes, "pods": nodes * args.pods_per_node, "way": way, "model_mb": before, "model_peak_mb": before_peak,
            "peak_mb": status_mb("VmHWM"), "after_mb": status_mb("VmRSS")}


def memory(args: argparse.Namespace) -> list[dict]:
    import subprocess

    rows = []
    for nodes in args.nodes:
        for way in MEMORY_WAYS:
            print(f"{nodes} nodes, {way}: {args.scrapes} scrapes in a process of its own", flush=True)
            done = subprocess.run([sys.executable, __file__, "--nodes-list", str(nodes), "--memory-way", way,
                                   "--gpus-per-node", str(args.gpus_per_node), "--pods-per-node",
                                   str(args.pods_per_node), "--scrapes", str(args.scrapes)],
                                  capture_output=True, text=True, check=True)
            rows.append(json.loads(done.stdout.splitlines()[-1]))
    return rows


def memory_table(rows: list[dict]) -> str:
    out = ["| nodes x GPUs, pods | answered | RSS, model built | peak RSS | RSS after the scrapes | peak over the model "
           "| kept after |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['nodes']:,}, {r['pods']:,} | {r['way']} | {r['model_mb']:.0f} MB | {r['peak_mb']:.0f} MB | "
                   f"{r['after_mb']:.0f} MB | +{r['peak_mb'] - r['model_mb']:.0f} MB | "
                   f"+{r['after_mb'] - r['model_mb']:.0f} MB |")
    return "\n".join(out)


def table(rows: list[dict]) -> str:
    out = ["| nodes x GPUs, pods | lines | MB (gzip 1 / 9) | fgpu writer | prometheus_client | speed-up | fgpu, first scrape"
           " | fgpu, pods replaced since the last | gzip level 1 | gzip level 9 | same bytes |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        out.append(f"| {r['nodes']:,} x {r['gpus'] // r['nodes']}, {r['pods']:,} | {r['lines']:,.0f} | "
                   f"{r['mb']:.1f} ({r['gzip1_mb']:.2f} / {r['gzip9_mb']:.2f}) | {1000 * r['fgpu_s']:.0f} ms | "
                   f"{1000 * r['prometheus_client_s']:.0f} ms | {r['prometheus_client_s'] / r['fgpu_s']:.1f}x | "
                   f"{1000 * r['first_fgpu_s']:.0f} ms | {1000 * r['churned_fgpu_s']:.0f} ms ({r['churn']:,}) | "
                   f"{1000 * r['gzip1_s']:.0f} ms | {1000 * r['gzip9_s']:.0f} ms | "
                   f"{'yes' if r['same'] else 'NO'} |")
    return "\n".join(out)


def main() -> int:
    args = parse_args()
    gc.set_threshold(*GC_THRESHOLDS)  # the operator's
    if args.memory_way:
        row = asyncio.run(memory_one(args.nodes[0], args.memory_way, args))
        print(json.dumps(row))
        return 0
    if args.memory:
        rows = memory(args)
        print(f"\nMemory of {args.scrapes} gzipped scrapes ({args.gpus_per_node} GPUs a node, "
              f"{args.pods_per_node} pods a node):")
        print(memory_table(rows))
        if args.out_json:
            args.out_json.write_text(json.dumps(rows, indent=1) + "\n")
        return 0
    rows = []
    for nodes in args.nodes:
        start = time.perf_counter()
        print(f"{nodes} nodes: placing {nodes * args.pods_per_node} pods, then {args.scrapes} scrapes", flush=True)
        rows.append(asyncio.run(measure(nodes, args)))
        print(f"  done in {time.perf_counter() - start:.0f} s", flush=True)
    print()
    print("CPU a scrape (median over the scrapes after the first; the scraping thread's CPU time):")
    print(table(rows))
    if args.out_json:
        args.out_json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all(r["same"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
