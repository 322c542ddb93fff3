"""fgpu's scheduler (the `fgpu operator` process) against the real kube-scheduler on one control plane of KWOK
nodes: pods bound per second, create->bound latency (p50/p99), and the scheduler's memory and CPU.

Starts etcd + kube-apiserver + KWOK from $FGPU_TESTBIN (tests/e2e/kubeplane.py); the operator runs as in the
e2e tests (tests/e2e/operator_proc.py). In order:

1. Small case (skip with --no-small, run alone with --small): 1,000 fractional pods on 100 nodes through fgpu,
   at the operator's own client limits (QPS 500 / burst 1000), created as fast as the creator can: the time
   from the first create to the last bind. Twice: pods already routed and sized (`fgpu.io/request`,
   schedulerName, device resource, as the big runs' pods), then pods as users write them (`fgpu.io/gpu-fraction`
   only), which the operator's admission webhook normalises on create (the apiserver calls it over TLS).
2. The rest of --nodes is added. For each --settings entry, fgpu and then kube-scheduler, each with that
   client QPS/burst, each for every --modes entry, --pods pods a run:
   - fgpu: fractional pods (shares cycling through SHARES milli-GPU; `fgpu.io/request`, schedulerName
     fgpu-scheduler, `nvidia.com/gpu: 1` as the webhook writes it), --policy (the operator's default: fgpu);
   - kube-scheduler: whole-GPU pods (`nvidia.com/gpu: 1`), the default scheduler;
   - null (only when --schedulers names it): fgpu's pods, bound by `bench/helpers/null_binder.py`, which decides nothing
     (the next node in turn) but writes what both schedulers write for a pod (a Binding with a hand-off
     annotation, a Scheduled Event): what the machine leaves to a scheduler whose decisions cost nothing.
     `null+2ms` spends 2 ms of CPU per pod on its loop before each bind, as a decision would: a sweep of those
     finds how much a scheduler may spend per pod and still keep a latency target here.
   Both kinds of pod ask for 100m CPU. `default` is kube-scheduler's default, QPS 50 / burst 100; fgpu gets the
   same (`--qps 50 --burst 100`; its own default is 500/1000), so each setting compares equal client limits.
   Modes: `fast`, pods created as fast as the creator can (64 creates in flight); `rate`, pods offered at
   --rate pods/s (a comma-separated list sweeps: one run per rate).

Nodes: one set of --nodes KWOK nodes, each with --gpus-per-node GPUs, shared by both schedulers, which run one
at a time (the other is stopped): a scheduler process is started for its setting, runs its modes, and is
stopped; between runs every pod is deleted (grace 0), the scheduler is left to take that in (until it uses
under 35% of a core; how long is logged and kept in the JSON), and a new namespace is used. Every node carries
the fgpu GPU inventory annotation (fractional GPUs, splitCount 10). Before fgpu's runs the nodes advertise
`nvidia.com/gpu: 10 x GPUs` (a fractional node's device slots, which the operator counts), before
kube-scheduler's `nvidia.com/gpu: GPUs` (whole GPUs): node status is patched between the two. KWOK heartbeats
the nodes with its default stage (node status patched every 20-45 s each: ~31 writes/s at 1,000 nodes, every one
a watch event for the scheduler) or, with --node-heartbeat lease, as a kubelet does (a Lease renewed every
quarter of --node-lease-seconds, node status every 10-20 min).

With --scrape-every S, a thread of the bench GETs the scheduler's /metrics every S seconds during each run
(gzip accepted, as Prometheus does; kube-scheduler's over TLS), as a monitored cluster would; the
scrapes and their mean wall time are in the timing column.

Measured on the client's clock (time.perf_counter): create->bound = first watch event showing spec.nodeName
minus the moment the create request was sent; pods/s = pods bound / (last bound - first create sent). A run
whose bound rate is within 10% of its creation rate is marked creation-bound: that is the creator's rate, not
the scheduler's. RSS: VmHWM (peak) and VmRSS from /proc/<pid>/status when a run ends, summed over the
scheduler's process and its children (a process serves all modes of its setting, so the peak covers the
earlier modes too). CPU: per process (the scheduler's with its children), share of one core from the
first create until the run ends (all bound, or giving up after --stall), and CPU time per bound pod — the
least load-dependent figure here: what a pod costs the scheduler whatever else runs. Writes: the apiserver's
apiserver_request_total for write verbs, before and after each run, per bound pod (the creator's own
`POST pods` left out): what binding a pod costs the apiserver, beside the scheduler's own CPU (KWOK's
`PATCH pods/status`, which makes a bound pod Running, is counted there too). Everything shares this
machine's CPUs (and, on a shared machine, other people's work): rates and latencies are noisy.

    FGPU_TESTBIN=$(hack/testbin.sh | tail -n1) .venv/bin/python bench/scheduler.py [--quick]
        [--nodes 1000] [--gpus-per-node 8] [--pods 5000] [--settings default,500/1000] [--modes fast,rate]
        [--rate 100] [--small | --no-small] [--plot out/scheduler.png] [--out-json FILE]
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "e2e"), str(REPO / "bench")]

from fgpu_operator.controller.command import _positive as positive  # noqa: E402  (the operator's own)
from fgpu_operator.kube import ApiSession, Limits, load_kubeconfig  # noqa: E402
from fgpu_operator.placement.policies import LIVE_POLICIES  # noqa: E402
from helpers.cpu_burner import share as share_of_core  # noqa: E402  (what --cpu-burner hands the burner)

GPU = "nvidia.com/gpu"
SLOTS_PER_GPU = 10  # a fractional GPU's splitCount (tests/inventories.py)
SHARES = (100, 250, 300, 500, 700)  # milli-GPU of fgpu's pods, in turn
CREATE_IN_FLIGHT = 64
PROGRESS_S = 5.0
FULL = {"nodes": 1000, "pods": 5000, "small_nodes": 100, "small_pods": 1000, "stall": 90.0}
QUICK = {"nodes": 50, "pods": 300, "small_nodes": 10, "small_pods": 100, "stall": 30.0}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---- options --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Setting:
    """A client QPS/burst for both schedulers; None: kube-scheduler's default (50/100)."""

    qps: float | None
    burst: int | None

    @property
    def label(self) -> str:
        return "default (50/100)" if self.qps is None else f"{self.qps:g}/{self.burst}"

    def fgpu_args(self) -> list[str]:
        return ["--qps", f"{self.qps or 50:g}", "--burst", str(self.burst or 100)]


