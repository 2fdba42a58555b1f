"""How the simulators' cost grows: seconds per block access (kv) and per iteration (batching) at 10k, 100k
and 1M, on traces that only get longer (the same generator, the same rates, the same machine).

    .venv/bin/python bench/sim_scaling.py [--sizes 10000 100000 1000000] [--repeats 3] [--quick] [--record]

kv: the seeded multi-turn chat generator (targets/kv/generators.py) with as many sessions as the size needs,
replayed with LRU and with a multi-feature key as the target replays them (the generator's arrivals
rarely share a time, so the multi-feature key scores every evictable leaf at nearly every eviction) in a
2,000-block cache. batching: requests drawn from the shipped Azure head's (prompt,
output) pairs with Poisson arrivals at a load the machine keeps up with, as many as the size needs in
iterations, served FCFS by the compiled simulator. Each replay is timed after a warm-up on the smallest
size, so compiling is not counted. Linear growth shows as a flat per-access (per-iteration) column.
`--quick`: 2,000 and 4,000, one replay each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

import _bench
import numpy as np

from targets.base import Instance
from targets.batching.compiled_scheduler import Pricing, serve_priced
from targets.batching.kernels import cost_model
from targets.batching.scheduler import Limits
from targets.batching.target import BatchingTarget, instance_requests, shipped_workload_path
from targets.batching.target import _compiled as batching_key
from targets.batching.trace import Requests
from targets.kv.generators import multi_turn_chat
from targets.kv.prefix_cache import key_policy, key_reads, population_reads
from targets.kv.target import PRIORITY, KVTarget, replay_trace
from targets.kv.target import _compiled as kv_key
from targets.kv.trace import Trace
from verifiers.static import check

T = TypeVar("T")
KV_CAPACITY = 2000
MULTI_FEATURE = '''"""Frequency, recency, reuse interval, depth and hit population, as evolved ones mix."""
PARAMS = {"w": (0.0, 10.0), "tau": (1.0, 1e4), "d": (0.0, 1.0)}


def priority(b, p):
    recency = -b.age / p.tau - b.reuse_mean / (10.0 * p.tau)
    return log1p(b.accesses) * p.w + recency - p.d * b.depth + b.hits / (1.0 + b.pop_hits_p90)
'''
MULTI_FEATURE_PARAMS = np.array([2.0, 100.0, 0.1])
BATCHING_LOAD = 0.25
"""Arrivals as dense as the Azure head's at this factor: the shipped machine keeps up, so the queue, and
with it the cost of an iteration, stays bounded however long the trace."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=3, help="replays per row; the median is printed")
    args, session = _bench.start(parser)
    if session.quick:
        args.sizes, args.repeats = [2000, 4000], 1
    print(f"load average before: {os.getloadavg()[0]:.2f}; median of {args.repeats} replays per row")
    kv_rows = kv(sorted(args.sizes), args.repeats)
    batching_rows = batching(sorted(args.sizes), args.repeats)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    session.save({"kv": kv_rows, "batching": batching_rows})


