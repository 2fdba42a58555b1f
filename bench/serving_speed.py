"""Requests per second of the serving fleet's replay against the single-instance batching simulator on the
same requests, in the same run, and the seconds of one whole serving evaluation (its capacity sweep
included).

    .venv/bin/python bench/serving_speed.py [--instances 8] [--quick] [--record]

The workload is the shipped Mooncake conversation train trace (7,218 requests) on h100-llama3-8b at the
target's default load; the aim is one whole evaluation under 5 s, so a budget-300 search fits in an hour on
2 cores. Each side is timed after a warm-up, so compiling is not counted. `--quick`: its first 300
requests.
"""

from __future__ import annotations

import argparse
import time

import _bench
import numpy as np

from targets.base import Instance
from targets.batching.compiled_scheduler import serve_priced
from targets.batching.scheduler import Limits
from targets.serving.fleet import Policies, replay
from targets.serving.target import DEFAULT_SOURCE, DEFAULTS, HORIZON_S, ServingTarget, compiled_keys, fleet_of
from targets.serving.workload import requests_of, shipped_workload_path
from verifiers.static import check

AIM_S = 5.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instances", type=int, default=DEFAULTS["instances"])
    args, session = _bench.start(parser)
    workload = str(shipped_workload_path())
    window = [0, 300] if session.quick else None
    config = {**DEFAULTS, "instances": args.instances, **({"requests": window} if window else {})}
    instance = Instance(workload, config, "eval")
    requests, prefixes, _ = requests_of(workload, tuple(window) if window else None)
    loaded = requests.scaled(float(config["load"]))
    fleet, pricing = fleet_of(instance)
    route, schedule, evict = compiled_keys(DEFAULT_SOURCE)
    none = np.zeros(0)
    policies = Policies(route, none, schedule, none, evict, none)
    slo = (float(config["ttft_slo_s"]), float(config["tbt_slo_s"]))
    horizon = float(loaded.arrival_s[-1]) + HORIZON_S
    # The same requests on one instance with N times the pool, as the batching simulator replays them.
    one = Limits(
        fleet.limits.kv_blocks * fleet.instances,
        fleet.limits.block_tokens,
        fleet.limits.token_budget,
        fleet.limits.max_seqs,
    )

    def fleet_replay() -> object:
        return replay(loaded, prefixes, fleet, policies, pricing, slo, horizon)

    def batching_replay() -> object:
        return serve_priced(loaded, one, schedule, none, pricing, slo, horizon)

    seconds = {}
    for name, run in (("fleet", fleet_replay), ("batching", batching_replay)):
        run()  # warm-up: compiled, cached
        began = time.perf_counter()
        run()
        seconds[name] = time.perf_counter() - began
    target = ServingTarget()
    program = check(DEFAULT_SOURCE, target.signatures)
    target.evaluate(program, instance, {})
    began = time.perf_counter()
    metrics = target.evaluate(program, instance, {})
    evaluation = time.perf_counter() - began
    rates = {name: requests.n / s for name, s in seconds.items()}
    ratio = rates["fleet"] / rates["batching"]
    print(
        f"{requests.n} requests at load {config['load']:g}: fleet of {fleet.instances} "
        f"{rates['fleet']:,.0f} req/s "
        f"({seconds['fleet']:.3f} s), one batching instance {rates['batching']:,.0f} req/s "
        f"({seconds['batching']:.3f} s): {ratio:.2f}x"
    )
    met = evaluation < AIM_S
    print(
        f"aim: one whole evaluation (capacity {metrics['capacity']:.3f}) under {AIM_S:g} s: "
        f"{evaluation:.2f} s, "
        f"{'met' if met else 'NOT met'}" + (" (quick: 300 requests)" if session.quick else "")
    )
    session.save(
        {
            "requests": requests.n,
            "instances": fleet.instances,
            "fleet_s": round(seconds["fleet"], 4),
            "batching_s": round(seconds["batching"], 4),
            "ratio": round(ratio, 3),
            "evaluation_s": round(evaluation, 3),
            "aim_s": AIM_S,
        }
    )


if __name__ == "__main__":
    main()
