"""The prefix-cache mechanism keeps its rules under every policy, on random prefix-tree traces."""

from __future__ import annotations

import heapq

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prefix_traces import prefix_traces

from targets.kv.block_tree import (
    COUNTERS,
    POLICY_KEY,
    POLICY_S3FIFO,
    POLICY_SIEVE,
    POLICY_STATIC_KEY,
    SKIP_DEPTH,
    SKIP_EVICTIONS,
    SKIP_PARENT,
    SKIP_REUSE,
    SKIP_TOKENS,
)
from targets.kv.eviction_heap import heap_pop, heap_push, heapify
from targets.kv.features import BLOCK_FEATURES
from targets.kv.prefix_cache import (
    ALL_POPULATION,
    POP_AGE,
    POP_HITS,
    READS_EWMA,
    READS_PARENT,
    TIME_VARYING,
    _count_percentiles,
    _percentiles,
    key_policy,
    key_reads,
    population_reads,
)
from targets.kv.target import (
    PRIORITY,
    KVTarget,
    _belady_key,
    load_workload,
    replay_trace,
    shipped_workload_path,
)
from targets.kv.trace import Trace, build_trace
from verifiers.compiler import to_numba
from verifiers.static import check

_MIXED = '''"""A policy that mixes recency, frequency, depth and ghost history."""
PARAMS = {"a": (-5.0, 5.0), "c": (-5.0, 5.0), "d": (-5.0, 5.0)}


def priority(b, p):
    return p.a * b.hits - b.age + p.c * b.depth + p.d * b.evictions
'''
_KEY = to_numba(check(_MIXED, [PRIORITY]), "priority", BLOCK_FEATURES.columns())


def _replay(trace: Trace, capacity: int, policy: int, params: np.ndarray) -> tuple[np.ndarray, ...]:
    return replay_trace(trace, capacity, _KEY, params, policy, record=True)


def _check_rules(
    trace: Trace,
    capacity: int,
    counters: np.ndarray,
    req_hits: np.ndarray,
    ev_req: np.ndarray,
    ev_block: np.ndarray,
) -> None:
    """Replay the recorded evictions in plain Python and check every rule of the mechanism."""
    cached: set[int] = set()
    children: dict[int, int] = {}
    events = list(zip(ev_req.tolist(), ev_block.tolist(), strict=True))
    e = 0
    for r in range(trace.n_requests):
        path = trace.blocks[trace.offsets[r] : trace.offsets[r + 1]].tolist()
        hits = 0
        while hits < len(path) and path[hits] in cached:
            hits += 1
        assert req_hits[r] == hits, "a hit counts only on the contiguous cached prefix"
        assert all(b not in cached for b in path[hits:]), "the cache is prefix-closed"
        while e < len(events) and events[e][0] == r:
            block = events[e][1]
            assert block in cached
            assert block not in path, "a block of the request in flight is never evicted"
            assert children.get(block, 0) == 0, "only leaves are evicted"
            cached.remove(block)
            parent = int(trace.parent[block])
            if parent >= 0:
                children[parent] -= 1
            e += 1
        for block in path[hits:]:
            if len(cached) >= capacity:
                break
            cached.add(block)
            parent = int(trace.parent[block])
            if parent >= 0:
                children[parent] = children.get(parent, 0) + 1
        assert len(cached) <= capacity, "capacity is never exceeded"
    assert e == len(events)
    named = dict(zip(COUNTERS, counters.tolist(), strict=True))
    assert named["hits"] == int(req_hits.sum())
    assert named["evictions"] == len(events)
    assert named["accesses"] == trace.n_accesses


@settings(max_examples=60, deadline=None)
@given(
    trace=prefix_traces(),
    capacity=st.integers(1, 30),
    policy=st.sampled_from([POLICY_KEY, POLICY_SIEVE, POLICY_S3FIFO]),
    weights=st.lists(st.floats(-5, 5), min_size=3, max_size=3),
)
def test_mechanism_rules_hold_for_every_policy(
    trace: Trace, capacity: int, policy: int, weights: list[float]
) -> None:
    result = _replay(trace, capacity, policy, np.array(weights))
    _check_rules(trace, capacity, *result)