def kv(sizes: list[int], repeats: int) -> list[dict[str, object]]:
    """Seconds per block access of the kv replay, LRU and a multi-feature key, at each size."""
    per_session = multi_turn_chat(0, n_sessions=200).n_accesses / 200
    keys = {}
    for name, source, params in [
        ("LRU", KVTarget().baselines()["lru"], np.zeros(0)),
        ("multi-feature", MULTI_FEATURE, MULTI_FEATURE_PARAMS),
    ]:
        program = check(source, [PRIORITY])
        population = population_reads(key_reads(program, PRIORITY.name))
        keys[name] = (kv_key(source), params, key_policy(program, PRIORITY.name), population)
    print(f"\nkv: multi-turn chat (seed 0), {KV_CAPACITY}-block cache")
    head = f"{'accesses':>10} {'requests':>9} {'policy':<14} {'seconds':>8} {'us/access':>10} {'hits':>7}"
    print(f"{head} {'evictions/access':>17}")
    warm = multi_turn_chat(0, n_sessions=20)
    for key, params, policy, population in keys.values():
        _replay(warm, key, params, policy, population)
    rows: list[dict[str, object]] = []
    for size in sizes:
        trace = multi_turn_chat(0, n_sessions=max(1, round(size / per_session)))
        for name, (key, params, policy, population) in keys.items():
            seconds, counters = _timed(partial(_replay, trace, key, params, policy, population), repeats)
            us = seconds / trace.n_accesses * 1e6
            sized = f"{trace.n_accesses:>10} {trace.n_requests:>9}"
            hit, evicted = counters[2] / counters[1], counters[5] / counters[1]
            print(f"{sized} {name:<14} {seconds:>8.3f} {us:>10.3f} {hit:>7.4f} {evicted:>17.3f}")
            rows.append(
                {
                    "accesses": trace.n_accesses,
                    "requests": trace.n_requests,
                    "policy": name,
                    "seconds": seconds,
                    "us/access": us,
                    "hit rate": hit,
                    "evictions/access": evicted,
                }
            )
    return rows


def _timed(run: Callable[[], T], repeats: int) -> tuple[float, T]:
    """The median wall time of `repeats` runs, and the last run's result."""
    times = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def _replay(trace: Trace, key: object, params: np.ndarray, policy: int, population: int) -> np.ndarray:
    counters, _, _, _ = replay_trace(trace, KV_CAPACITY, key, params, policy, population=population)
    return counters


def batching(sizes: list[int], repeats: int) -> list[dict[str, object]]:
    """Seconds per iteration of the compiled batching simulator, FCFS, at each size in iterations."""
    target = BatchingTarget()
    head = instance_requests(Instance(str(shipped_workload_path()), target.default_config()))
    config = target.default_config()
    limits = Limits(config["capacity"], config["block_tokens"], config["token_budget"], config["max_seqs"])
    pricing = Pricing.of(cost_model(), limits.token_budget, limits.max_seqs)
    key, slo = batching_key(target.baselines()["fcfs"]), (config["ttft_slo_s"], config["tpot_slo_s"])
    rate = head.n / float(head.arrival_s[-1]) * BATCHING_LOAD / config["load"]
    probe = serve_priced(_drawn(head, 300, rate, 0), limits, key, np.zeros(0), pricing, slo)
    per_request = probe.iterations / 300
    print(f"\nbatching: Azure head (prompt, output) pairs, Poisson arrivals at {rate:.3f}/s, FCFS, {limits}")
    print(f"{'iterations':>10} {'requests':>9} {'seconds':>8} {'us/iteration':>13} {'unfinished':>11}")
    rows: list[dict[str, object]] = []
    for size in sizes:
        requests = _drawn(head, max(1, round(size / per_request)), rate, 1)
        seconds, served = _timed(
            partial(serve_priced, requests, limits, key, np.zeros(0), pricing, slo), repeats
        )
        us = seconds / served.iterations * 1e6
        print(f"{served.iterations:>10} {requests.n:>9} {seconds:>8.3f} {us:>13.3f} {served.unfinished:>11}")
        rows.append(
            {
                "iterations": served.iterations,
                "requests": requests.n,
                "seconds": seconds,
                "us/iteration": us,
                "unfinished": served.unfinished,
            }
        )
    return rows


def _drawn(head: Requests, n: int, rate_per_s: float, seed: int) -> Requests:
    """n requests: (prompt, output) pairs drawn from the head with replacement, Poisson arrivals."""
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, head.n, n)
    arrival = np.cumsum(rng.exponential(1.0 / rate_per_s, n))
    return Requests(arrival - arrival[0], head.prompt_tokens[pick], head.output_tokens[pick], f"drawn{n}")


if __name__ == "__main__":
    main()
