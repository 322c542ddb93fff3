"""A noisy neighbour for the scheduler bench: busy-loops for SHARE of every PERIOD seconds on one core, so a series
can be run with a known amount of the machine's CPU taken away (both schedulers' runs alike), as a busier host
takes it. Runs until killed.

    python bench/helpers/cpu_burner.py --share 0.2 [--period 0.1]
"""
from __future__ import annotations

import argparse
import time


def share(text: str) -> float:
    """A share of one core, 0 < share < 1 (also `bench/scheduler.py --cpu-burner`'s)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a share of one core, 0 < share < 1")
    return value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--share", type=share, required=True, help="share of one core to take, 0 < share < 1")
    ap.add_argument("--period", type=share, default=0.1, help="seconds per busy+idle cycle (default 0.1)")
    args = ap.parse_args()
    busy, idle = args.share * args.period, (1 - args.share) * args.period
    try:
        while True:
            end = time.perf_counter() + busy
            while time.perf_counter() < end:
                pass
            time.sleep(idle)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