def parse_settings(text: str) -> list[Setting]:
    out = []
    for item in text.split(","):
        item = item.strip()
        if item == "default":
            out.append(Setting(None, None))
            continue
        try:
            qps, burst = item.split("/")
            setting = Setting(float(qps), int(burst))
        except ValueError:
            setting = None
        if setting is None or not (0 < setting.qps < float("inf") and setting.burst >= 1):
            raise argparse.ArgumentTypeError(
                f"{item!r} is not a setting; allowed: comma-separated 'default' or QPS/BURST like 500/1000")
        out.append(setting)
    return out


def parse_rates(text: str) -> list[float]:
    try:
        rates = [float(t) for t in text.split(",")]
    except ValueError:
        rates = []
    if not rates or not all(0 < r < float("inf") for r in rates):
        raise argparse.ArgumentTypeError(f"{text!r} is not a rate list; allowed: comma-separated pods/s above 0")
    return list(dict.fromkeys(rates))


def parse_modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",")]
    bad = [m for m in modes if m not in ("fast", "rate")]
    if bad or not modes:
        raise argparse.ArgumentTypeError(f"{bad[0] if bad else text!r} is not a mode; allowed: fast, rate")
    return list(dict.fromkeys(modes))


SCHEDULERS = ("fgpu", "kube-scheduler", "null")
#: Run unless --schedulers names others; `null` (bench/helpers/null_binder.py: binds without deciding) is asked for by name.
DEFAULT_SCHEDULERS = ["fgpu", "kube-scheduler"]


def null_burn_ms(name: str) -> float | None:
    """`null` -> 0.0, `null+2.5ms` -> 2.5 (the null binder spending that much CPU per pod); None: not null."""
    if name == "null":
        return 0.0
    if name.startswith("null+") and name.endswith("ms"):
        with contextlib.suppress(ValueError):
            burn = float(name[5:-2])
            if 0 <= burn <= 1000:
                return burn
    return None


def fractional(scheduler: str) -> bool:
    """Gets fgpu's fractional pods (and nodes advertising fgpu's device slots): fgpu and the null binder."""
    return scheduler == "fgpu" or null_burn_ms(scheduler) is not None


def parse_schedulers(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in SCHEDULERS and null_burn_ms(n) is None]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: allowed: a comma-separated list of {', '.join(SCHEDULERS)} "
                                         "and null+<0-1000>ms (the null binder spending that CPU per pod)")
    return list(dict.fromkeys(names))


def percent(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole percentage (allowed: 1..100)")
    return value


def operator_python(text: str) -> Path:
    """An interpreter beside an executable `fgpu` script (how a venv installs it)."""
    path = Path(text).expanduser().absolute()
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise argparse.ArgumentTypeError(f"{text!r} is not an executable file (allowed: a venv's bin/python)")
    if not os.access(path.with_name("fgpu"), os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r} has no executable fgpu beside it (allowed: the python of a venv "
                                         "with fgpu installed)")
    return path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help=f"sanity size: {QUICK['nodes']} nodes / {QUICK['pods']} pods, small case "
                         f"{QUICK['small_pods']} pods on {QUICK['small_nodes']} nodes")
    ap.add_argument("--nodes", type=positive(int), help=f"KWOK nodes (default {FULL['nodes']})")
    ap.add_argument("--gpus-per-node", type=positive(int), default=8)
    ap.add_argument("--pods", type=positive(int), help=f"pods per run (default {FULL['pods']})")
    ap.add_argument("--settings", type=parse_settings, default=parse_settings("default,500/1000"),
                    help="comma-separated client QPS/burst for both schedulers, or 'default' (50/100)")
    ap.add_argument("--modes", type=parse_modes, default=["fast", "rate"],
                    help="comma-separated: fast (as fast as the creator can), rate (offered at --rate)")
    ap.add_argument("--rate", type=parse_rates, default=[100.0],
                    help="offered pods/s of the rate mode; comma-separated, the rate mode runs once per rate")
    ap.add_argument("--policy", choices=LIVE_POLICIES, default="fgpu", help="the operator's --policy")
    small = ap.add_mutually_exclusive_group()
    small.add_argument("--small", action="store_true", help="run only the small case (1,000 pods on 100 nodes)")
    small.add_argument("--no-small", action="store_true", help="skip the small case")
    ap.add_argument("--stall", type=positive(float),
                    help="give up on a run when nothing was bound for this long, seconds (default 90; quick 30)")
    ap.add_argument("--plot", type=Path, default=REPO / "out" / "scheduler.png", help="PNG of bound pods over time")
    ap.add_argument("--out-json", type=Path, help="write the results as JSON here")
    ap.add_argument("--schedulers", type=parse_schedulers, default=DEFAULT_SCHEDULERS,
                    help="comma-separated, of: " + ", ".join(SCHEDULERS) + " (default: fgpu,kube-scheduler; null: "
                         "bench/helpers/null_binder.py, which binds without deciding, the floor under any scheduler here)")
    ap.add_argument("--fgpu-args", default="", help="more arguments for `fgpu operator`, space-separated "
                                                    "(e.g. '--binds-in-flight 256')")
    ap.add_argument("--operator-python", type=operator_python,
                    help="run the operator on this interpreter (a venv's python with fgpu installed: its `fgpu` "
                         "script); the pod creator stays on the bench's own, so an A/B of interpreters changes only "
                         "the operator (default: the bench's own)")
    ap.add_argument("--keep-logs", action="store_true", help="keep the control plane's and operator's logs")
    ap.add_argument("--node-heartbeat", choices=("status", "lease"), default="status",
                    help="KWOK's node heartbeat: status (KWOK's default stage, node status patched every 20-45 s) or "
                         "lease (as a kubelet: a Lease renewed every quarter of --node-lease-seconds, node status "
                         "every 10-20 min)")
    ap.add_argument("--node-lease-seconds", type=positive(int), default=40,
                    help="with --node-heartbeat lease: the Lease's duration (kubelet's default 40 s)")
    ap.add_argument("--kube-nodes-to-score", type=percent,
                    help="kube-scheduler's percentageOfNodesToScore, 1-100 (default: its own, which falls with the "
                         "cluster's size: 42%% of 1,000 nodes)")
    ap.add_argument("--repeat", type=positive(int), default=1,
                    help="run every scheduler's modes this many times per setting, the schedulers in turn (default 1)")
    ap.add_argument("--scrape-every", type=positive(float),
                    help="scrape the scheduler's /metrics every this many seconds during each run, gzip accepted, "
                         "as Prometheus does (the chart's ServiceMonitor: 15 s; deploy/prometheus: 5 s); "
                         "kube-scheduler's too (default: no scrapes)")
    ap.add_argument("--cpu-burner", type=share_of_core, metavar="SHARE",
                    help="a noisy neighbour for the whole bench: bench/helpers/cpu_burner.py busy-loops this share "
                         "of one core (0 < SHARE < 1), both schedulers alike; each run records the share it took")
    ap.add_argument("--no-pod-stages", action="store_true",
                    help="KWOK runs only its node stages: bound pods are not marked Running, so neither scheduler's "
                         "run carries KWOK's pod status writes (which land inside a slow run and after a fast one)")
    args = ap.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    args.nodes = args.nodes or sizes["nodes"]
    args.pods = args.pods or sizes["pods"]
    args.stall = args.stall or sizes["stall"]
    args.small_nodes, args.small_pods = min(sizes["small_nodes"], args.nodes), sizes["small_pods"]
    if args.small:
        args.nodes = args.small_nodes
    if not args.small and args.pods > args.nodes * args.gpus_per_node:  # --small runs no whole-GPU pods
        ap.error(f"argument --pods: {args.pods} whole-GPU pods do not fit {args.nodes} nodes x "
                 f"{args.gpus_per_node} GPUs; allowed: at most {args.nodes * args.gpus_per_node}")
    return args


