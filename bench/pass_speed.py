"""How steady this machine's speed is: the profile's whole forward passes timed again, several times in one
process and then in fresh processes, each as the median ratio of their times to the profile's price of them.

This is what every engine job of `crucible validate --target batching` measures before it serves (the
passes of at most one iteration's tokens, one warm-up and three shuffled rounds), and what the simulator's
pricing is then scaled by; a ratio that moves between timings or processes is noise no fixed profile prices.

    python bench/pass_speed.py [--profile cpu-2core-passes] [--timings 4] [--processes 2] [--max-tokens 256]
        [--quick] [--record]

`--quick`: one timing in one process, of passes of at most 32 tokens.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import _bench

from targets.costmodel.model import load_profile, pass_speed
from targets.reference_engine.profiler import Settings, time_passes


def timings(profile: str, count: int, max_tokens: int) -> None:
    """Print `count` ratios timed one after another in this process, with the seconds each took (a line
    each, which the parent reads back)."""
    loaded = load_profile(profile)
    for i in range(1, count + 1):
        began = time.perf_counter()
        passes = time_passes(
            loaded, Settings(warmup=1, repeats=3), loaded.meta.get("block_tokens", 8), max_tokens
        )
        ratio = pass_speed(loaded, passes)
        print(
            f"  timing {i}: passes x{ratio:.3f} of the profile's price ({time.perf_counter() - began:.1f} s)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu-2core-passes")
    parser.add_argument("--timings", type=int, default=4, help="timings one after another in one process")
    parser.add_argument("--processes", type=int, default=2, help="fresh processes, one after another")
    parser.add_argument("--max-tokens", type=int, default=256, help="the largest pass timed, in tokens")
    parser.add_argument("--one-process", action="store_true", help=argparse.SUPPRESS)
    args, session = _bench.start(parser)
    if session.quick:
        args.timings, args.processes, args.max_tokens = 1, 1, 32
    if args.one_process:
        timings(args.profile, args.timings, args.max_tokens)
        return
    rows = []
    for p in range(1, args.processes + 1):
        print(f"process {p}:", flush=True)
        done = subprocess.run(
            [sys.executable, __file__, "--one-process", "--profile", args.profile,
             "--timings", str(args.timings), "--max-tokens", str(args.max_tokens)],
            check=True, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        print(done.stdout, end="", flush=True)
        for i, line in enumerate(done.stdout.splitlines(), 1):
            rows.append(
                {"process": p, "timing": i, "passes / profile's price": float(line.split("x")[1].split()[0])}
            )
    session.save({"profile": args.profile, "max tokens": args.max_tokens, "timings": rows})


if __name__ == "__main__":
    main()