def test_a_request_longer_than_the_cache_caches_only_its_head() -> None:
    records = [
        (1, {"timestamp": 0, "input_length": 512 * 5, "output_length": 1, "hash_ids": [0, 1, 2, 3, 4]})
    ]
    trace = build_trace(records, source="one")
    counters, _, _, _ = _replay(trace, 3, POLICY_KEY, np.zeros(3))
    assert dict(zip(COUNTERS, counters.tolist(), strict=True))["uncached"] == 2


def test_lru_evicts_the_least_recent_branch_first() -> None:
    # Two branches under a shared root; the older branch is evicted to make room for a third.
    rows = [
        {"timestamp": 0, "hash_ids": [0, 1]},
        {"timestamp": 1000, "hash_ids": [0, 2]},
        {"timestamp": 2000, "hash_ids": [0, 3]},
        {"timestamp": 3000, "hash_ids": [0, 2]},
        {"timestamp": 4000, "hash_ids": [0, 1]},
    ]
    records = [(i + 1, {**row, "input_length": 1024, "output_length": 1}) for i, row in enumerate(rows)]
    trace = build_trace(records, source="branches")
    lru = to_numba(
        check("def priority(b, p):\n    return b.last_access\n", [PRIORITY]),
        "priority",
        BLOCK_FEATURES.columns(),
    )
    _, req_hits, _, ev_block = replay_trace(trace, 3, lru, np.zeros(0), POLICY_KEY, record=True)
    assert req_hits.tolist() == [0, 1, 1, 2, 1]
    assert [int(trace.hash_ids[b]) for b in ev_block] == [1, 3]


def test_a_block_never_evicted_reads_no_eviction_time_and_an_evicted_one_does() -> None:
    """Ghost history: since_evicted is 1e6 until a block's first eviction, then the time since it."""
    # One-block requests in a 2-block cache: 1 and 2 are evicted as LRU would; at t=5 s block 1 (evicted at
    # 2 s, back at 3 s, used at 4 s) goes before 3 (never evicted, used at 2 s), which LRU would evict.
    times_hashes = [(0, 1), (1000, 2), (2000, 3), (3000, 1), (4000, 1), (5000, 4)]
    records = [
        (i + 1, {"timestamp": t, "input_length": 512, "output_length": 1, "hash_ids": [h]})
        for i, (t, h) in enumerate(times_hashes)
    ]
    trace = build_trace(records, source="ghosts")
    source = "def priority(b, p):\n    return b.last_access - (1000.0 if b.since_evicted < 1e6 else 0.0)\n"
    key = to_numba(check(source, [PRIORITY]), "priority", BLOCK_FEATURES.columns())
    _, _, _, ev_block = replay_trace(trace, 2, key, np.zeros(0), POLICY_KEY, record=True)
    assert [int(trace.hash_ids[b]) for b in ev_block] == [1, 2, 1]


_STATIC_MIX = '''"""A key over every feature that stays put while a block sits untouched."""
PARAMS = {"a": (-5.0, 5.0), "c": (-5.0, 5.0), "d": (-5.0, 5.0)}


def priority(b, p):
    x = p.a * b.hits + b.last_access / 1000.0 + p.c * b.depth - b.fanout + b.evictions * p.d
    return x + 0.1 * b.accesses - b.inserted_at / 3000.0 + b.tokens / b.prefix_tokens
'''
_STATIC_KEY = to_numba(check(_STATIC_MIX, [PRIORITY]), "priority", BLOCK_FEATURES.columns())


def _key_reading(feature: str) -> str:
    return f"def priority(b, p):\n    return b.{feature}\n"


@pytest.mark.parametrize("feature", BLOCK_FEATURES.names)
def test_a_key_is_replayed_statically_only_if_it_reads_no_time_varying_feature(feature: str) -> None:
    program = check(_key_reading(feature), [PRIORITY])
    assert key_policy(program, "priority") == (POLICY_KEY if feature in TIME_VARYING else POLICY_STATIC_KEY)