# ---- pods -----------------------------------------------------------------------------------------------------
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


# ---- processes ------------------------------------------------------------------------------------------------
def descendants(pid: int | None) -> list[int]:
    """`pid` and every process under it (the operator runs its API writes in a child process)."""
    out, todo = [], [pid] if pid else []
    while todo:
        p = todo.pop()
        out.append(p)
        with contextlib.suppress(OSError, ValueError):
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
    return out


def proc_memory(pid: int | None) -> tuple[float, float]:
    """(VmHWM, VmRSS) in MB of a process and its children (the sum of their peaks: an upper bound on the
    peak of the whole), or (nan, nan) when the process is gone."""
    if pid is None:
        return float("nan"), float("nan")
    total = [0, 0]
    for p in descendants(pid):
        try:
            lines = Path(f"/proc/{p}/status").read_text().splitlines()
        except OSError:
            if p == pid:
                return float("nan"), float("nan")
            continue
        kb = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in lines) if k in ("VmHWM", "VmRSS")}
        total[0] += kb.get("VmHWM", 0)
        total[1] += kb.get("VmRSS", 0)
    return total[0] / 1024, total[1] / 1024


def proc_cpu(pid: int | None, children: bool = False) -> float:
    """User + system CPU seconds of a process so far, with its live children's if asked (0 when it is gone)."""
    total = 0.0
    for p in descendants(pid) if children else [pid]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, TypeError, IndexError):
            continue
        total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


