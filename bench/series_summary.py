"""The command line shared by the scripts that sum up a series of `bench/scheduler.py --out-json` files
(`scheduler_pairs.py`, `scheduler_p99.py`): files or a committed summary in, a table out, optionally a PNG and a
small summary JSON that the same script reads back. Each script says how to read one run file and how to print
and draw what it found."""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path


def read(paths: list[Path], key: str, from_run: Callable[[str, dict], list[dict]], missing: str) -> list[dict]:
    """Every item of the files: a summary's `key` list, or what `from_run` finds in a bench run file. A file that
    is neither ends the script with one line; files with nothing found are named (`missing` says what lacked)."""
    out, empty = [], []
    for path in paths:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            sys.exit(f"{path}: not a readable JSON file ({err})")
        if isinstance(data, dict) and isinstance(data.get(key), list):
            out += data[key]
        elif isinstance(data, dict) and "runs" in data and "machine" in data:
            try:
                found = from_run(path.stem, data)
            except (KeyError, TypeError, ValueError, AttributeError) as err:
                sys.exit(f"{path}: a bench/scheduler.py run file lacks or garbles {err!s} in a run or its machine")
            empty += [] if found else [str(path)]
            out += found
        else:
            sys.exit(f"{path}: neither a bench/scheduler.py --out-json file nor a summary of this script")
    if not out:
        sys.exit(f"{', '.join(empty)}: {missing}")
    for path in empty:
        print(f"{path}: {missing}; left out", file=sys.stderr)
    return out


def main(argv: list[str] | None, *, doc: str, committed: Path, key: str, setting: str, plot_help: str,
         from_run: Callable[[str, dict], list[dict]], missing: str, summary: Callable[[list[dict]], list[str]],
         plot: Callable[[list[dict], Path], None]) -> int:
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path, default=[committed],
                    help=f"bench/scheduler.py --out-json files, or a summary (default: {committed.parent.name}/"
                         f"{committed.name})")
    ap.add_argument("--plot", type=Path, help=plot_help)
    ap.add_argument("--out-json", type=Path, help="write a summary JSON (small; this script reads it back)")
    args = ap.parse_args(argv)
    items = read(args.files, key, from_run, missing)
    print("\n".join(summary(items)))
    if args.plot:
        plot(items, args.plot)
        print(f"plot: {args.plot}")
    if args.out_json:
        args.out_json.write_text(json.dumps({"setting": setting, key: items}, indent=1) + "\n")
    return 0