@pytest.mark.parametrize("feature", sorted(set(BLOCK_FEATURES.names) - TIME_VARYING))
@pytest.mark.parametrize("workload", ["gen:chat:1", "gen:agentic:2"])
def test_a_static_key_on_any_one_feature_evicts_what_scoring_at_eviction_evicts(
    feature: str, workload: str
) -> None:
    key = to_numba(check(_key_reading(feature), [PRIORITY]), "priority", BLOCK_FEATURES.columns())
    trace = load_workload(workload)
    exact = replay_trace(trace, 150, key, np.zeros(0), POLICY_KEY, record=True)
    static = replay_trace(trace, 150, key, np.zeros(0), POLICY_STATIC_KEY, record=True)
    assert all(np.array_equal(a, b) for a, b in zip(exact, static, strict=True))


@pytest.mark.parametrize("workload", ["gen:chat:0", "gen:agentic:1"])
@pytest.mark.parametrize("capacity", [40, 2000])
def test_every_static_baseline_and_belady_evict_alike_either_way(workload: str, capacity: int) -> None:
    target, trace = KVTarget(), load_workload(workload)
    keys = {"belady": _belady_key()}
    for name, source in target.baselines().items():
        program = check(source, [PRIORITY])
        if key_policy(program, "priority") == POLICY_STATIC_KEY:
            keys[name] = to_numba(program, "priority", BLOCK_FEATURES.columns())
    assert {"lru", "fifo", "belady"} <= set(keys)
    for name, key in keys.items():
        exact = replay_trace(trace, capacity, key, np.zeros(0), POLICY_KEY, record=True)
        static = replay_trace(trace, capacity, key, np.zeros(0), POLICY_STATIC_KEY, record=True)
        assert all(np.array_equal(a, b) for a, b in zip(exact, static, strict=True)), name


@settings(max_examples=60, deadline=None)
@given(
    trace=prefix_traces(),
    capacity=st.integers(1, 30),
    weights=st.lists(st.floats(-5, 5), min_size=3, max_size=3),
)
def test_the_static_heap_evicts_what_scoring_at_eviction_evicts_on_random_trees(
    trace: Trace, capacity: int, weights: list[float]
) -> None:
    params = np.array(weights)
    exact = replay_trace(trace, capacity, _STATIC_KEY, params, POLICY_KEY, record=True)
    static = replay_trace(trace, capacity, _STATIC_KEY, params, POLICY_STATIC_KEY, record=True)
    assert all(np.array_equal(a, b) for a, b in zip(exact, static, strict=True))
    _check_rules(trace, capacity, *static)


_POPULATION_MIX = '''"""Recency against both populations: a key that reads every population statistic."""
PARAMS = {"a": (-5.0, 5.0), "c": (-5.0, 5.0)}


def priority(b, p):
    hits = (b.hits - b.pop_hits_p50) / (1.0 + b.pop_hits_p90)
    return p.a * hits + p.c * b.reuse_mean / (1.0 + b.pop_age_p90) - b.age / (1.0 + b.pop_age_p50)
'''
_POPULATION_KEYS = {
    "hits_p50": "def priority(b, p):\n    return b.hits - b.age / (100.0 + b.pop_hits_p50)\n",
    "hits_p90": "def priority(b, p):\n"
    "    return log1p(b.accesses) - b.age / 100.0 + b.hits / (1.0 + b.pop_hits_p90)\n",
    "age_p50": "def priority(b, p):\n    return b.depth - b.age / (1.0 + b.pop_age_p50)\n",
    "age_p90": "def priority(b, p):\n    return b.depth - b.lifetime / (1.0 + b.pop_age_p90)\n",
    "ewma": "def priority(b, p):\n    return b.hits - b.age / (1.0 + b.ewma_hit_age + b.ewma_evict_age)\n",
    "parent": "def priority(b, p):\n"
    "    return b.depth - (b.age + b.parent_age) / 100.0 + log1p(b.parent_requests)\n",
    "none": "def priority(b, p):\n    return b.hits - b.age / 100.0\n",
}


_UNREAD_GROUPS = {
    "tokens, reuse and evictions": "def priority(b, p):\n"
    "    return (b.tokens + b.prefix_tokens) / 512.0 - b.age / (1.0 + b.reuse_mean + b.last_interval)"
    " + b.evictions - b.since_evicted / 1e6\n",
    "depth and parent": "def priority(b, p):\n    return b.depth - b.age / 100.0 + b.parent_age / 1e4\n",
}


