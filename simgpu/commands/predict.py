"""`simgpu predict`: read a JSON array of cases (--cases FILE or stdin), print a JSON array of results.

  {"gpu": G, "op": "gemm", "m": M, "n": N, "k": K, "dtype": D, "mps_pct": P?} -> {"seconds", "tflops"}
  {"gpu": G, "op": "copy", "bytes": B}                                      -> {"seconds", "gbps"} (read + write)
  {"gpu": G, "op": "elementwise", "bytes": B, "flops": F?, "inputs": 1..4?} -> {"seconds", "gbps"}
  {"gpu": G, "op": "colocate", "mode": "timeslice"|"mps",
   "clients": [{"op": {gemm, copy or elementwise case without "gpu"}, "mps_pct": P?, "batch": N?}, ...]}
                                                                            -> {"rates": [...]}

G is a catalog name or a profile written by `simgpu calibrate`; --profile/--gpu give it to cases without one.
An elementwise op's "inputs" (default 1) is the number of tensors it reads (2 for a + b): it sets the
loads each SM keeps in flight, so how much DRAM the op takes next to MPS co-runners.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from simgpu.errors import SimgpuError
from simgpu.perf import ClientLoad, GemmOp, colocate, mps_visible_sms, op_cost, parse_op
from simgpu.perf.colocation import MODES
from simgpu.perf.ops import OP_KINDS, CopyOp, ElementwiseOp
from simgpu.profile import load_gpu, load_host, with_host

CASE_OPS = (*OP_KINDS, "colocate")
KEYS = {
    "gemm": {"gpu", "op", "m", "n", "k", "dtype", "mps_pct"},
    "copy": {"gpu", "op", "bytes"},
    "elementwise": {"gpu", "op", "bytes", "flops", "inputs"},
    "colocate": {"gpu", "op", "mode", "clients"},
}
CLIENT_KEYS = {"op", "mps_pct", "batch"}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("predict", help="predict GEMM/copy times and co-location rates (JSON in, JSON out)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", metavar="FILE", help="JSON array of cases (default: stdin)")
    p.add_argument("--profile", metavar="PROFILE.yaml", help="GPU profile for cases without \"gpu\"")
    p.add_argument("--gpu", help="GPU name (or profile) for cases without \"gpu\"")
    p.add_argument("--host", metavar="HOST.yaml",
                   help="this machine's host part (written by `simgpu calibrate --host`) for every case")
    p.set_defaults(func=run)


def _pct(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value <= 100:
        raise SimgpuError(f"got {value!r}", field=field, allowed=["1..100"])
    return float(value)


def _check_keys(d: dict, allowed: set[str], where: str) -> None:
    extra = sorted(set(d) - allowed)
    if extra:
        raise SimgpuError(f"unknown key {extra[0]!r}", field=f"{where}{extra[0]}", allowed=sorted(allowed))


def _gpu(case: dict, default: str | None, where: str):
    name = case.get("gpu", default)
    if name is None:
        raise SimgpuError("missing", field=f"{where}gpu", allowed=["a GPU name", "a profile path", "--gpu/--profile"])
    if not isinstance(name, str):
        raise SimgpuError(f"got {name!r}", field=f"{where}gpu", allowed=["a GPU name or profile path"])
    try:
        return load_gpu(name)
    except SimgpuError as err:
        raise SimgpuError(f"unknown GPU or unreadable profile {name!r}", field=f"{where}gpu",
                          allowed=err.allowed or ["a catalog GPU name", "a profile YAML"]) from None


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _op(d: object, gpu, where: str):
    """Parse an op and check its dtype against the GPU, naming fields with the `where` prefix."""
    if isinstance(d, dict) and not isinstance(d.get("op"), str):
        raise SimgpuError(f"unknown op {_shown(d.get('op'))}", field=f"{where}op", allowed=list(OP_KINDS))
    if isinstance(d, dict) and d.get("op") in KEYS and d.get("op") != "colocate":
        _check_keys(d, KEYS[d["op"]] - {"gpu", "mps_pct"}, where)
    op = parse_op(d, where)
    if isinstance(op, GemmOp) and op.dtype not in gpu.supported_dtypes():
        raise SimgpuError(f"{op.dtype} is not supported on {gpu.name}", field=f"{where}dtype",
                          allowed=gpu.supported_dtypes())
    return op


def predict_one(case: object, index: int, default_gpu: str | None, host: dict | None = None) -> dict:
    where = f"cases[{index}]."
    if not isinstance(case, dict):
        raise SimgpuError(f"expected an object, got {type(case).__name__}", field=f"cases[{index}]",
                          allowed=[f"an object with op: {' | '.join(CASE_OPS)}"])
    kind = case.get("op")
    if not isinstance(kind, str) or kind not in KEYS:
        raise SimgpuError(f"unknown op {_shown(kind)}", field=f"{where}op", allowed=list(CASE_OPS))
    _check_keys(case, KEYS[kind], where)
    gpu = _gpu(case, default_gpu, where)
    if host is not None:
        gpu = with_host(gpu, host)
    if kind == "colocate":
        return {"rates": _colocate(case, gpu, where)}
    op = _op({k: v for k, v in case.items() if k not in ("gpu", "mps_pct")}, gpu, where)
    sms = None
    if kind == "gemm" and "mps_pct" in case:
        sms = mps_visible_sms(gpu, _pct(case["mps_pct"], f"{where}mps_pct"))
    cost = op_cost(gpu, op, sm_count=sms)
    if isinstance(op, GemmOp):
        return {"seconds": cost.seconds, "tflops": op.flops / cost.seconds / 1e12}
    moved = 2 * op.bytes if isinstance(op, CopyOp) else op.bytes
    assert isinstance(op, CopyOp | ElementwiseOp)
    return {"seconds": cost.seconds, "gbps": moved / cost.seconds / 1e9}


def _colocate(case: dict, gpu, where: str) -> list[float]:
    mode = case.get("mode")
    if mode not in MODES:
        raise SimgpuError(f"got {mode!r}", field=f"{where}mode", allowed=MODES)
    clients = case.get("clients")
    if not isinstance(clients, list) or not clients:
        raise SimgpuError("expected a non-empty array", field=f"{where}clients", allowed=["[{\"op\": {...}, \"mps_pct\": P?}]"])
    loads = []
    for j, c in enumerate(clients):
        cw = f"{where}clients[{j}]."
        if not isinstance(c, dict):
            raise SimgpuError(f"expected an object, got {type(c).__name__}", field=cw.rstrip("."),
                              allowed=["{\"op\": {...}, \"mps_pct\": P?}"])
        _check_keys(c, CLIENT_KEYS, cw)
        if "op" not in c:
            raise SimgpuError("missing", field=f"{cw}op", allowed=["a gemm or copy op object"])
        op = _op(c["op"], gpu, f"{cw}op.")
        pct = None
        if "mps_pct" in c:
            if mode != "mps":
                raise SimgpuError("only with mode mps", field=f"{cw}mps_pct", allowed=["absent in mode timeslice"])
            pct = _pct(c["mps_pct"], f"{cw}mps_pct")
        batch = c.get("batch", 4)
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 10_000:
            raise SimgpuError(f"got {batch!r}", field=f"{cw}batch", allowed=["1..10000"])
        loads.append(ClientLoad(op, pct, batch))
    return colocate(gpu, mode, loads)


def read_cases(text: str) -> list:
    try:
        cases = json.loads(text)
    except json.JSONDecodeError as err:
        raise SimgpuError(f"malformed JSON: {err.msg} at line {err.lineno} column {err.colno}", field="cases",
                          allowed=["a JSON array of case objects"]) from None
    except RecursionError:
        raise SimgpuError("JSON nested too deeply", field="cases", allowed=["a JSON array of case objects"]) from None
    if not isinstance(cases, list):
        raise SimgpuError(f"expected a JSON array, got {type(cases).__name__}", field="cases",
                          allowed=["a JSON array of case objects"])
    return cases


def predict_all(cases: list, default_gpu: str | None = None, host: dict | None = None) -> list[dict]:
    return [predict_one(case, i, default_gpu, host) for i, case in enumerate(cases)]


def run(args: argparse.Namespace) -> int:
    if args.profile and args.gpu:
        raise SimgpuError("give one of --profile and --gpu", field="--profile", allowed=["--profile FILE", "--gpu NAME"])
    default = args.profile or args.gpu
    if default:
        try:  # fail early on a bad --gpu/--profile, under the option's name
            _gpu({}, default, "")
        except SimgpuError as err:
            raise SimgpuError(f"unknown GPU or unreadable profile {default!r}",
                              field="--profile" if args.profile else "--gpu", allowed=err.allowed) from None
    if args.cases:
        try:
            text = Path(args.cases).read_bytes().decode("utf-8")
        except OSError as err:
            raise SimgpuError(f"cannot read {args.cases}: {err.strerror}", field="--cases") from None
        except UnicodeDecodeError as err:
            raise SimgpuError(f"{args.cases}: byte {err.start} is not UTF-8", field="--cases",
                              allowed=["a UTF-8 JSON file"]) from None
    else:
        text = sys.stdin.read()
    host = load_host(args.host) if args.host else None
    print(json.dumps(predict_all(read_cases(text), default, host)))
    return 0
