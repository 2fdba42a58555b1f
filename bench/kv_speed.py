"""Block accesses per second of the kv simulator, as ratios against libCacheSim's own LRU on the same stream.

Run from the repository root: `python bench/kv_speed.py [--trace PATH] [--capacity N] [--accesses N]
[--quick] [--record]` (`--quick`: the seeded chat generator, 3,000 accesses, one round).
Our side times the compiled replay kernel alone (trace loaded, flattened and compiled beforehand);
libCacheSim's side times `process_trace` alone over a plain-text trace it reads from a temporary file.
Prefix mode replays each key the way the target does (`key_policy`: the static heap for a key reading no
time-varying feature, else every evictable leaf scored at an eviction unless the scores of the last one
still hold, with only the population statistics the key reads) and, for comparison, every leaf scored with
every statistic at each eviction for every key (the same evictions); `--flat` adds the flat stream, where
every cached block is a leaf (O(capacity) per miss). The last lines hold the ratios against issue 18's aims.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _bench
import libcachesim as lcs
import numpy as np

from targets.kv.block_tree import POLICY_KEY
from targets.kv.features import BLOCK_FEATURES
from targets.kv.prefix_cache import ALL_POPULATION, key_policy, key_reads, population_reads
from targets.kv.target import PRIORITY, KVTarget, flatten, load_workload, replay_trace
from targets.kv.trace import Trace
from verifiers.compiler import to_numba
from verifiers.static import check

REAL = _bench.DATA / "kv" / "mooncake_conversation_train.jsonl"
FALLBACK = "gen:chat:0"

MULTI_FEATURE = '''"""Frequency, recency, reuse interval, depth and hit population, as evolved ones mix."""
PARAMS = {"w": (0.0, 10.0), "tau": (1.0, 1e4), "d": (0.0, 1.0)}


def priority(b, p):
    return (
        log1p(b.accesses) * p.w
        - b.age / p.tau
        - b.reuse_mean / (10.0 * p.tau)
        - p.d * b.depth
        + b.hits / (1.0 + b.pop_hits_p90)
    )
'''
MULTI_FEATURE_PARAMS = np.array([2.0, 100.0, 0.1])
AIMS = {"LRU (baseline)": 1.0, "multi-feature": 0.5}
"""Issue 18's aims for prefix mode, as ratios of libCacheSim LRU's time on the same stream in the same run."""


def main() -> None:
    """Time libCacheSim LRU and each policy's replays in interleaved rounds; print the table against LRU."""
    args, session = _arguments()
    trace = _stream(args.trace, args.accesses)
    flat = flatten(trace)
    print(
        f"stream: {trace.name}, {trace.n_accesses} block accesses, {trace.n_requests} requests, "
        f"{trace.n_blocks} blocks; capacity {args.capacity} blocks; median of {args.repeats} rounds, "
        "each round running every row once, so load that comes and goes falls on all of them"
    )
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as folder:
        runs: dict[tuple[str, str], Callable[[], float]] = {
            ("libCacheSim LRU", "flat"): _libcachesim_lru(flat, args.capacity, Path(folder))
        }
        policies = {"LRU (baseline)": (KVTarget().baselines()["lru"], np.zeros(0))}
        policies["multi-feature"] = (MULTI_FEATURE, MULTI_FEATURE_PARAMS)
        for name, (source, params) in policies.items():
            program = check(source, [PRIORITY])
            key, policy = _compile(source), key_policy(program, PRIORITY.name)
            population = population_reads(key_reads(program, PRIORITY.name))
            modes = [("prefix", trace, policy, population)]
            exact_rule = policy == POLICY_KEY and population == ALL_POPULATION
            modes += [] if exact_rule else [("prefix*", trace, POLICY_KEY, ALL_POPULATION)]
            modes += [("flat", flat, policy, population)] if args.flat else []
            for mode, stream, replay_policy, replay_population in modes:
                runs[(name, mode)] = _replayer(
                    key, params, args.capacity, stream, replay_policy, replay_population
                )
        hits = {row: run() for row, run in runs.items()}  # warm-up: compiles, fills the page cache
        times: dict[tuple[str, str], list[float]] = {row: [] for row in runs}
        for _ in range(args.repeats):
            for row, run in runs.items():
                start = time.perf_counter()
                run()
                times[row].append(time.perf_counter() - start)

    n = trace.n_accesses
    their_s = statistics.median(times[("libCacheSim LRU", "flat")])
    print(f"\n{'policy':<16} {'mode':<7} {'accesses/s':>12} {'vs lcs LRU':>11} {'s/replay':>9} {'hits':>7}")
    rows = []
    for (name, mode), measured in times.items():
        seconds = statistics.median(measured)
        speed, ratio = n / seconds, their_s / seconds
        print(
            f"{name:<16} {mode:<7} {speed:>12,.0f} {ratio:>10.4f}x {seconds:>9.3f} {hits[(name, mode)]:>7.4f}"
        )
        rows.append(
            {
                "policy": name,
                "mode": mode,
                "accesses/s": speed,
                "vs libCacheSim LRU": ratio,
                "s/replay": seconds,
                "hit rate": hits[(name, mode)],
            }
        )
    print("prefix: replayed as the target replays it (the static heap where the key allows it, scores kept")
    print("while they hold: exactly the same evictions); prefix*: every evictable leaf scored with every")
    print("statistic at each eviction, whatever the key reads")
    aims = []
    for name, aim in AIMS.items():
        ratio = their_s / statistics.median(times[(name, "prefix")])
        met = ratio >= aim
        print(f"aim {name}: >= {aim}x libCacheSim LRU, {'met' if met else 'not met'} ({ratio:.3f}x)")
        aims.append({"policy": name, "aim (x libCacheSim LRU)": aim, "measured": ratio, "met": met})
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    stream = f"{trace.name}: {n} block accesses, capacity {args.capacity} blocks, median of {args.repeats}"
    session.save({"stream": stream, "speed": rows, "aims": aims})