@pytest.mark.parametrize(
    ("features", "population"),
    [
        ({"age"}, 0),
        ({"pop_hits_p50"}, POP_HITS),
        ({"pop_hits_p90", "hits"}, POP_HITS),
        ({"pop_age_p50"}, POP_AGE),
        ({"pop_age_p90", "pop_hits_p50"}, POP_HITS | POP_AGE),
        ({"ewma_hit_age", "age"}, READS_EWMA),
        ({"parent_age"}, READS_PARENT),
        ({"parent_requests", "ewma_evict_age", "pop_age_p50", "pop_hits_p90"}, ALL_POPULATION),
    ],
)
def test_a_key_names_the_statistics_to_compute_and_what_else_changes_between_evictions(
    features: set[str], population: int
) -> None:
    assert population_reads(frozenset(features)) & ALL_POPULATION == population


@pytest.mark.parametrize(
    ("features", "skipped"),
    [
        ({"age"}, SKIP_TOKENS | SKIP_DEPTH | SKIP_REUSE | SKIP_EVICTIONS | SKIP_PARENT),
        ({"tokens", "reuse_mean", "since_evicted"}, SKIP_DEPTH | SKIP_PARENT),
        ({"prefix_tokens", "last_interval", "evictions", "depth", "parent_requests"}, 0),
    ],
)
def test_a_key_names_the_feature_groups_its_scoring_can_leave_out(features: set[str], skipped: int) -> None:
    assert population_reads(frozenset(features)) & ~ALL_POPULATION == skipped


@pytest.mark.parametrize("name", sorted(_POPULATION_KEYS | _UNREAD_GROUPS))
@pytest.mark.parametrize("workload", [str(shipped_workload_path()), "gen:chat:0", "gen:agentic:1"])
def test_computing_only_the_statistics_a_key_reads_evicts_exactly_what_computing_all_does(
    name: str, workload: str
) -> None:
    """The exact rule (every statistic and feature, every evictable leaf scored at each eviction) against what
    the target replays: only the statistics and feature groups read, and the scores kept while the time and
    what the key reads stay put."""
    program = check((_POPULATION_KEYS | _UNREAD_GROUPS)[name], [PRIORITY])
    key = to_numba(program, "priority", BLOCK_FEATURES.columns())
    trace = load_workload(workload)
    population = population_reads(key_reads(program, "priority"))
    exact = replay_trace(trace, 150, key, np.zeros(0), POLICY_KEY, record=True, population=ALL_POPULATION)
    lean = replay_trace(trace, 150, key, np.zeros(0), POLICY_KEY, record=True, population=population)
    assert all(np.array_equal(a, b) for a, b in zip(exact, lean, strict=True))


@pytest.mark.parametrize("name", sorted(set(_POPULATION_KEYS) - {"none"}))
def test_each_statistic_steers_the_key_that_reads_it(name: str) -> None:
    """Left out, a statistic a key reads (or its moving averages or parent's features, whose changes then
    go unseen) sends other blocks on a generated trace or on the shipped head, where many arrivals share a
    second and scores are kept between evictions: the check above is not vacuous."""
    program = check(_POPULATION_KEYS[name], [PRIORITY])
    key = to_numba(program, "priority", BLOCK_FEATURES.columns())
    steered = []
    for workload in ("gen:chat:0", str(shipped_workload_path())):
        trace = load_workload(workload)
        read = replay_trace(trace, 150, key, np.zeros(0), POLICY_KEY, record=True, population=ALL_POPULATION)
        blind = replay_trace(trace, 150, key, np.zeros(0), POLICY_KEY, record=True, population=0)
        steered.append(not np.array_equal(read[3], blind[3]))
    assert any(steered)


_POPULATION_KEY = to_numba(check(_POPULATION_MIX, [PRIORITY]), "priority", BLOCK_FEATURES.columns())
_HITS_KEY = to_numba(check(_POPULATION_KEYS["hits_p90"], [PRIORITY]), "priority", BLOCK_FEATURES.columns())
_AGE_KEY = to_numba(check(_POPULATION_KEYS["age_p50"], [PRIORITY]), "priority", BLOCK_FEATURES.columns())


