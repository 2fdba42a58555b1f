"""The tiered prefix cache: with no room below it is the single-tier cache, with unlimited room it keeps every
reuse, and on random prefix trees it evicts, writes, loads and recomputes exactly as a plain-Python
reference of its rules does."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prefix_traces import prefix_traces

from targets.base import Instance
from targets.deployments.catalog import DEPLOYMENTS
from targets.kv.block_tree import POLICY_S3FIFO, POLICY_SIEVE, POLICY_STATIC_KEY
from targets.kv.target import KVTarget, load_workload, shipped_workload_path
from targets.kv.trace import Trace
from targets.kv_tiered.cache import DISK, HOST, STATIC_BELOW, TIER_COUNTERS, replay_tiered_arrays
from targets.kv_tiered.costs import request_costs
from targets.kv_tiered.target import TieredKVTarget, _compiled
from verifiers.static import check

KV, TIERED = KVTarget(), TieredKVTarget()
HEAD = str(shipped_workload_path())
TRAIN = (
    Path(__file__).resolve().parents[3]
    / ".."
    / "shared"
    / "data"
    / "kv"
    / "mooncake_conversation_train.jsonl"
)
_LOWER = """

def keep(b, p):
    return 1.0


def below(b, p):
    return b.last_access
"""
_TIME_VARYING = '''"""Recency, frequency, depth and ghost history, read as they change."""
PARAMS = {"a": (-5.0, 5.0), "c": (-5.0, 5.0)}


def priority(b, p):
    return p.a * b.hits - b.age + p.c * b.depth + b.evictions - b.parent_age / 10.0
'''
_TIME_VARYING_OWN = _TIME_VARYING.replace(" - b.parent_age / 10.0", "")
"""A time-varying key that reads no parent's feature: its scores hold while the clock stands still."""
COSTS = DEPLOYMENTS["llama3-8b-h100"]


def _tiered(kv_source: str) -> str:
    """A tiered program whose GPU key is a single-tier program's, keeping every block below (LRU there)."""
    return kv_source + _LOWER


def _eval(target: KVTarget | TieredKVTarget, workload: str, config: dict[str, object]) -> Instance:
    return next(i for i in target.instances(workload, config) if i.role == "eval")


@pytest.mark.parametrize(
    "name",
    [*sorted(KV.baselines()), "time-varying", "time-varying-own", "s3fifo", "sieve"],
    ids=lambda n: str(n),
)
def test_with_no_room_below_the_tiers_are_the_single_tier_cache_counter_for_counter(name: str) -> None:
    single = _eval(KV, HEAD, {"capacity": 400})
    tiered = _eval(TIERED, HEAD, {"capacity": 400, "host_capacity": 0})
    if name in ("s3fifo", "sieve"):
        expected = KV.evaluate_builtin(name, single)
        keys = (STATIC_BELOW, *_compiled(_tiered(KV.baselines()["lru"])))
        policy = POLICY_S3FIFO if name == "s3fifo" else POLICY_SIEVE
        counters, _, _ = _replay(tiered, keys, policy)
        got = dict(zip(TIER_COUNTERS, counters.tolist(), strict=True))
    else:
        sources = {"time-varying": _TIME_VARYING, "time-varying-own": _TIME_VARYING_OWN}
        source = sources.get(name) or KV.baselines()[name]
        program = check(source, KV.signatures)
        expected = KV.evaluate(program, single, program.defaults())
        both = check(_tiered(source), TIERED.signatures)
        got = TIERED.evaluate(both, tiered, both.defaults())
    assert expected["evictions"] > 10_000, "the head evicts at this capacity"
    for counter in ("requests", "accesses", "hits", "tokens", "hit_tokens", "evictions", "uncached"):
        assert got[counter] == expected[counter], counter
    assert all(got[c] == 0 for c in TIER_COUNTERS[7:]), "nothing is written, loaded or dropped below"


def _replay(
    instance: Instance, keys: tuple[object, ...], policy: int, costs: tuple[np.ndarray, ...] | None = None
) -> tuple[np.ndarray, np.ndarray, Trace]:
    trace = load_workload(instance.workload)
    config = instance.config
    capacities = np.array([config["capacity"], config["host_capacity"], config["disk_capacity"]])
    arrays = (trace.timestamps_s, trace.offsets, trace.blocks, trace.parent, trace.depth, trace.block_tokens)
    counters, ttft = replay_tiered_arrays(
        keys,
        np.zeros(0),
        policy,
        capacities.astype(np.int64),
        config["write"] == "through",
        *arrays,
        costs or request_costs(COSTS, trace),
        0,
    )
    return counters, ttft, trace


def _reuses(trace: Trace) -> int:
    """Accesses of blocks some earlier request used: what a cache with unlimited room can hit."""
    seen: set[int] = set()
    reuses = 0
    for r in range(trace.n_requests):
        path = trace.blocks[trace.offsets[r] : trace.offsets[r + 1]].tolist()
        reuses += sum(b in seen for b in path)
        seen.update(path)
    return reuses


