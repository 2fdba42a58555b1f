"""Simulator against real engine on a Mooncake slice: rankings and errors of prefill time saved.

Prints the fit error of every operator of the shipped profiles (median and worst relative error on the
measurements held back from each fit), then runs `crucible validate` for LRU, FIFO, LFU, Belady and the
heuristic a search found (bench/policies/found_kv.py) with the checks the kv target declares
(targets/kv/validation.py): Kendall tau of the two rankings >= 0.8, every policy's predicted time saved
within 25 % of measured, and reuse giving the logits of a full prefill. Exits 1 if a check fails.

    python bench/kv_validate.py [--requests 0:1500] [--capacity 2000] [--block-tokens 8] [--trace PATH]
                                [--profile cpu-2core-busy]

The default slice is the head of the Mooncake conversation trace at a capacity where the policies differ:
LFU keeps about a fifth more prefix than LRU, the found heuristic twice as much, Belady five times (LRU and
FIFO decide alike there, and tau-b counts that pair as a tie). Takes about a quarter of an hour on 2 quiet
cores: every request with a hit is prefilled twice (over its cached prefix and from scratch), `--repeats`
times each. The engine times computation in the computing thread's CPU time (the profiler's clock), so a
busy machine's other jobs do not count; their use of the caches and memory still does.
`--quick`: LRU and the found heuristic on 16 requests of the shipped head of the trace at 60 blocks, one
repeat, in the process sandbox (the checks are computed, not required to pass).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _bench
from rich.console import Console

from search.cli.kernels import error_table
from targets.costmodel.model import DEFAULT_PROFILE, SHIPPED, load_profile

ROOT = _bench.ROOT
TRACE = _bench.DATA / "kv" / "mooncake_conversation_train.jsonl"
QUICK_TRACE = ROOT / "targets" / "kv" / "workloads" / "mooncake_conversation_head.jsonl"
FOUND = ROOT / "bench" / "policies" / "found_kv.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--requests", default="0:1500")
    parser.add_argument("--capacity", type=int, default=2000)
    parser.add_argument("--block-tokens", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--profile",
        default=DEFAULT_PROFILE,
        choices=SHIPPED,
        help="cpu-2core-busy where other jobs load the machine",
    )
    parser.add_argument("--sandbox", default="auto", help="docker, process or auto (as crucible validate)")
    args, session = _bench.start(parser)
    if session.quick:
        args.trace = QUICK_TRACE
        args.requests, args.capacity, args.repeats, args.sandbox = "0:16", 60, 1, "process"
    args.trace = _bench.data_file(Path(args.trace), session.quick, QUICK_TRACE)
    check = [] if session.quick else ["--check"]  # tiny slices need not pass the checks
    candidates = ["lru", str(FOUND)] if session.quick else ["lru", "fifo", "lfu", "belady", str(FOUND)]
    console = Console()
    for name in SHIPPED:
        console.print(error_table(load_profile(name)))
    _bench.crucible(
        session,
        ["validate", "--target", "kv", *check,
         "--workload", args.trace, "--requests", args.requests, "--capacity", str(args.capacity),
         "--repeats", str(args.repeats), "--block-tokens", str(args.block_tokens),
         "--profile", args.profile,
         "--candidates", *candidates, "--sandbox", args.sandbox]
    )  # fmt: skip


if __name__ == "__main__":
    main()
