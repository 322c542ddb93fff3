"""`simgpu fault`: mark an emulated GPU (or MIG instance) unhealthy with an XID, or clear it."""
from __future__ import annotations

import argparse
import json

from simgpu.errors import SimgpuError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("fault", help="inject or clear an XID fault on an emulated GPU",
                              description="Mark a GPU or MIG instance unhealthy (new contexts fail; the device "
                                          "plugin's ListAndWatch reports it), or clear the fault.")
    p.add_argument("--socket", required=True, help="the node daemon's unix socket")
    p.add_argument("--gpu", required=True, help="GPU-... or MIG-... UUID")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--xid", type=int, help="XID to report, e.g. 79 (fallen off the bus) or 48 (DBE ECC)")
    group.add_argument("--clear", action="store_true", help="clear the fault")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from simgpu.client import DaemonClient

    if args.xid is not None and args.xid <= 0:
        raise SimgpuError(f"got {args.xid}", field="--xid", allowed=["a positive integer, e.g. 79"])
    with DaemonClient(args.socket, timeout=10) as client:
        devices = client.clear_fault(args.gpu) if args.clear else client.set_fault(args.gpu, args.xid)
    state = next((d for d in devices if d["uuid"] == args.gpu), None)
    print(json.dumps(state))
    return 0
