"""fgpu's scheduler (the `fgpu operator` process) against the real kube-scheduler on one control plane of KWOK
nodes: pods bound per second, create->bound latency (p50/p99), and the scheduler's memory and CPU.

Starts etcd + kube-apiserver + KWOK from $FGPU_TESTBIN (devcluster/kubeplane.py); the operator runs as in the
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

The command is this file; what it runs on is bench/lib/ (options, load, procs, metrics, cluster, report).

    FGPU_TESTBIN=$(hack/testbin.sh | tail -n1) .venv/bin/python bench/scheduler.py [--quick]
        [--nodes 1000] [--gpus-per-node 8] [--pods 5000] [--settings default,500/1000] [--modes fast,rate]
        [--rate 100] [--small | --no-small] [--plot out/scheduler.png] [--out-json FILE]
"""
from __future__ import annotations

import argparse
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "e2e"), str(REPO / "bench")]

from fgpu_operator.controller.command import _positive as positive  # noqa: E402  (the operator's own)
from fgpu_operator.placement.policies import LIVE_POLICIES  # noqa: E402
from helpers.cpu_burner import share as share_of_core  # noqa: E402  (what --cpu-burner hands the burner)
from lib.cluster import Bench, kwok_stages  # noqa: E402
from lib.common import log  # noqa: E402
from lib.load import user_pod  # noqa: E402
from lib.options import (  # noqa: E402
    DEFAULT_SCHEDULERS,
    SCHEDULERS,
    mode_rates,
    operator_python,
    parse_modes,
    parse_rates,
    parse_schedulers,
    parse_settings,
    percent,
)
from lib.procs import machine  # noqa: E402
from lib.report import cpu_table, plot, results_table, run_file, targets, targets_table, writes_table  # noqa: E402

FULL = {"nodes": 1000, "pods": 5000, "small_nodes": 100, "small_pods": 1000, "stall": 90.0}
QUICK = {"nodes": 50, "pods": 300, "small_nodes": 10, "small_pods": 100, "stall": 30.0}


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

    try:
        testbin = find_testbin(os.environ.get("FGPU_TESTBIN"))
    except TestbinError as err:  # one line, before anything is started or written
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
        run_file(args.out_json, args, info, wall, rows, checks)
    return 0 if ok else 130


if __name__ == "__main__":
    sys.exit(main())