class Bench:
    """The control plane, the nodes, and one scheduler process at a time."""

    def __init__(self, plane, workdir: Path, args: argparse.Namespace):
        self.plane, self.workdir, self.args = plane, workdir, args
        self.nodes: list[str] = []
        self.slots = 0  # the nvidia.com/gpu the nodes advertise now
        self.operator = None
        self.null: subprocess.Popen | None = None  # bench/helpers/null_binder.py, while it runs
        self.burner: subprocess.Popen | None = None  # bench/helpers/cpu_burner.py, with --cpu-burner
        self.webhook = False  # the running operator registered its admission webhook
        self.metrics_port = 0  # the running operator's --metrics-port
        self.runs: list[dict] = []
        self.serial = 0

    @functools.cached_property
    def creds(self):
        return load_kubeconfig(self.plane.kubeconfig)  # written by plane.start()

    def add_nodes(self, count: int) -> None:
        from inventories import fractional_inventory

        from fgpu_contracts import keys

        new = [f"bench-node-{i:04d}" for i in range(len(self.nodes), count)]
        if not new:
            return
        self.set_slots(SLOTS_PER_GPU * self.args.gpus_per_node)
        start = time.perf_counter()
        gpus = self.args.gpus_per_node
        self.plane.make_kwok_nodes(new, {GPU: self.slots},
                                   annotations=lambda name: {keys.INVENTORY: fractional_inventory(name, gpus)})
        self.nodes += new
        log(f"{len(new)} KWOK nodes Ready in {time.perf_counter() - start:.1f} s ({len(self.nodes)} in all)")

    def set_slots(self, slots: int) -> None:
        if slots != self.slots and self.nodes:
            asyncio.run(set_gpu_slots(self.creds, self.nodes, slots))
            log(f"nodes now advertise {GPU}: {slots}")
        self.slots = slots

    # -- schedulers
    def start(self, scheduler: str, setting: Setting | None, webhook: bool = False) -> int:
        """Start one scheduler (fgpu: the operator; setting None: its own defaults; `webhook`: serving its
        admission webhook too, registered with the apiserver); its pid."""
        if scheduler == "fgpu":
            from operator_proc import start_operator, wait_webhook_live

            self.set_slots(SLOTS_PER_GPU * self.args.gpus_per_node)
            from devcluster.kubeplane import free_port

            self.metrics_port = free_port()
            extra = [*(setting.fgpu_args() if setting else []), "--metrics-port", str(self.metrics_port),
                     *self.args.fgpu_args.split()]
            if webhook:
                extra += ["--webhook-port", str(free_port()), "--webhook-host", "127.0.0.1", "--manage-webhook-config"]
            program = {"program": str(self.args.operator_python.with_name("fgpu"))} if self.args.operator_python else {}
            self.operator = start_operator(self.plane, self.workdir, *extra, policy=self.args.policy,
                                           log_name=f"operator-{self.serial}.log", **program)
            pid = self.operator.pid
            if webhook:
                from kubernetes import client

                self.webhook = True
                with self.plane.api() as api:
                    wait_webhook_live(client.CoreV1Api(api), "default")
        elif (burn := null_burn_ms(scheduler)) is not None:
            self.set_slots(SLOTS_PER_GPU * self.args.gpus_per_node)
            qps, burst = (setting.qps, setting.burst) if setting else (500.0, 1000)
            log_file = open(self.workdir / f"null-binder-{self.serial}.log", "w")  # noqa: SIM115 - the process keeps it
            self.null = subprocess.Popen([sys.executable, str(REPO / "bench" / "helpers" / "null_binder.py"), "--kubeconfig",
                                          str(self.plane.kubeconfig), "--qps", f"{qps:g}", "--burst", str(burst),
                                          "--burn-ms", f"{burn:g}"], stdout=log_file, stderr=subprocess.STDOUT)
            log_file.close()
            pid = self.null.pid
        else:
            self.set_slots(self.args.gpus_per_node)
            self.plane.start_scheduler(setting.qps, setting.burst, self.args.kube_nodes_to_score)
            pid = self.plane.pid("kube-scheduler")
        time.sleep(0.5)  # its watches are open
        return pid

    def stop(self) -> None:
        from operator_proc import stop

        if self.operator is not None:
            stop(self.operator)
            self.operator = None
        if self.webhook:  # a registered webhook nobody serves would refuse the next runs' pods
            from fgpu_operator.controller.handlers import MANAGED_WEBHOOKS
            from kubernetes import client

            with self.plane.api() as api:
                reg = client.AdmissionregistrationV1Api(api)
                for delete in (reg.delete_mutating_webhook_configuration, reg.delete_validating_webhook_configuration):
                    with contextlib.suppress(client.ApiException):
                        delete(MANAGED_WEBHOOKS)
            self.webhook = False
        if self.null is not None:
            self.null.terminate()
            self.null.wait(30)
            self.null = None
        self.plane.stop_component("kube-scheduler")

    # -- one run
    def run(self, scheduler: str, pid: int, setting_label: str, mode: str, pods: int, make_pod=None,
            rate: float | None = None) -> dict:
        """One run of `pods` pods; `rate` (pods/s offered) with mode "rate"."""
        self.serial += 1
        safe = "".join(c if c.isalnum() else "-" for c in scheduler.lower())  # null+2.5ms -> null-2-5ms
        namespace = self.plane.create_namespace(f"bench-{self.serial}-{safe}-{mode}")
        bodies = [(make_pod or (fgpu_pod if fractional(scheduler) else kube_pod))(i) for i in range(pods)]
        label = f"{scheduler} {setting_label} {mode}" + (f" {rate:g}/s" if rate else "")
        others = {name: self.plane.pid(name) for name in ("kube-apiserver", "etcd", "kwok")}
        pids = {"scheduler": pid, **others, "bench": os.getpid()}
        cpu0 = {k: proc_cpu(p, children=k == "scheduler") for k, p in pids.items()}
        burned0 = proc_cpu(self.burner.pid) if self.burner else 0.0
        writes0 = apiserver_writes(self.plane)
        dropped = "fgpu_scheduler_events_dropped_total"
        dropped0 = (operator_value(self.metrics_port, dropped) or 0.0) if scheduler == "fgpu" else 0.0
        log(f"run {self.serial}: {label}, {pods} pods on {len(self.nodes)} nodes")
        with self.scraper(scheduler) as scraper:
            trace = asyncio.run(run_pods(self.creds, namespace, bodies, rate, self.args.stall, label))
        cpu = {k: proc_cpu(p, children=k == "scheduler") - cpu0[k] for k, p in pids.items()}
        burned = proc_cpu(self.burner.pid) - burned0 if self.burner else 0.0
        hwm, rss = proc_memory(pid)
        row = summarize(trace, cpu)
        if self.burner:  # the share asked for, and the share of one core it took over the run's wall time
            row.update(cpu_burner_share=self.args.cpu_burner, cpu_burner_took=burned / row["wall"])
        row["writes_per_pod"] = writes_per_pod(writes0, apiserver_writes(self.plane), row["bound"])
        row.update(scheduler=scheduler, setting=setting_label, mode=mode, nodes=len(self.nodes), pods=pods,
                   rate_offered=rate, rss_peak_mb=hwm, rss_mb=rss, namespace=namespace, scrapes=len(scraper.took),
                   scrape_s=statistics.fmean(scraper.took) if scraper.took else 0.0, scrape_errors=scraper.errors)
        self.runs.append(row)
        log(f"  -> {row['bound']}/{pods} bound, {row['pods_per_s']:.1f} pods/s, p50 {row['p50']:.2f} s, "
            f"p99 {row['p99']:.2f} s, created {row['created_per_s']:.0f}/s, RSS {hwm:.0f} MB peak")
        start = time.perf_counter()
        # the bench's DELETE of each pod, and (KWOK's pod stages on) KWOK's own after it
        expect = apiserver_writes(self.plane).get("DELETE pods", 0.0) + len(bodies) * (
            1 if self.args.no_pod_stages else 2)
        asyncio.run(delete_pods(self.creds, namespace, [b["metadata"]["name"] for b in bodies]))
        deleted = time.perf_counter()
        if scheduler == "fgpu":  # its own word that every deletion was taken in: nothing allocated
            released(self.metrics_port)
            row["events_dropped"] = (operator_value(self.metrics_port, dropped) or 0.0) - dropped0
        busy = settle(pid)
        kwok, missing = deletes_settled(self.plane, expect)
        row.update(delete_s=deleted - start, busy_after_delete_s=busy, kwok_deletes_after_s=kwok,
                   kwok_deletes_missing=missing)
        log(f"  pods deleted in {deleted - start:.1f} s; the scheduler was busy {busy:.1f} s more taking that in, "
            f"KWOK's own pod deletions ended {kwok:.1f} s after that"
            + (f" ({missing:.0f} of them never came)" if missing else ""))
        return row


    def scraper(self, scheduler: str) -> Scraper:
        """What scrapes the running scheduler's /metrics during a run (nothing without --scrape-every)."""
        if scheduler == "fgpu":
            return Scraper(f"http://127.0.0.1:{self.metrics_port}/metrics", self.args.scrape_every)
        if null_burn_ms(scheduler) is not None:  # it serves no metrics
            return Scraper("", None)
        return Scraper(f"{self.plane.scheduler_url}/metrics", self.args.scrape_every)


