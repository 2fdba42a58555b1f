"""Block accesses per second of the kv simulator, as ratios against libCacheSim's own LRU on the same stream.

Run from the repository root: `python bench/kv_speed.py [--trace PATH] [--capacity N] [--accesses N]`.
Our side times the compiled replay kernel alone (trace loaded, flattened and compiled beforehand);
libCacheSim's side times `process_trace` alone over a plain-text trace it reads from a temporary file.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import libcachesim as lcs
import numpy as np

from targets.kv.features import BLOCK_FEATURES
from targets.kv.prefix_cache import POLICY_KEY, compiled_replay
from targets.kv.target import PRIORITY, KVTarget, flatten, load_workload
from targets.kv.trace import Trace
from verifiers.compiler import to_numba
from verifiers.static import check

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
REAL = DATA / "kv" / "mooncake_conversation_train.jsonl"
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


def main() -> None:
    """Time each policy in flat and prefix mode and print the table against libCacheSim LRU."""
    args = _arguments()
    trace = _stream(args.trace, args.accesses)
    flat = flatten(trace)
    print(
        f"stream: {trace.name}, {trace.n_accesses} block accesses, {trace.n_requests} requests, "
        f"{trace.n_blocks} blocks; capacity {args.capacity} blocks; median of {args.repeats} runs"
    )

    their_s, their_hit = _libcachesim_lru(flat, args.capacity, args.repeats)
    rows: list[tuple[str, str, float, float]] = [("libCacheSim LRU", "flat", their_s, their_hit)]
    policies = {
        "LRU (baseline)": (_compile(KVTarget().baselines()["lru"]), np.zeros(0)),
        "multi-feature": (_compile(MULTI_FEATURE), MULTI_FEATURE_PARAMS),
    }
    for name, (key, params) in policies.items():
        for mode, stream in (("flat", flat), ("prefix", trace)):
            run = _replayer(key, params, args.capacity, stream)
            run(warm_up=True)
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                hit = run(warm_up=False)
                times.append(time.perf_counter() - start)
            rows.append((name, mode, statistics.median(times), hit))

    n = trace.n_accesses
    print(f"\n{'policy':<16} {'mode':<7} {'accesses/s':>12} {'vs lcs LRU':>11} {'s/replay':>9} {'hits':>7}")
    for name, mode, seconds, hit in rows:
        speed, ratio = n / seconds, their_s / seconds
        print(f"{name:<16} {mode:<7} {speed:>12,.0f} {ratio:>10.4f}x {seconds:>9.3f} {hit:>7.4f}")


def _arguments() -> argparse.Namespace:
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
    return parser.parse_args()


def _stream(workload: str, accesses: int) -> Trace:
    """The trace, cut after the first request that reaches `accesses` block accesses."""
    trace = load_workload(workload)
    if 0 < accesses < trace.n_accesses:
        trace = trace.slice(0, int(np.searchsorted(trace.offsets, accesses)))
    return trace


def _compile(source: str) -> Any:
    return to_numba(check(source, [PRIORITY]), PRIORITY.name, BLOCK_FEATURES.columns())


def _replayer(key: Any, params: np.ndarray, capacity: int, trace: Trace) -> Callable[..., float]:
    """A closure replaying the whole trace (or, to warm up the compiler, its first request)."""
    kernel = compiled_replay()

    def run(warm_up: bool) -> float:
        t = trace.slice(0, 1) if warm_up else trace
        counters, _, _, _ = kernel(
            key,
            params,
            POLICY_KEY,
            capacity,
            t.timestamps_s,
            t.offsets,
            t.blocks,
            t.parent,
            t.depth,
            t.block_tokens,
            False,
        )
        return counters[2] / counters[1]

    return run


def _libcachesim_lru(flat: Trace, capacity: int, repeats: int) -> tuple[float, float]:
    """Median seconds of libCacheSim LRU's process_trace over the flat stream, and its hit ratio.

    The hash table is sized to the stream's distinct blocks: the default 2^24 buckets cost libCacheSim
    ~0.1 s of page faults per run, which on a stream this short would flatter us several times over.
    """
    hashpower = max(16, int(np.ceil(np.log2(max(flat.n_blocks, 2)))))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "stream.txt"
        np.savetxt(path, flat.blocks, fmt="%d")
        reader = lcs.TraceReader(str(path), lcs.TraceType.PLAIN_TXT_TRACE)
        times, miss = [], 0.0
        for _ in range(repeats + 1):  # the first run warms the page cache
            cache = lcs.LRU(capacity, hashpower=hashpower)
            reader.reset()
            start = time.perf_counter()
            miss, _ = cache.process_trace(reader)
            times.append(time.perf_counter() - start)
    return statistics.median(times[1:]), 1.0 - miss


if __name__ == "__main__":
    main()
