"""The reliability soak: fractional pods created and deleted at a steady rate on KWOK GPU nodes, under two
`fgpu operator` replicas, while faults are injected one after another (operator SIGKILL, leader killed,
kube-apiserver and etcd restarted, conflicting writers, a GPU unhealthy under its pods, a node deleted with
pods on it; and on one node of real processes, with workloads holding live contexts, its device plugin, stub
kubelet and simgpu node daemon SIGKILLed and restarted). After every fault and every 20 s the invariant checker
(`fgpu inspect check`'s, fgpu_operator/inspect/audit.py, with the real node's grants and contexts) reads the
cluster; at the end every pod left must be bound. Prints a table:
faults injected, pods created and deleted, invariant violations (must be 0), scheduling p99 during faults and
recovery time after each kind of fault. Exit code 1 on any violation or unrecovered fault.

The engine is tests/e2e/faults.py, which the e2e test tests/e2e/test_faults.py runs as the CI profile.

    FGPU_TESTBIN=$(hack/testbin.sh | tail -n1) nice .venv/bin/python bench/chaos.py [--quick]
        [--nodes 200] [--rate 1000] [--minutes 10] [--lifetime 60] [--out-json FILE]

Default (the soak): 200 nodes of 4 GPUs, 1,000 pods/minute for 10 minutes, each pod living 60 s, every kind
of fault 3 times. `--quick`: the CI profile (12 nodes + the real one, 300 pods/minute, 20 operator SIGKILLs and
one of each other fault, about 4 minutes).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "e2e")]

from faults import KINDS, QUICK, SOAK, run, table  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="the CI profile (about 4 minutes)")
    p.add_argument("--nodes", type=int, help=f"KWOK GPU nodes (soak: {SOAK.nodes})")
    p.add_argument("--rate", type=float, help=f"pods created (and deleted) per minute (soak: {SOAK.rate_per_min:g})")
    p.add_argument("--minutes", type=float, help=f"length of the soak (soak: {SOAK.minutes:g})")
    p.add_argument("--lifetime", type=float, help=f"seconds each pod lives (soak: {SOAK.lifetime_s:g})")
    p.add_argument("--rounds", type=int, help="how many times each kind of fault is injected (soak: 3)")
    p.add_argument("--out-json", type=Path, help="write the report here too")
    args = p.parse_args(argv)
    for name in ("nodes", "rate", "minutes", "lifetime", "rounds"):
        value = getattr(args, name)
        if value is not None and not (value > 0 and value < float("inf")):
            p.error(f"--{name}: {value} is not a positive finite number")
    return args


def profile_of(args: argparse.Namespace):
    base = QUICK if args.quick else SOAK
    changes = {k: v for k, v in (("nodes", args.nodes), ("rate_per_min", args.rate), ("minutes", args.minutes),
                                 ("lifetime_s", args.lifetime)) if v is not None}
    if args.rounds is not None:
        changes["faults"] = KINDS * args.rounds
    return dataclasses.replace(base, **changes)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    profile = profile_of(args)
    if args.out_json is not None and not os.access(args.out_json.parent if str(args.out_json.parent) else ".",
                                                   os.W_OK):
        print(f"chaos: --out-json: {args.out_json.parent} is not a writable directory", file=sys.stderr)
        return 2
    from devcluster.kubeplane import ControlPlane, TestbinError, find_testbin

    try:
        testbin = find_testbin(os.environ.get("FGPU_TESTBIN"))
    except TestbinError as e:
        print(f"chaos: {e}", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="fgpu-chaos-"))
    plane = ControlPlane(testbin, workdir / "plane", workdir / "etcd")

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    log(f"profile: {profile}; logs in {workdir}")
    try:
        plane.start()
        plane.start_kwok()
        namespace = plane.create_namespace("chaos")
        report = run(plane, namespace, workdir, profile, log)
    finally:
        plane.stop()
        shutil.rmtree(workdir / "etcd", ignore_errors=True)
    print(table(report))
    for line in report.violations[:20]:
        print(f"violation: {line}")
    if args.out_json is not None:
        out = {"profile": dataclasses.asdict(profile), "faults": [dataclasses.asdict(f) for f in report.faults],
               "created": report.created, "deleted": report.deleted, "createErrors": report.create_errors,
               "checks": report.checks, "violations": report.violations, "pendingAtEnd": report.pending_at_end,
               "p99All": report.p99(list(report.latencies.values())), "p99DuringFaults": report.p99(
                   report.during_faults), "elapsedS": report.elapsed_s}
        args.out_json.write_text(json.dumps(out, indent=2) + "\n")
    unrecovered = [f.kind for f in report.faults if f.recovery_s is None]
    return 1 if report.violations or unrecovered else 0


if __name__ == "__main__":
    sys.exit(main())
