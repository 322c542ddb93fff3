"""`simgpu mig check|profiles`: is a MIG layout possible on a GPU, and what profiles does it have."""
from __future__ import annotations

import argparse
import json

from simgpu import mig
from simgpu.errors import SimgpuError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("mig", help="MIG profiles and layout checks")
    sub = parser.add_subparsers(dest="mig_command", metavar="SUBCOMMAND", required=True)

    check = sub.add_parser("check", help="find a valid placement for a list of MIG profiles",
                           description="Prints {\"valid\": true, \"placements\": [...]} and exits 0, or "
                                       "{\"valid\": false, \"reason\": ...} and exits 1.")
    check.add_argument("--gpu", required=True, help="GPU name, e.g. A100-40GB, H100")
    check.add_argument("profiles", nargs="+", metavar="PROFILE", help="e.g. 3g.20gb 4g.20gb (\"MIG \" optional)")
    check.set_defaults(func=_check)

    table = sub.add_parser("profiles", help="print a GPU's MIG profile table")
    table.add_argument("--gpu", required=True, help="GPU name, e.g. A100-80GB")
    table.add_argument("--json", action="store_true", help="print JSON instead of a table")
    table.set_defaults(func=_profiles)


def _check(args: argparse.Namespace) -> int:
    # Unknown GPU or profile is bad input (exit 2, via the CLI); an impossible layout is an answer (exit 1).
    for name in args.profiles:
        mig.get_profile(args.gpu, name)
    try:
        placements = mig.check_layout(args.gpu, args.profiles)
    except SimgpuError as err:
        print(json.dumps({"valid": False, "reason": str(err)}))
        return 1
    print(json.dumps({"valid": True, "placements": [p.to_dict() for p in placements]}))
    return 0


def _profiles(args: argparse.Namespace) -> int:
    profs = mig.profiles(args.gpu)
    compute, memory = mig.slices(args.gpu)
    if args.json:
        print(json.dumps({"gpu": profs[0].gpu, "compute_slices": compute, "memory_slices": memory,
                          "profiles": [p.to_dict() for p in profs]}, indent=2))
        return 0
    print(f"{profs[0].gpu}: {compute} compute slices, {memory} memory slices")
    header = ("PROFILE", "ID", "SLICES(C/M)", "SMS", "MEMORY GiB", "MAX", "PLACEMENTS (start:size)")
    rows = [(p.name, "-" if p.profile_id is None else str(p.profile_id), f"{p.compute_slices}/{p.memory_slices}",
             str(p.sms), f"{p.mem_bytes / 2**30:.2f}" + ("" if p.mem_reported else "*"), str(p.max_count),
             " ".join(f"{s}:{n}" for s, n in p.placements)) for p in profs]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    if any(not p.mem_reported for p in profs):
        print("* size not seen in nvidia-smi output; inferred (see simgpu/data/mig.yaml)")
    return 0
