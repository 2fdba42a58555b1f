"""Simulated iterations per second on a GPU deployment against the CPU profile, in the same run, and the
seconds of one batching evaluation (its capacity sweep included) on the deployment.

    .venv/bin/python bench/deployment_speed.py [--workload CSV] [--deployment h100-llama3-8b]
        [--quick] [--record]

The default workload is the Azure conversation train trace beside the checkout (../shared/data); the aim is
one evaluation of it on h100-llama3-8b under 2 s. Each side is timed after a warm-up, so compiling is not
counted. `--quick`: the shipped head's first 200 requests.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import _bench
import numpy as np

from targets.batching.compiled_scheduler import Pricing
from targets.batching.target import (
    BatchingTarget,
    _compiled,
    instance_limits,
    instance_requests,
    priced_by,
    shipped_workload_path,
    simulate,
)
from verifiers.static import check

AIM_S = 2.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default=str(_bench.DATA / "batching" / "azure_llm_conv_2023_train.csv"))
    parser.add_argument("--deployment", default="h100-llama3-8b")
    parser.add_argument(
        "--load",
        type=float,
        default=2.0,
        help="a second load on the deployment, besides its default (3, past the full trace's capacity)",
    )
    args, session = _bench.start(parser)
    workload = _bench.data_file(Path(args.workload), session.quick, shipped_workload_path())
    target = BatchingTarget()
    fcfs = target.baselines()["fcfs"]
    window = {"requests": "0:200"} if session.quick else {}
    rows = []
    seconds = {}
    sides = (("cpu", {}), (args.deployment, {}), (args.deployment, {"load": args.load}))
    for on, load in sides:
        [_, instance] = target.instances(workload, {"deployment": on, **window, **load})
        requests, limits = instance_requests(instance), instance_limits(instance)
        pricing = Pricing.of(priced_by(instance.config), limits.token_budget, limits.max_seqs)
        key = _compiled(fcfs)
        simulate(instance, requests, limits, key, np.zeros(0), pricing)  # warm-up: compiled, cached
        began = time.perf_counter()
        served = simulate(instance, requests, limits, key, np.zeros(0), pricing)
        replay = time.perf_counter() - began
        program = check(fcfs, target.signatures)
        target.evaluate(program, instance, {})
        began = time.perf_counter()
        target.evaluate(program, instance, {})
        seconds[instance.label] = time.perf_counter() - began
        rate = served.iterations / replay
        rows.append(
            {
                "pricing": on,
                "instance": instance.label,
                "iterations": served.iterations,
                "iterations per s": round(rate),
                "one replay s": round(replay, 3),
                "one evaluation s": round(seconds[instance.label], 3),
            }
        )
        print(
            f"{on:<16} {instance.label:<48} {served.iterations:>9} iterations {rate:>12,.0f} it/s  "
            f"replay {replay:.3f} s  evaluation (with its capacity sweep) {seconds[instance.label]:.3f} s"
        )
    ratio = rows[1]["iterations per s"] / max(rows[0]["iterations per s"], 1)
    print(f"iterations per second, {args.deployment} against the cpu profile: {ratio:.2f}x")
    for row in rows[1:]:
        met = row["one evaluation s"] < AIM_S
        print(
            f"aim: one evaluation of {row['instance']} under {AIM_S:g} s: {row['one evaluation s']:.2f} s, "
            f"{'met' if met else 'NOT met'}" + (" (quick: 200 requests)" if session.quick else "")
        )
    session.save({"rows": rows, "ratio": round(ratio, 3), "aim_s": AIM_S})


if __name__ == "__main__":
    main()