class Scraper:
    """While in its `with`, a thread GETs `url` every `every` s (none: never), gzip accepted, as Prometheus does;
    `took` is each scrape's wall time, `errors` the scrapes that failed."""

    def __init__(self, url: str, every: float | None):
        self.url, self.every = url, every
        self.took: list[float] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Scraper:
        if self.every:
            self._thread = threading.Thread(target=self._loop, name="bench-scraper", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        import urllib.request

        from devcluster.kubeplane import probe_context

        unverified = probe_context()  # kube-scheduler's self-signed serving certificate
        headers = {"Accept-Encoding": "gzip"}
        while not self._stop.wait(self.every):
            start = time.perf_counter()
            try:
                with urllib.request.urlopen(urllib.request.Request(self.url, headers=headers), timeout=30,
                                            context=unverified if self.url.startswith("https") else None) as answer:
                    answer.read()
                self.took.append(time.perf_counter() - start)
            except OSError as err:
                if not self.errors:
                    log(f"  scraping {self.url}: {err}")
                self.errors += 1


def operator_value(port: int, name: str) -> float | None:
    """One unlabelled sample from the operator's /metrics; None when it cannot be read or has no such sample."""
    import urllib.request

    with contextlib.suppress(OSError):
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        for line in text.splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[-1])
    return None