@pytest.mark.parametrize(
    "config",
    [
        {"host_capacity": 10**6},
        {"host_capacity": 10**6, "write": "through"},
        {"host_capacity": 50, "disk_capacity": 10**6},
    ],
    ids=["host", "host-write-through", "disk"],
)
def test_a_tier_with_unlimited_room_gives_every_reuse_in_the_trace(config: dict[str, object]) -> None:
    instance = _eval(TIERED, HEAD, {"capacity": 400, **config})
    lru = check(TIERED.baselines()["lru"], TIERED.signatures)
    got = TIERED.evaluate(lru, instance, {})
    trace = load_workload(HEAD)
    found = got["hits"] + got["host_hits"] + got["disk_hits"] + got["recomputed"]
    assert found == _reuses(trace) > 10_000
    assert got["write_failures"] == 0
    assert got["host_hits"] + got["disk_hits"] > 10 * got["recomputed"], "loading mostly beats recomputing"


def test_a_prefix_found_below_is_computed_again_where_the_link_is_slower_than_the_gpu() -> None:
    instance = _eval(TIERED, HEAD, {"capacity": 400, "host_capacity": 10**6})
    keys = (STATIC_BELOW, *_compiled(TIERED.baselines()["lru"]))
    prefill, recompute, host_ms, disk_ms = request_costs(COSTS, load_workload(HEAD))
    fast, _, trace = _replay(instance, keys, POLICY_STATIC_KEY)
    slow, ttft, _ = _replay(instance, keys, POLICY_STATIC_KEY, (prefill, recompute, host_ms * 1e4, disk_ms))
    fast_, slow_ = (dict(zip(TIER_COUNTERS, c.tolist(), strict=True)) for c in (fast, slow))
    assert slow_["host_hits"] == 0 and slow_["recomputed"] == fast_["host_hits"] + fast_["recomputed"]
    assert slow_["hits"] == fast_["hits"], "the GPU tier sees the same requests either way"
    full = prefill[trace.offsets[:-1] + np.arange(trace.n_requests)]
    assert (ttft <= full + 1e-9).all(), "a request never waits longer than computing its whole prompt"


def test_keeping_nothing_below_leaves_the_single_tier_cache() -> None:
    source = (
        KV.baselines()["lru"] + "\n\ndef keep(b, p):\n    return -1.0\n\n\ndef below(b, p):\n    return 0.0\n"
    )
    program = check(source, TIERED.signatures)
    tiered = TIERED.evaluate(program, _eval(TIERED, HEAD, {"capacity": 400, "host_capacity": 5000}), {})
    single = KV.evaluate(check(KV.baselines()["lru"], KV.signatures), _eval(KV, HEAD, {"capacity": 400}), {})
    assert (tiered["hits"], tiered["evictions"]) == (single["hits"], single["evictions"])
    assert tiered["host_writes"] == tiered["host_hits"] == 0


@pytest.mark.parametrize("tier", ["priority", "below"])
@pytest.mark.parametrize("key", ["-b.age", "-b.age - 0.0 * b.parent_age"], ids=["own", "parent"])
def test_a_time_varying_key_evicts_what_its_static_equivalent_evicts(tier: str, key: str) -> None:
    """-age orders blocks as last_access does at any one moment, so scoring a tier anew when the clock moves
    (or at every request, for a key reading a parent's feature) evicts what the static heap evicts."""
    static = check(TIERED.baselines()["lru"], TIERED.signatures)
    lru = f"def {tier}(b, p):\n    return b.last_access"
    varying = check(
        TIERED.baselines()["lru"].replace(lru, f"def {tier}(b, p):\n    return {key}"), TIERED.signatures
    )
    assert varying.source != static.source
    instance = _eval(TIERED, HEAD, {"capacity": 300, "host_capacity": 1500, "disk_capacity": 3000})
    assert TIERED.evaluate(varying, instance, {}) == TIERED.evaluate(static, instance, {})


