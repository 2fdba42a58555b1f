"""Seconds per iteration of the batching simulator: scheduler.serve with PricedExecutor against the loop
compiled whole (compiled_scheduler.serve_priced), every baseline on the same requests in one run.

    .venv/bin/python bench/batching_speed.py [--workload CSV] [--requests 0:1000] [--load 0.4]
        [--quick] [--record]

Both replay the same requests with the same policy and must end in the same state (checked here; the
decision-by-decision differential test is tests/targets/batching/test_compiled_scheduler.py). Each side is
timed after a warm-up replay, so compiling is not counted. Prints the ratio per baseline and over all.
`--quick` replays the first 60 requests.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import _bench
import numpy as np

from targets.base import Instance
from targets.batching.compiled_scheduler import Pricing, serve_priced
from targets.batching.kernels import PricedExecutor, cost_model
from targets.batching.scheduler import serve
from targets.batching.target import (
    BatchingTarget,
    _compiled,
    horizon_s,
    instance_limits,
    instance_requests,
    shipped_workload_path,
    slo_s,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default=str(shipped_workload_path()))
    parser.add_argument("--requests", default="", help="START:STOP of the trace (default: all of it)")
    parser.add_argument("--load", type=float, default=0.4)
    args, session = _bench.start(parser)
    if session.quick:
        args.requests = "0:60"
    target = BatchingTarget()
    config = {**target.default_config(), "load": args.load}
    if args.requests:
        config["requests"] = [int(x) for x in args.requests.split(":")]
    instance = Instance(args.workload, config, "bench", "eval")
    requests, limits = instance_requests(instance), instance_limits(instance)
    model, slo, horizon = cost_model(), slo_s(instance), horizon_s(instance, requests)
    pricing = Pricing.of(model, limits.token_budget, limits.max_seqs)
    print(f"{requests.name}: {requests.n} requests at load {args.load:g}, {limits}")
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print(f"{'policy':<10}{'iterations':>11}{'python us/it':>14}{'compiled us/it':>16}{'ratio':>8}")
    totals, rows = np.zeros(3), []
    for name, source in sorted(target.baselines().items()):
        key, params = _compiled(source), np.zeros(0)
        priced = PricedExecutor(model, limits.token_budget, limits.max_seqs)
        serve_priced(requests, limits, key, params, pricing, slo, horizon)  # warm-up: compiled or loaded
        start = time.perf_counter()
        compiled = serve_priced(requests, limits, key, params, pricing, slo, horizon)
        compiled_s = time.perf_counter() - start
        start = time.perf_counter()
        python = serve(requests, limits, key, params, priced, slo, horizon)
        python_s = time.perf_counter() - start
        if not np.array_equal(python.state, compiled.state, equal_nan=True) or python.end_s != compiled.end_s:
            sys.exit(f"bench: {name}: the compiled replay ended in another state than scheduler.serve's")
        totals += (python.iterations, python_s, compiled_s)
        rows.append(_row(name, python.iterations, python_s, compiled_s))
    rows.append(_row("all", int(totals[0]), totals[1], totals[2]))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    session.save({"requests": f"{requests.name}: {requests.n} requests at load {args.load:g}", "speed": rows})


def _row(name: str, iterations: int, python_s: float, compiled_s: float) -> dict[str, float | int | str]:
    us = 1e6 / iterations
    ratio = python_s / compiled_s
    print(f"{name:<10}{iterations:>11}{python_s * us:>14.2f}{compiled_s * us:>16.2f}{ratio:>7.1f}x")
    return {
        "policy": name,
        "iterations": iterations,
        "python us/iteration": python_s * us,
        "compiled us/iteration": compiled_s * us,
        "python / compiled": ratio,
    }


if __name__ == "__main__":
    main()