def released(port: int, limit: float = 600.0) -> None:
    """Wait until the operator's /metrics shows no GPU allocated (it has seen every deletion): a CPU-starved
    operator still working through a backlog of deletions can look idle to `settle`."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if operator_value(port, "fgpu_cluster_gpu_allocation_ratio") == 0:
            return
        time.sleep(1.0)
    log(f"  the operator still showed GPUs allocated {limit:.0f} s after the deletions")


def settle(pid: int, idle: float = 0.35, step: float = 2.0, limit: float = 300.0) -> float:
    """Wait until the scheduler uses less than `idle` of a core over `step` s (so one run does not inherit the
    previous run's deletions); the seconds that took, up to `limit`."""
    start = time.perf_counter()
    while time.perf_counter() - start < limit:
        before = proc_cpu(pid, children=True)
        time.sleep(step)
        if proc_cpu(pid, children=True) - before < idle * step:
            break
    return max(0.0, time.perf_counter() - start - step)


def deletes_settled(plane, expect: float, quiet: float = 2.0, give_up: float = 60.0, step: float = 1.0,
                    limit: float = 300.0) -> tuple[float, float]:
    """Wait until the apiserver's count of pod DELETEs it served reaches `expect` and then stays still for `quiet`
    s (or stays still for `give_up` s short of it, or `limit` s pass); (the seconds until the last DELETE seen, how
    many of those expected never came). KWOK's pod-delete stage answers every pod the bench deletes with a DELETE of
    its own (a 404 by then: the bench deleted it with grace 0), and a CPU-starved KWOK sends them late: 4,000 for a
    4,000-pod run (apiserver audit log, 2026-11-27). Waiting only for a quiet spell let a KWOK that had not started
    yet go unnoticed: on 2026-11-28 up to 1.0 of them per bound pod fell inside the next run, taking the apiserver's
    and KWOK's CPU from that run's scheduler; so the wait counts them in."""
    start = last_change = time.perf_counter()
    count = apiserver_writes(plane).get("DELETE pods", 0.0)
    while time.perf_counter() - start < limit:
        time.sleep(step)
        now = apiserver_writes(plane).get("DELETE pods", 0.0)
        if now != count:
            count, last_change = now, time.perf_counter()
        still = time.perf_counter() - last_change
        if (count >= expect and still >= quiet) or still >= give_up:
            break
    return max(0.0, last_change - start), max(0.0, expect - count)


WRITE_VERBS = ("POST", "PUT", "PATCH", "APPLY", "DELETE")


def apiserver_writes(plane) -> dict[str, float]:
    """The apiserver's own count of write requests it served, by `VERB resource[/subresource]`
    (apiserver_request_total), so a run can say what each bound pod cost the apiserver. Only that counter's lines
    are parsed: the whole exposition (1.4 MB) takes 0.7 s of CPU to parse, and `deletes_settled` reads it every
    second."""
    from prometheus_client.parser import text_string_to_metric_families

    text = "\n".join(line for line in plane.metrics_text().splitlines()
                     if line.startswith("apiserver_request_total{"))
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if labels.get("verb") not in WRITE_VERBS:
                continue
            what = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
            key = f"{labels['verb']} {what}"
            out[key] = out.get(key, 0.0) + sample.value
    return out


def writes_per_pod(before: dict[str, float], after: dict[str, float], bound: int) -> dict[str, float]:
    """Writes per bound pod during a run, leaving out the bench's own pod creations (`POST pods`)."""
    diff = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    return {k: v / bound for k, v in sorted(diff.items()) if v > 0 and k != "POST pods" and bound}


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


# ---- report ---------------------------------------------------------------------------------------------------
def timing(row: dict) -> str:
    bound_by_creation = row["pods_per_s"] >= 0.9 * row["created_per_s"]
    if row["mode"] == "rate":
        what = f"offered {row['rate_offered']:g}/s, created {row['created_per_s']:.0f}/s"
    else:
        what = f"fast, created {row['created_per_s']:.0f}/s"
    if row["bound"] < row["pods"]:
        what += f", {row['pods'] - row['bound']} NOT BOUND"
    if row.get("scrapes"):
        what += f", /metrics scraped {row['scrapes']}x ({row['scrape_s']:.2f} s each)"
    if row.get("scrape_errors"):
        what += f", {row['scrape_errors']} scrapes FAILED"
    return f"{what}{', creation-bound' if bound_by_creation else ''}"


def secs(value: float) -> str:
    return "—" if value != value else f"{value:.2f} s"


def results_table(rows: list[dict]) -> str:
    out = ["| nodes | pods | scheduler | QPS/burst | timing | pods/s | p50 | p99 | sched CPU | sched CPU per pod "
           "| sched RSS peak (now) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['nodes']} | {r['pods']} | {r['scheduler']} | {r['setting']} | {timing(r)} | "
                   f"**{r['pods_per_s']:.1f}** | {secs(r['p50'])} | {secs(r['p99'])} | {r['cpu']['scheduler']:.0%} | "
                   f"{ms(r['cpu_ms_per_pod']['scheduler'])} ms | {r['rss_peak_mb']:.0f} MB ({r['rss_mb']:.0f} MB) |")
    return "\n".join(out)


def ms(value: float) -> str:
    """Milliseconds to one decimal; '-' where nothing was bound (no per-pod figure)."""
    return f"{value:.1f}" if value == value else "-"


PROCESSES = ("scheduler", "kube-apiserver", "etcd", "kwok", "bench")


def cpu_table(rows: list[dict]) -> str:
    """Each process's share of one core during each run, and its CPU per bound pod: a process that gets less
    CPU in one scheduler's run (KWOK falls behind a fast one) shows it here, not as a cost of that scheduler."""
    out = ["| run | wall | scheduler | kube-apiserver | etcd | kwok | bench client | sum | ms per bound pod "
           "(same order) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        parts = [r["cpu"][k] for k in PROCESSES]
        per_pod = " / ".join(ms(r["cpu_ms_per_pod"][k]) for k in PROCESSES)
        out.append(f"| {run_label(r)} | {r['wall']:.1f} s | "
                   + " | ".join(f"{p:.0%}" for p in parts) + f" | {sum(parts):.0%} | {per_pod} |")
    return "\n".join(out)


def run_label(r: dict) -> str:
    """A run as the tables name it: scheduler, setting, mode, and the offered rate of a rate run."""
    rate = f" {r['rate_offered']:g}/s" if r.get("rate_offered") else ""
    return f"{r['scheduler']} {r['setting']} {r['mode']}{rate}"


def mode_rates(args: argparse.Namespace) -> list[tuple[str, float | None]]:
    """The (mode, offered rate) of each run a scheduler makes per setting: a rate run per --rate entry."""
    return [(mode, rate) for mode in args.modes for rate in (args.rate if mode == "rate" else [None])]


def writes_table(rows: list[dict]) -> str:
    """What each bound pod cost the apiserver in writes, per scheduler run (the creator's POST pods left out)."""
    out = ["| run | writes per bound pod | of which |", "|---|---|---|"]
    for r in rows:
        w = r.get("writes_per_pod", {})
        detail = ", ".join(f"{k} {v:.2f}" for k, v in w.items() if v >= 0.005)
        if r.get("events_dropped"):  # the operator's own count: Events its recorder's full backlog refused
            detail += f"; {r['events_dropped']:.0f} pod Events dropped"
        out.append(f"| {run_label(r)} | {sum(w.values()):.2f} | {detail} |")
    return "\n".join(out)


def targets(rows: list[dict], args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """(target, measured, met) rows."""
    out = []
    big = [r for r in rows if r.get("case") != "small"]
    for setting in dict.fromkeys(r["setting"] for r in big):
        for (mode, rate), repeat in itertools.product(mode_rates(args), range(args.repeat)):
            pair = {r["scheduler"]: r for r in big if r["setting"] == setting and r["mode"] == mode
                    and r.get("rate_offered") == rate and r.get("repeat", 0) == repeat}
            if "fgpu" not in pair or "kube-scheduler" not in pair:
                continue
            f, k = pair["fgpu"], pair["kube-scheduler"]
            ratio = f["pods_per_s"] / k["pods_per_s"] if k["pods_per_s"] else float("nan")
            target = mode == "fast"
            note = "" if target else f" {rate:g}/s (informational: both offered the same rate)"
            out.append((f"fgpu ≥ 1.0× kube-scheduler pods/s, {setting}, {mode}{note}",
                        f"{f['pods_per_s']:.1f} vs {k['pods_per_s']:.1f} = {ratio:.2f}×",
                        met(ratio) if target else "—"))
    for r in big:
        if r["scheduler"] == "fgpu" and r["mode"] == "rate":
            qps = 50.0 if r["setting"].startswith("default") else float(r["setting"].split("/")[0])
            if qps < r["rate_offered"]:
                out.append((f"fgpu p99 ≤ 1 s at {r['rate_offered']:g} pods/s offered, {r['setting']}",
                            f"{secs(r['p99'])}", f"— (QPS {qps:g} < {r['rate_offered']:g} offered: a backlog by design)"))
            else:
                out.append((f"fgpu p99 ≤ 1 s at {r['rate_offered']:g} pods/s offered, {r['setting']}",
                            f"{secs(r['p99'])} (created {r['created_per_s']:.0f}/s)",
                            "yes" if r["p99"] <= 1.0 else "NO"))
    fgpu = [r for r in rows if r["scheduler"] == "fgpu"]
    if fgpu:
        peak = max(r["rss_peak_mb"] for r in fgpu)
        out.append(("operator RSS ≤ 300 MB (peak over all runs)", f"{peak:.0f} MB", "yes" if peak <= 300 else "NO"))
    for r in rows:
        if r.get("case") == "small":
            ok = r["bound"] == r["pods"] and r["seconds"] < 30
            how = "through the admission webhook" if r.get("webhook") else "pods routed and sized already"
            out.append((f"{r['pods']} pods on {r['nodes']} nodes bound < 30 s ({how})",
                        f"{r['bound']} bound in {r['seconds']:.1f} s ({timing(r)})", "yes" if ok else "NO"))
    return out


def met(ratio: float) -> str:
    """A rate ratio against the 1.0x target: within 1% is a tie (two schedulers pinned at the same client QPS
    differ by less than the run-to-run noise), not a miss."""
    return "yes" if ratio >= 1.0 else "tie (within 1%)" if ratio >= 0.99 else "NO"


def targets_table(rows: list[tuple[str, str, str]]) -> str:
    return "\n".join(["| target | measured | met |", "|---|---|---|"] + [f"| {a} | {b} | {c} |" for a, b, c in rows])


LINES = {"fgpu": "-", "kube-scheduler": "--"}  # the null binder's runs dotted


def plot(rows: list[dict], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    groups = [("small case", [r for r in rows if r.get("case") == "small"])]
    groups += [(f"mode: {m}", [r for r in rows if r.get("case") != "small" and r["mode"] == m])
               for m in dict.fromkeys(r["mode"] for r in rows if r.get("case") != "small")]
    groups = [g for g in groups if g[1]]
    sweep = [r for r in rows if r.get("case") != "small" and r["mode"] == "rate"]
    swept = len({r["rate_offered"] for r in sweep}) > 1
    fig, axes = plt.subplots(1, len(groups) + swept, figsize=(6.5 * (len(groups) + swept), 4.8), squeeze=False)
    for ax, (title, group) in zip(axes[0], groups, strict=False):
        for r in group:
            xs = [0.0, *r["bound_at"]]
            offered = f", offered {r['rate_offered']:g}/s" if r.get("rate_offered") else ""
            ax.step(xs, range(len(xs)), where="post",
                    label=f"{r['scheduler']} {r['setting']}{offered} ({r['pods_per_s']:.0f}/s)",
                    linestyle=LINES.get(r["scheduler"], ":"))
        ax.set_title(f"{title}: {group[0]['pods']} pods, {group[0]['nodes']} nodes")
        ax.set_xlabel("seconds since the first create")
        ax.set_ylabel("pods bound")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if swept:  # create->bound against the offered rate, one line per scheduler and setting
        ax = axes[0][-1]
        for key in dict.fromkeys((r["scheduler"], r["setting"]) for r in sweep):
            line = sorted((r for r in sweep if (r["scheduler"], r["setting"]) == key), key=lambda r: r["rate_offered"])
            xs = [r["rate_offered"] for r in line]
            style = LINES.get(key[0], ":")
            ax.plot(xs, [r["p99"] for r in line], style, marker="o", label=f"{key[0]} {key[1]} p99")
            ax.plot(xs, [r["p50"] for r in line], style, marker=".", alpha=0.6, label=f"{key[0]} {key[1]} p50")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_title("create->bound against the offered rate")
        ax.set_xlabel("pods/s offered")
        ax.set_ylabel("seconds")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return f"plot: {path}"


def machine(operator_python: Path | None) -> dict:
    rev = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "operator"], capture_output=True,
                           text=True)
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in cpuinfo.splitlines()) if v}
    python, build = interpreter(Path(sys.executable))  # the pod creator's, and the operator's unless operator_python
    out = {"cpus": os.cpu_count(), "cpu_model": cpu.get("model name", "?"), "cpu_mhz": cpu.get("cpu MHz", "?"),
           "loadavg": os.getloadavg(), "git": rev.stdout.strip(), "operator_changes": dirty.stdout.split("\n")[:-1],
           "python": python, "python_build": build}
    if operator_python:
        version, build = interpreter(operator_python)
        out.update(operator_python=str(operator_python), operator_python_version=version, operator_python_build=build)
    return out