def _reference(
    trace: Trace, capacities: tuple[int, int, int], second_sighting: bool, write_through: bool
) -> tuple[Counter[str], list[float]]:
    """The tiers' rules in plain Python, LRU in every tier (ties to the older access), keeping below every
    block or (`second_sighting`) those used twice, the deployment's costs choosing load or recompute."""
    gpu_cap, host_cap, disk_cap = capacities
    prefill, _, host_ms, disk_ms = request_costs(COSTS, trace)
    children: dict[int, list[int]] = {}
    for b, p in enumerate(trace.parent.tolist()):
        children.setdefault(p, []).append(b)
    gpu: set[int] = set()
    low: dict[int, int] = {}
    last: dict[int, tuple[float, int]] = {}
    uses: Counter[int] = Counter()
    count: Counter[str] = Counter()
    ttft: list[float] = []
    seq = 0

    moving: set[int] = set()  # a host block on its way to disk is still cached for its parent there

    def cached(b: int) -> bool:
        return b in gpu or b in low or b in moving

    def keep(b: int) -> bool:
        return not second_sighting or uses[b] >= 2

    def lru(blocks: list[int]) -> int:
        return min(blocks, key=lambda b: last[b])

    def room(tier: int, pinned: set[int]) -> bool:
        while sum(t == tier for t in low.values()) >= (host_cap if tier == HOST else disk_cap):
            evictable = [
                b
                for b, t in low.items()
                if t == tier and b not in gpu and b not in pinned
                and not any((low.get(c) == HOST) if tier == HOST else cached(c) for c in children.get(b, []))
            ]  # fmt: skip
            if not evictable:
                return False
            w = lru(evictable)
            del low[w]
            count["host_evictions" if tier == HOST else "disk_evictions"] += 1
            forced = any(cached(c) for c in children.get(w, []))
            moving.add(w)
            if tier == HOST and disk_cap and (forced or keep(w)) and room(DISK, pinned):
                low[w] = DISK
                count["disk_writes"] += 1
            moving.discard(w)
        return True

    def write_host(b: int, forced: bool, pinned: set[int]) -> None:
        if host_cap and (forced or keep(b)):
            if room(HOST, pinned):
                low[b] = HOST
                count["host_writes"] += 1
            else:
                count["write_failures"] += 1

    for r in range(trace.n_requests):
        path = trace.blocks[trace.offsets[r] : trace.offsets[r + 1]].tolist()
        n, row = len(path), int(trace.offsets[r]) + r
        k = 0
        while k < n and path[k] in gpu:
            k += 1
        found = k
        while found < n and path[found] in low:
            found += 1
        reused, best, loads = k, prefill[row + k], 0.0
        for i in range(k, found):
            loads += host_ms[path[i]] if low[path[i]] == HOST else disk_ms[path[i]]
            if prefill[row + i + 1] + loads < best:
                reused, best = i + 1, prefill[row + i + 1] + loads
        ttft.append(best)
        for i, b in enumerate(path):
            seq += 1
            last[b] = (float(trace.timestamps_s[r]), seq)
            uses[b] += 1
            if i < reused:
                count["hits" if i < k else "host_hits" if low[b] == HOST else "disk_hits"] += 1
            elif i < found:
                count["recomputed"] += 1
        pinned = set(path)
        need = len(gpu) + n - k - gpu_cap
        while need > 0:
            leaves = [b for b in gpu if b not in pinned and not any(c in gpu for c in children.get(b, []))]
            if not leaves:
                break
            v = lru(leaves)
            gpu.remove(v)
            count["evictions"] += 1
            need -= 1
            if v not in low:
                write_host(v, any(cached(c) for c in children.get(v, [])), pinned)
        for i in range(k, n):
            if len(gpu) >= gpu_cap:
                count["uncached"] += n - i
                break
            gpu.add(path[i])
            if write_through and path[i] not in low:
                write_host(path[i], True, pinned)
    return count, ttft


@settings(max_examples=60, deadline=None)
@given(
    trace=prefix_traces(),
    gpu=st.integers(1, 8),
    host=st.integers(0, 12),
    disk=st.integers(0, 12),
    second_sighting=st.booleans(),
    write_through=st.booleans(),
)
def test_the_tiers_keep_their_rules_as_a_plain_reference_of_them_does(
    trace: Trace, gpu: int, host: int, disk: int, second_sighting: bool, write_through: bool
) -> None:
    disk = disk if host else 0
    name = "second_sighting" if second_sighting else "lru"
    keys = (STATIC_BELOW, *_compiled(TIERED.baselines()[name]))
    arrays = (trace.timestamps_s, trace.offsets, trace.blocks, trace.parent, trace.depth, trace.block_tokens)
    capacities = np.array([gpu, host, disk], dtype=np.int64)
    counters, ttft = replay_tiered_arrays(
        keys,
        np.zeros(0),
        POLICY_STATIC_KEY,
        capacities,
        write_through,
        *arrays,
        request_costs(COSTS, trace),
        0,
    )
    expected, expected_ttft = _reference(trace, (gpu, host, disk), second_sighting, write_through)
    got = dict(zip(TIER_COUNTERS, counters.tolist(), strict=True))
    for name in ("hits", "host_hits", "disk_hits", "recomputed", "evictions", "uncached"):
        assert got[name] == expected[name], name
    for name in ("host_writes", "disk_writes", "host_evictions", "disk_evictions", "write_failures"):
        assert got[name] == expected[name], name
    assert np.allclose(ttft, expected_ttft)


@pytest.mark.skipif(not TRAIN.is_file(), reason="needs ../shared/data")
def test_on_the_train_trace_host_memory_serves_more_reuse_than_gpu_memory_at_1000_and_8000_blocks() -> None:
    instance = _eval(TIERED, str(TRAIN), {"capacity": 1000, "host_capacity": 8000})
    lru = check(TIERED.baselines()["lru"], TIERED.signatures)
    got = TIERED.evaluate(lru, instance, {})
    assert got["host_hits"] > got["hits"] > 0 and got["prefill_ms_saved"] > 0
