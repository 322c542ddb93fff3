"""`simgpu token`: mint a context token for one device of a node config, as the device plugin's Allocate
does (the same Grant and `simgpu.token.issue_token`, signed with the node's token secret), so `simgpu run` and
`simgpu.client` can be tried against a daemon without a kubelet or a device plugin."""
from __future__ import annotations

import argparse
import shlex

from fgpu_contracts.cli import number
from simgpu.errors import SimgpuError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("token", help="mint a context token for a device (no device plugin needed)",
                              description=__doc__)
    p.add_argument("--config", required=True, help="the node config the daemon serves (its tokenSecretFile signs)")
    p.add_argument("--device", default="0",
                   help="GPU index, '<gpu>:<mig>' MIG index, or a GPU-/MIG- UUID (default: 0)")
    p.add_argument("--mem", default=None, help="memory quota, e.g. 8g (default: the whole device)")
    p.add_argument("--sm-pct", type=number(int, lo=1, hi=100), default=None, help="SM share in percent (1..100)")
    p.add_argument("--priority", type=int, choices=(0, 1), default=1, help="0 high, 1 low (HAMi's; default 1)")
    p.add_argument("--node-name", default=None, help="as given to the daemon (default: config, $NODE_NAME, hostname)")
    p.add_argument("--token-secret-file", default=None, help="as given to the daemon (default: the config's)")
    p.add_argument("--export", action="store_true",
                   help="print `export FGPU_CONTEXT_TOKEN=...` for a shell's eval instead of the bare token")
    p.set_defaults(func=_run)


def _device(cfg, node: str, ref: str) -> tuple[str, int]:
    """(UUID, memory bytes) of the device `ref` names."""
    gpus = cfg.gpu_devices(node)
    choices: dict[str, tuple[str, int]] = {}
    for gpu in gpus:
        choices[str(gpu.index)] = choices[gpu.uuid] = (gpu.uuid, gpu.spec.mem_bytes)
        for j, inst in enumerate(gpu.mig):
            choices[f"{gpu.index}:{j}"] = choices[inst.uuid] = (inst.uuid, inst.mem_bytes)
    if ref not in choices:
        shown = [k for k in choices if not k.startswith(("GPU-", "MIG-"))]
        raise SimgpuError(f"no device {ref!r} on node {node}", field="--device", allowed=shown + ["its UUID"])
    return choices[ref]


def _run(args: argparse.Namespace) -> int:
    from simgpu.env import CONTEXT_TOKEN
    from simgpu.nodeconfig import load_node_config, resolve_node_name
    from simgpu.token import Grant, issue_token, load_or_create_secret

    from .run import parse_bytes

    cfg = load_node_config(args.config)
    node = resolve_node_name(cfg, args.node_name)
    uuid, device_bytes = _device(cfg, node, args.device)
    mem = parse_bytes(args.mem) if args.mem is not None else None
    if mem is not None and not 1 <= mem <= device_bytes and cfg.memory_quota == "hard":
        raise SimgpuError(f"{args.mem} is {mem} bytes", field="--mem", allowed=[f"1..{device_bytes} bytes ({uuid})"])
    secret = load_or_create_secret(args.token_secret_file or cfg.token_secret_file)
    token = issue_token(secret, Grant(device_uuid=uuid, mem_limit_bytes=mem, sm_limit_pct=args.sm_pct,
                                      priority=args.priority))
    print(f"export {CONTEXT_TOKEN}={shlex.quote(token)}" if args.export else token)
    return 0