@settings(max_examples=60, deadline=None)
@given(
    trace=prefix_traces(),
    capacity=st.integers(1, 30),
    weights=st.lists(st.floats(-5, 5), min_size=3, max_size=3),
)
def test_keys_evict_alike_with_only_the_statistics_they_read_on_random_trees(
    trace: Trace, capacity: int, weights: list[float]
) -> None:
    for key, params, population in [
        (_KEY, np.array(weights), 0),
        (_HITS_KEY, np.zeros(0), POP_HITS),
        (_AGE_KEY, np.zeros(0), POP_AGE),
        (_POPULATION_KEY, np.array(weights[:2]), ALL_POPULATION),
    ]:
        exact = replay_trace(trace, capacity, key, params, POLICY_KEY, record=True, population=ALL_POPULATION)
        lean = replay_trace(trace, capacity, key, params, POLICY_KEY, record=True, population=population)
        assert all(np.array_equal(a, b) for a, b in zip(exact, lean, strict=True))
        _check_rules(trace, capacity, *lean)


def test_leaves_hit_more_times_than_counted_one_by_one_have_their_percentile_selected() -> None:
    """Past 255 hits on evictable leaves the hit percentiles are selected again, with the same evictions."""
    # Three one-block prefixes hit in every round, then a new block that needs room in 5 blocks, all in one
    # second; the key is LRU until the hits' 90th percentile passes 300, then MRU.
    hashes = [h for i in range(400) for h in (0, 1, 2, 1000 + i)]
    records = [
        (i + 1, {"timestamp": 1000 * (i // 4), "input_length": 512, "output_length": 1, "hash_ids": [h]})
        for i, h in enumerate(hashes)
    ]
    trace = build_trace(records, source="hot leaves")
    source = "def priority(b, p):\n    return -b.last_access if b.pop_hits_p90 > 300.0 else b.last_access\n"
    key = to_numba(check(source, [PRIORITY]), "priority", BLOCK_FEATURES.columns())
    exact = replay_trace(trace, 5, key, np.zeros(0), POLICY_KEY, record=True, population=ALL_POPULATION)
    lean = replay_trace(trace, 5, key, np.zeros(0), POLICY_KEY, record=True, population=POP_HITS)
    assert all(np.array_equal(a, b) for a, b in zip(exact, lean, strict=True))
    assert 0 in {int(trace.hash_ids[b]) for b in exact[3]}  # past 300, MRU sent a hot block


@given(st.lists(st.integers(0, 300), max_size=400))
def test_hit_percentiles_counted_are_the_ones_selected(hits: list[int]) -> None:
    """Hits are whole numbers, so their percentiles are counted; past 255 they are selected, as for age."""
    values = np.array(hits, dtype=np.float64)
    counted = _count_percentiles(values.copy(), values.size, np.zeros(256, np.int64))
    assert counted == _percentiles(values.copy(), values.size)


@settings(deadline=None)  # the first example compiles the heap's functions
@given(
    st.lists(st.tuples(st.integers(-3, 3), st.booleans()), max_size=200),
    st.integers(0, 200),
)
def test_the_heap_gives_its_entries_lowest_score_first_then_oldest_access(
    entries: list[tuple[int, bool]], split: int
) -> None:
    """Scores repeat (ties go to the older access); part of the entries are heapified at once, the rest
    pushed one by one, popping in between: the same entries come out as from Python's heapq."""
    rows = [(float(score), float(seq)) for seq, (score, _) in enumerate(entries, start=1)]
    heap = np.empty(2 * len(rows) + 2, np.float64)
    first = rows[:split]
    for i, (score, seq) in enumerate(first):
        heap[2 * i], heap[2 * i + 1] = score, seq
    n = len(first)
    heapify(heap, n)
    reference = list(first)
    heapq.heapify(reference)
    for (score, seq), (_, pop_now) in zip(rows[split:], entries[split:], strict=True):
        n = heap_push(heap, n, score, seq)
        heapq.heappush(reference, (score, seq))
        if pop_now:
            assert (heap[0], heap[1]) == heapq.heappop(reference)
            n = heap_pop(heap, n)
    while n:
        assert (heap[0], heap[1]) == heapq.heappop(reference)
        n = heap_pop(heap, n)
    assert not reference
