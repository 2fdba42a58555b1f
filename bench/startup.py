"""How long `crucible` takes to answer before it does any work: `--help`, `--version`, and each command's
`--help`, as a ratio to starting Python itself (`python -c pass`) measured in the same run.

    python bench/startup.py [--repeats 5] [--quick] [--record]

Each command line runs `--repeats` times in a fresh process; the median wall time is reported with its ratio
to the median of `python -c pass`. The aim: `crucible --help` under 0.5 s on a 2-core machine that is
otherwise idle (the load average at the start is printed beside the figures). `--quick` times `--help`,
`--version` and `search --help` once each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import _bench

from search.cli.main import COMMANDS

AIM_S = 0.5
"""`crucible --help` answers in under this on an idle 2-core machine (issue 39)."""


def timed(argv: list[str], repeats: int) -> float:
    """The median wall time of `argv` in a fresh process, over `repeats` runs."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--repeats", type=int, default=5, help="runs of each command line (the median is kept)"
    )
    args, session = _bench.start(parser)
    repeats = 1 if session.quick else args.repeats
    crucible = [sys.executable, "-m", "search.cli"]
    lines = [["--help"], ["--version"], *([c, "--help"] for c in COMMANDS), ["dit", "plan", "--help"]]
    if session.quick:
        lines = [*lines[:2], ["search", "--help"]]
    load = os.getloadavg()[0]
    python = timed([sys.executable, "-c", "pass"], repeats)
    print(f"load average at the start: {load:.2f} on {os.cpu_count()} cores; median of {repeats} runs each")
    print(f"{'command':<32} {'seconds':>8} {'x python':>9}")
    print(f"{'python -c pass':<32} {python:8.3f} {1.0:9.2f}")
    rows = []
    for words in lines:
        seconds = timed([*crucible, *words], repeats)
        shown = " ".join(["crucible", *words])
        print(f"{shown:<32} {seconds:8.3f} {seconds / python:9.2f}")
        rows.append({"command": shown, "seconds": seconds, "ratio_to_python": seconds / python})
    help_s = rows[0]["seconds"]
    verdict = "met" if help_s < AIM_S else "missed"
    print(f"crucible --help: {help_s:.3f} s, aim under {AIM_S} s: {verdict}")
    session.save({"python_s": python, "load_average": load, "repeats": repeats, "commands": rows})


if __name__ == "__main__":
    main()
