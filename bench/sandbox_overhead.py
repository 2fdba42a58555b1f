"""Overhead per candidate job of each sandbox backend, as a ratio to the same evaluation run in-process.

Run from the repository root: `python bench/sandbox_overhead.py [--jobs N] [--trials N] [--gap S]`.
The job is a typical one on the shipped kv workload (`KVTarget().default_config()`): tune a candidate's
PARAMS for 8 trials on the train instance, then score the eval instance. Every job is a new candidate (one
constant differs), so each pays its own compile everywhere, as in a search. In-process means
`sandbox.worker.run` in this process, already warm: imports done, kernels loaded, the trace parsed.
Two cadences, the median wall time of each: jobs back to back (the cost of a container's start is paid in
full), and jobs `--gap` seconds apart, as when a proposer (an LLM call) takes that long per candidate (the
Docker backend's warm container is ready by then, so what is left is the cost on the job's own path).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from sandbox.base import Sandbox, SandboxUnavailable
from sandbox.docker import DockerSandbox
from sandbox.job import Job, Result, Tuning
from sandbox.process import ProcessSandbox
from sandbox.worker import run
from targets.kv.target import KVTarget

CANDIDATE = '''"""Frequency against age, with a small depth term that differs in every job."""
PARAMS = {{"w": (0.0, 8.0), "tau": (1.0, 3600.0, "log")}}


def priority(b, p):
    return p.w * log1p(b.accesses) - b.age / p.tau + {depth} * b.depth
'''


def main() -> None:
    args = _arguments()
    target = KVTarget()
    config = target.default_config()
    workload = config.pop("workload")
    instances = tuple(target.instances(workload, config))
    serial = iter(range(1_000_000))

    def job() -> Job:
        return Job(
            "kv", CANDIDATE.format(depth=1e-6 * next(serial)), instances, tuning=Tuning(trials=args.trials)
        )

    backends: dict[str, Callable[[Job], Result]] = {"in-process": run}
    for name, make in (("process", ProcessSandbox), ("docker", DockerSandbox)):
        try:
            box: Sandbox = make()
        except SandboxUnavailable as exc:
            print(f"{name}: unavailable ({exc})")
            continue
        backends[name] = box.run
    print(
        f"workload {workload} at capacity {config['capacity']}; {args.trials} trials on "
        f"{instances[0].label}, then {instances[1].label}; median of {args.jobs} jobs, one at a time\n"
    )
    cadences = {"back to back": 0.0, f"{args.gap:g} s apart": args.gap}
    medians: dict[tuple[str, str], float] = {}
    for name, execute in backends.items():
        execute(job())  # warm up: imports and kernels in-process, the page cache and the engine elsewhere
        for cadence, gap in cadences.items():
            medians[name, cadence] = statistics.median(_timed(execute, job(), gap) for _ in range(args.jobs))
    print(f"{'':<11}" + "".join(f"{cadence:>31}" for cadence in cadences))
    print(f"{'backend':<11}" + f"{'s/job':>9} {'ratio':>8} {'overhead':>12}" * len(cadences))
    for name in backends:
        row = f"{name:<11}"
        for cadence in cadences:
            seconds, base = medians[name, cadence], medians["in-process", cadence]
            overhead = "-" if name == "in-process" else f"{(seconds - base) / base:+.0%}"
            row += f"{seconds:>9.3f} {seconds / base:>7.2f}x {overhead:>12}"
        print(row)


def _timed(execute: Callable[[Job], Result], job: Job, gap: float) -> float:
    time.sleep(gap)
    start = time.perf_counter()
    result = execute(job)
    seconds = time.perf_counter() - start
    if result.status != "ok":
        raise SystemExit(f"a benchmark job ended {result.status}: {result.message}")
    return seconds


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=7, help="timed jobs per backend (the median is kept)")
    parser.add_argument("--trials", type=int, default=8, help="Optuna trials per job")
    parser.add_argument("--gap", type=float, default=3.0, help="seconds between jobs in the second cadence")
    return parser.parse_args()


if __name__ == "__main__":
    main()
