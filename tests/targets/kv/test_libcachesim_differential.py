"""On a flat block stream our simulator is a classic cache and agrees with libCacheSim 0.3.5.

Flat mode turns every access into its own one-block request with no prefix rule and nothing pinned, so
LRU, FIFO (the candidate-format baselines), S3-FIFO, SIEVE (built-ins) and Belady must give the object
hit ratio libCacheSim gives on the same stream, every object of size 1 and the cache sized in objects.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from targets.base import Instance
from targets.kv.block_tree import POLICY_KEY, POLICY_S3FIFO, POLICY_SIEVE
from targets.kv.features import BLOCK_FEATURES
from targets.kv.target import PRIORITY, KVTarget, _belady_key, instance_trace, replay
from verifiers.compiler import to_numba
from verifiers.static import check

lcs = pytest.importorskip("libcachesim")

DATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "data"
REAL = DATA / "kv" / "mooncake_conversation_train.jsonl"
CHAT = "gen:chat:0"
REAL_ACCESSES = 60_000
TOLERANCE = 0.005
"""Half a percentage point of hit ratio."""

NEVER = np.iinfo(np.int64).max
"""libCacheSim's next-access time for an object that is not used again."""

LIBCACHESIM: dict[str, Callable[[int], Any]] = {
    "lru": lcs.LRU,
    "fifo": lcs.FIFO,
    "s3fifo": lcs.S3FIFO,
    "sieve": lcs.Sieve,
    "belady": lcs.Belady,
}

CASES = [
    *[pytest.param(CHAT, capacity, id=f"chat-{capacity}") for capacity in (300, 1000, 3000)],
    pytest.param("real", 1000, id="real60k-1000"),
    pytest.param("real", 4000, id="real60k-4000", marks=pytest.mark.slow),
    pytest.param("real", 10000, id="real60k-10000", marks=pytest.mark.slow),
]


def flat_instance(workload: str, capacity: int) -> Instance:
    """The chat trace whole, or the real trace cut at the first request past REAL_ACCESSES accesses."""
    if workload != "real":
        return Instance(CHAT, {"capacity": capacity, "flat": True})
    if not REAL.is_file():
        pytest.skip(f"{REAL} is absent")
    offsets = instance_trace(Instance(str(REAL))).offsets
    stop = int(np.searchsorted(offsets, REAL_ACCESSES))
    return Instance(str(REAL), {"capacity": capacity, "flat": True, "requests": [0, stop]})


@functools.cache
def baseline_key(name: str) -> Any:
    """A candidate-format baseline compiled the way `KVTarget.evaluate` compiles candidates."""
    program = check(KVTarget().baselines()[name], [PRIORITY])
    return to_numba(program, PRIORITY.name, BLOCK_FEATURES.columns())


def our_hit_ratio(policy: str, instance: Instance) -> float:
    """Replay one policy through the mechanism KVTarget evaluates with."""
    if policy in ("lru", "fifo"):
        counts = replay(instance, baseline_key(policy), np.zeros(0), POLICY_KEY)
    elif policy == "belady":
        counts = replay(instance, _belady_key(), np.zeros(0), POLICY_KEY)
    else:
        queue = {"s3fifo": POLICY_S3FIFO, "sieve": POLICY_SIEVE}[policy]
        counts = replay(instance, baseline_key("lru"), np.zeros(0), queue)
    return counts["hits"] / counts["accesses"]


def libcachesim_hit_ratio(policy: str, instance: Instance) -> float:
    """Feed the same stream to libCacheSim request by request, with the next use Belady needs."""
    stream = instance_trace(instance).blocks.tolist()
    next_use = [NEVER] * len(stream)
    seen: dict[int, int] = {}
    for position in range(len(stream) - 1, -1, -1):
        next_use[position] = seen.get(stream[position], NEVER)
        seen[stream[position]] = position
    cache = LIBCACHESIM[policy](int(instance.config["capacity"]))
    hits = sum(
        cache.get(lcs.Request(obj_size=1, obj_id=block, clock_time=t, next_access_vtime=next_use[t]))
        for t, block in enumerate(stream)
    )
    return hits / len(stream)


@pytest.mark.parametrize(("workload", "capacity"), CASES)
@pytest.mark.parametrize("policy", list(LIBCACHESIM))
def test_flat_hit_ratio_matches_libcachesim(policy: str, workload: str, capacity: int) -> None:
    instance = flat_instance(workload, capacity)
    ours = our_hit_ratio(policy, instance)
    theirs = libcachesim_hit_ratio(policy, instance)
    assert abs(ours - theirs) <= TOLERANCE, f"{policy}: ours {ours:.4%}, libCacheSim {theirs:.4%}"


def test_the_policies_disagree_on_these_streams() -> None:
    # Guards the comparison itself: were every policy to give one ratio, matching would prove nothing.
    instance = flat_instance(CHAT, 1000)
    ratios = {policy: libcachesim_hit_ratio(policy, instance) for policy in LIBCACHESIM}
    assert len({round(r, 3) for r in ratios.values()}) == len(ratios), ratios
