"""Simulator against real engine on an Azure conversation slice: rankings by mean TTFT and per-policy errors.

Runs FCFS, Sarathi-Serve, shortest-prompt-first, EDF, the oracle SRPT and the heuristic a search found
(bench/policies/found_batching.py) through `crucible validate --target batching` in the sandbox, each
served on the same scaled-down slice (priced by the cost model, and run on real kernels in the engine) in
`--rounds` turns, and prints both rankings (the engine's ties: pairs its rounds do not settle),
Kendall tau-b and each policy's error on mean TTFT; it exits 1 when a check of the target's (tau-b >= 0.8,
every error <= 25 %, at least half the pairs compared) fails. Each engine job first times the profile's
whole forward passes again in its own process, and the simulator is priced with every pass as much slower
as the jobs' median, and at the fastest and slowest job's speed: pairs whose simulated order turns within
those speeds are left out of tau-b too (`--retime-passes false` prices with the profile as it was measured
by `crucible profile`; the default `cpu-2core-passes` is this machine idle, `cpu-2core-busy` the same while
other jobs ran).

    python bench/batching_validate.py [--requests 0:200] [--capacity 128] [--block-tokens 8] [--load 25]
        [--rounds 5] [--profile cpu-2core-passes] [--retime-passes true]

Takes about a minute and three quarters a round on 2 idle cores (8.5 to 8.7 min for the five).
`--quick`: FCFS and the found heuristic on 8 requests of the shipped head of the trace, 4 output tokens at
most, one round, in the process sandbox (the checks are computed, not required to pass).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _bench

ROOT = _bench.ROOT
TRACE = _bench.DATA / "batching" / "azure_llm_conv_2023_train.csv"
QUICK_TRACE = ROOT / "targets" / "batching" / "workloads" / "azure_conv_head.csv"
FOUND = ROOT / "bench" / "policies" / "found_batching.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--requests", default="0:200")
    parser.add_argument("--capacity", type=int, default=128)
    parser.add_argument("--block-tokens", type=int, default=8)
    parser.add_argument("--load", type=float, default=25.0)
    parser.add_argument("--token-divisor", type=int, default=8)
    parser.add_argument("--max-output", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5, help="servings of each policy, in turns")
    parser.add_argument(
        "--profile", default="cpu-2core-passes", help="shipped, or a file `crucible profile` wrote"
    )
    parser.add_argument("--retime-passes", default="true", choices=("true", "false"))
    parser.add_argument("--sandbox", default="auto")
    args, session = _bench.start(parser)
    if session.quick:
        args.trace = QUICK_TRACE
        args.requests, args.rounds, args.max_output, args.sandbox = "0:8", 1, 4, "process"
    args.trace = _bench.data_file(Path(args.trace), session.quick, QUICK_TRACE)
    check = [] if session.quick else ["--check"]  # tiny slices need not pass the checks
    candidates = (
        ["fcfs", str(FOUND)] if session.quick else ["fcfs", "sarathi", "spf", "edf", "srpt", str(FOUND)]
    )
    _bench.crucible(
        session,
        ["validate", "--target", "batching", *check, "--workload", args.trace, "--requests", args.requests,
         "--capacity", str(args.capacity), "--block-tokens", str(args.block_tokens), "--load", str(args.load),
         "--token-divisor", str(args.token_divisor), "--max-output", str(args.max_output),
         "--rounds", str(args.rounds), "--profile", args.profile, "--retime-passes", args.retime_passes,
         "--sandbox", args.sandbox,
         "--candidates", *candidates]
    )  # fmt: skip


if __name__ == "__main__":
    main()