def _arguments() -> tuple[argparse.Namespace, _bench.Session]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = str(REAL) if REAL.is_file() else FALLBACK
    parser.add_argument("--trace", default=default, help="Mooncake JSONL path or gen:<kind>:<seed>")
    parser.add_argument("--capacity", type=int, default=2000, help="cache size in blocks")
    parser.add_argument(
        "--accesses",
        type=int,
        default=60_000,
        help="keep the requests up to this many block accesses (0: all); flat mode scores every cached "
        "block at each miss, so it is O(capacity) per access",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--flat", action="store_true", help="also time the flat stream (slow)")
    args, session = _bench.start(parser)
    if session.quick:
        args.trace, args.capacity, args.accesses, args.repeats = FALLBACK, 300, 3000, 1
    return args, session


def _stream(workload: str, accesses: int) -> Trace:
    """The trace, cut after the first request that reaches `accesses` block accesses."""
    trace = load_workload(workload)
    if 0 < accesses < trace.n_accesses:
        trace = trace.slice(0, int(np.searchsorted(trace.offsets, accesses)))
    return trace


def _compile(source: str) -> Any:
    return to_numba(check(source, [PRIORITY]), PRIORITY.name, BLOCK_FEATURES.columns())


def _replayer(
    key: Any, params: np.ndarray, capacity: int, trace: Trace, policy: int, population: int
) -> Callable[[], float]:
    """A closure replaying the whole trace; returns the block hit ratio."""

    def run() -> float:
        counters, _, _, _ = replay_trace(trace, capacity, key, params, policy, population=population)
        return counters[2] / counters[1]

    return run


def _libcachesim_lru(flat: Trace, capacity: int, folder: Path) -> Callable[[], float]:
    """A closure running libCacheSim LRU's process_trace over the flat stream; returns its hit ratio.

    The hash table is sized to the stream's distinct blocks: the default 2^24 buckets cost libCacheSim
    ~0.1 s of page faults per run, which on a stream this short would flatter us several times over.
    """
    hashpower = max(16, int(np.ceil(np.log2(max(flat.n_blocks, 2)))))
    path = folder / "stream.txt"
    np.savetxt(path, flat.blocks, fmt="%d")
    reader = lcs.TraceReader(str(path), lcs.TraceType.PLAIN_TXT_TRACE)

    def run() -> float:
        cache = lcs.LRU(capacity, hashpower=hashpower)
        reader.reset()
        miss, _ = cache.process_trace(reader)
        return 1.0 - miss

    return run


if __name__ == "__main__":
    main()