def interpreter(python: Path) -> tuple[str, str]:
    """An interpreter's version and build (`python_build`), asked of the interpreter itself."""
    probe = ("import platform, sysconfig; print(platform.python_version()); "
             "print(*(sysconfig.get_config_var(v) or '' for v in ('CONFIG_ARGS', 'PY_CFLAGS')), sep='\\n')")
    out = subprocess.run([str(python), "-I", "-c", probe], capture_output=True, text=True, check=True).stdout
    version, config, cflags = (out.split("\n") + ["", ""])[:3]
    return version, python_build(config, cflags)


def python_build(config_args: str, cflags: str) -> str:
    """What an interpreter's configure line and C flags asked for: "PGO+LTO, frame pointers" as the operator image's
    CPython (`make python-pgo`), "PGO+LTO" (faster than the image's), or "no PGO/LTO" (pyenv's default; a
    distribution may optimise by other means that these do not show). It sets part of the operator's CPU per pod."""
    have = [name for flag, name in (("--enable-optimizations", "PGO"), ("--with-lto", "LTO")) if flag in config_args]
    pointers = ", frame pointers" if "-fno-omit-frame-pointer" in cflags.split() else ""
    return ("+".join(have) if have else "no PGO/LTO") + pointers


# ---- main -----------------------------------------------------------------------------------------------------
def kwok_stages(plane, workdir: Path, args) -> Path | None:
    """KWOK's stage file for this run: testbin's upstream stages (None) unless --no-pod-stages drops the pod
    stages or --node-heartbeat lease swaps node-heartbeat for node-heartbeat-with-lease."""
    import yaml

    from devcluster.kubeplane import KWOK_LEASE_STAGE, KWOK_STAGES

    if not args.no_pod_stages and args.node_heartbeat == "status":
        return None
    stages = [d for d in yaml.safe_load_all((plane.testbin / KWOK_STAGES).read_text()) if d and d.get("kind") == "Stage"]
    if args.no_pod_stages:
        stages = [d for d in stages if d["metadata"]["name"].startswith("node-")]
    if args.node_heartbeat == "lease":
        lease = [d for d in yaml.safe_load_all((plane.testbin / KWOK_LEASE_STAGE).read_text()) if d]
        stages = [d for d in stages if d["metadata"]["name"] != "node-heartbeat"] + lease
    path = workdir / "kwok-stages.yaml"
    path.write_text(yaml.safe_dump_all(stages))
    return path


