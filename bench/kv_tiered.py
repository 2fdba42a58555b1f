"""Block accesses per second of the tiered kv mechanism, as ratios against the single-tier replay of the
same GPU key on the same stream (the tiers' overhead: loads, writes and evictions below).

Run from the repository root: `python bench/kv_tiered.py [--quick] [--repeats N]`.
The stream is the Mooncake conversation train trace (../shared/data) at GPU 1,000 + host 8,000 blocks and
GPU 4,000 + host 32,000 blocks, the sizes the kv-tiered figures use; `--quick` (and a checkout without the
data) replays the shipped head at a tenth of those sizes, 3 times. Each key is replayed as the target replays
it: LRU in every tier (static keys: one heap per tier across requests) and a key reading time-varying
features in every tier (each tier's evictable set scored anew at each request's first eviction there).
Compiling is not timed. The last lines hold the ratios against the aims below.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import _bench
import numpy as np

from targets.base import Instance
from targets.kv.block_tree import POLICY_KEY, POLICY_STATIC_KEY
from targets.kv.prefix_cache import key_reads, population_reads
from targets.kv.target import KVTarget, load_workload, replay_trace, shipped_workload_path
from targets.kv.target import _compiled as single_key
from targets.kv_tiered.cache import STATIC_BELOW
from targets.kv_tiered.target import PRIORITY, TieredKVTarget, replay_tiered
from targets.kv_tiered.target import _compiled as tiered_keys
from verifiers.static import check

TRAIN = _bench.DATA / "kv" / "mooncake_conversation_train.jsonl"
TIME_VARYING = '''"""Recency as age and frequency, in every tier."""


def priority(b, p):
    return b.accesses - b.age / 600.0


def keep(b, p):
    return 1.0


def below(b, p):
    return b.accesses - b.in_tier_s / 600.0 - b.age / 600.0
'''
AIMS = {"LRU": 0.1, "time-varying": 0.1}
"""Tiered accesses per second as a share of the single-tier replay's with the same GPU key, at least."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args, session = _bench.start(parser)
    quick = session.quick or not TRAIN.is_file()
    workload = str(shipped_workload_path() if quick else TRAIN.resolve())
    sizes = [(100, 800), (400, 3200)] if quick else [(1000, 8000), (4000, 32000)]
    repeats = 3 if quick else args.repeats
    tiered = TieredKVTarget()
    varying = check(TIME_VARYING, tiered.signatures)
    population = population_reads(key_reads(varying, PRIORITY.name))
    single_varying = TIME_VARYING.split("\n\n\ndef keep")[0]  # the docstring and priority: a kv program
    keys = {
        "LRU": (
            (STATIC_BELOW, *tiered_keys(tiered.baselines()["lru"])),
            KVTarget().baselines()["lru"],
            POLICY_STATIC_KEY,
        ),
        "time-varying": ((0, *tiered_keys(TIME_VARYING)), single_varying, POLICY_KEY),
    }
    trace = load_workload(workload)
    print(f"stream: {Path(workload).name}, {trace.n_accesses:,} block accesses; median of {repeats} replays")
    print(f"{'key':14s} {'GPU+host':>12s} {'tiered acc/s':>14s} {'single acc/s':>14s} {'ratio':>7s}")
    ratios: dict[str, list[float]] = {name: [] for name in keys}
    rows: list[dict[str, object]] = []
    for gpu, host in sizes:
        config = {"capacity": gpu, "host_capacity": host, "disk_capacity": 0, "write": "back"}
        instance = Instance(workload, config)
        for name, (tiered_key, single_source, policy) in keys.items():
            single = single_key(single_source)

            capacities = np.array([gpu, host, 0], dtype=np.int64)
            run_tiered = partial(replay_tiered, instance, tiered_key, np.zeros(0), policy, capacities, False)
            run_single = partial(replay_trace, trace, gpu, single, np.zeros(0), policy, population=population)
            run_tiered(), run_single()  # compiles and warms up
            t_tiered = statistics.median(_timed(run_tiered) for _ in range(repeats))
            t_single = statistics.median(_timed(run_single) for _ in range(repeats))
            ratios[name].append(t_single / t_tiered)
            n = trace.n_accesses
            row = f"{n / t_tiered:>14,.0f} {n / t_single:>14,.0f} {t_single / t_tiered:>6.3f}x"
            print(f"{name:14s} {gpu:>5d}+{host:<6d} {row}")
            rows.append({"key": name, "gpu": gpu, "host": host, "tiered_acc_s": n / t_tiered,
                         "single_acc_s": n / t_single, "ratio": t_single / t_tiered})  # fmt: skip
    for name, aim in AIMS.items():
        worst = min(ratios[name])
        verdict = "met" if worst >= aim else "NOT met"
        print(f"aim {name}: tiered >= {aim}x the single-tier replay's accesses/s, {verdict} ({worst:.3f}x)")
    session.save({"stream": Path(workload).name, "repeats": repeats, "replays": rows})


def _timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
