"""A noisy neighbour for the scheduler bench: in every PERIOD seconds of wall time it spins until it has used SHARE x
PERIOD seconds of CPU, so a series can be run with a known amount of the machine's CPU taken away (both
schedulers' runs alike), as a busier host takes it. It counts CPU time, not wall time: on full cores a busy phase
timed by the clock would get only part of the CPU it was meant to take (7-8% of a core asked 20%, at 897c058).
If the CPU it asked for does not come within a period, it takes what it got and starts the next. Runs until killed.

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
    busy = args.share * args.period
    try:
        start = time.monotonic()
        while True:
            period_end = start + args.period
            used_until = time.thread_time() + busy
            while time.thread_time() < used_until and time.monotonic() < period_end:
                pass
            start = period_end
            time.sleep(max(0.0, period_end - time.monotonic()))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