def heartbeat_label(args) -> str:
    if args.node_heartbeat == "lease":
        return f"by Lease ({args.node_lease_seconds} s, renewed every {args.node_lease_seconds / 4:g} s; status every 10-20 min)"
    return "by node status every 20-45 s (KWOK's default stage)"


def _interrupted(signum, frame) -> None:
    raise KeyboardInterrupt  # SIGTERM stops everything as Ctrl-C does (no operator left behind)


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGTERM, _interrupted)
    from devcluster.kubeplane import ControlPlane, TestbinError, find_testbin

    try:  # before anything starts: a missing control plane is one line and exit 2, not a traceback
        testbin = find_testbin(os.environ.get("FGPU_TESTBIN"))
    except TestbinError as err:
        print(f"bench/scheduler.py: {err}", file=sys.stderr)
        return 2
    began = time.perf_counter()
    info = machine(args.operator_python)
    operator = (f", operator on {args.operator_python}: Python {info['operator_python_version']} "
                f"({info['operator_python_build']})" if args.operator_python else "")
    log(f"{info['cpus']} CPUs ({info['cpu_model']}, {info['cpu_mhz']} MHz), load average {' '.join(f'{x:.2f}' for x in info['loadavg'])}, git {info['git']}, "
        f"Python {info['python']} ({info['python_build']}){operator}")
    workdir = Path(tempfile.mkdtemp(prefix="fgpu-bench-sched-"))
    plane = ControlPlane(testbin, workdir / "plane", workdir / "etcd")
    bench = Bench(plane, workdir, args)
    ok = False
    try:
        plane.start()
        if args.cpu_burner:
            bench.burner = subprocess.Popen([sys.executable, str(REPO / "bench" / "helpers" / "cpu_burner.py"),
                                             "--share", str(args.cpu_burner)])
            log(f"a noisy neighbour busy-loops {args.cpu_burner:.0%} of one core (pid {bench.burner.pid})")
        plane.start_kwok(kwok_stages(plane, workdir, args),
                         node_lease_seconds=args.node_lease_seconds if args.node_heartbeat == "lease" else 0)
        if not args.no_small:
            bench.add_nodes(args.small_nodes)
            for webhook in (False, True):  # then the same pods as users write them
                pid = bench.start("fgpu", None, webhook=webhook)
                label = "own default (500/1000)" + (", through the webhook" if webhook else "")
                row = bench.run("fgpu", pid, label, "fast", args.small_pods, make_pod=user_pod if webhook else None)
                row.update(case="small", webhook=webhook)
                bench.stop()
        if not args.small:
            bench.add_nodes(args.nodes)
            for setting in args.settings:
                for repeat, scheduler in itertools.product(range(args.repeat), args.schedulers):
                    pid = bench.start(scheduler, setting)
                    for mode, rate in mode_rates(args):
                        bench.run(scheduler, pid, setting.label, mode, args.pods, rate=rate)["repeat"] = repeat
                    bench.stop()
        ok = True
    except KeyboardInterrupt:
        log("interrupted: stopping everything")
    except Exception:  # still stop everything and print what was measured
        traceback.print_exc()
    finally:
        bench.stop()
        if bench.burner:
            bench.burner.kill()
            bench.burner.wait()
        plane.stop()
        shutil.rmtree(workdir / "etcd", ignore_errors=True)
        if ok and not args.keep_logs:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            log(f"logs kept in {workdir / 'plane'} and {workdir}/operator-*.log")
    wall = time.perf_counter() - began
    rows = bench.runs
    if not rows:
        return 1
    checks = targets(rows, args)
    print(f"\n{info['cpus']} CPUs ({info['cpu_model']}, {info['cpu_mhz']} MHz) shared with everything (and other users); load average at start "
          f"{info['loadavg'][0]:.2f}, at end {os.getloadavg()[0]:.2f}; {args.gpus_per_node} GPUs per node; "
          f"fgpu policy {args.policy}; operator and pod creator on Python {info['python']}; KWOK {'node stages only' if args.no_pod_stages else 'marks bound pods Running'}, "
          f"node heartbeat {heartbeat_label(args)}"
          + (f"; kube-scheduler scores {args.kube_nodes_to_score}% of the nodes" if args.kube_nodes_to_score else "")
          + f"; wall time {wall:.0f} s\n")
    print(results_table(rows))
    print("\nCPU during each run (share of one core; the machine has "
          f"{info['cpus']}):\n")
    print(cpu_table(rows))
    print("\nWrites each bound pod cost the apiserver during the run (apiserver_request_total; the bench's own "
          "pod creations left out):\n")
    print(writes_table(rows))
    print("\n" + targets_table(checks) + "\n")
    print(plot(rows, args.plot), flush=True)
    if args.out_json:
        args.out_json.parent.mkdir(parents=True, exist_ok=True)
        args.out_json.write_text(json.dumps({
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "settings"}
            | {"settings": [s.label for s in args.settings]},
            "machine": info, "wall_s": wall, "runs": rows,
            "targets": [{"target": a, "measured": b, "met": c} for a, b, c in checks]}, indent=1))
    return 0 if ok else 130


if __name__ == "__main__":
    sys.exit(main())
