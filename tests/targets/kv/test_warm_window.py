"""`warm`: a window of a trace is replayed after the requests before it, uncounted, so it meets the cache and
every feature's history a cache in service would hold at that moment; without it the window starts empty."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from targets.base import Instance
from targets.kv.target import KVTarget
from verifiers.static import check

_TARGET = KVTarget()
_LRU = check(_TARGET.baselines()["lru"], _TARGET.signatures)


def _request(t_ms: int, hash_ids: list[int]) -> dict[str, object]:
    return {"timestamp": t_ms, "input_length": 512 * len(hash_ids), "output_length": 1, "hash_ids": hash_ids}


@pytest.fixture
def conversation(tmp_path: Path) -> str:
    """Turn 1 of a conversation, then two unrelated requests, then turn 2, which extends turn 1's blocks."""
    path = tmp_path / "conversation.jsonl"
    rows = [_request(0, [1, 2, 3]), _request(1000, [7, 8]), _request(1500, [9]), _request(2000, [1, 2, 3, 4])]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _eval(workload: str, config: dict[str, object]) -> Instance:
    return next(i for i in _TARGET.instances(workload, config) if i.role == "eval")


def _lru(instance: Instance) -> dict[str, float]:
    return _TARGET.evaluate(_LRU, instance, _LRU.defaults())


def test_a_warm_window_hits_on_what_the_requests_before_it_left_in_the_cache(conversation: str) -> None:
    cold = _lru(_eval(conversation, {"capacity": 10, "requests": "3:4"}))
    warm = _lru(_eval(conversation, {"capacity": 10, "requests": "3:4", "warm": True}))
    assert cold["hits"] == 0  # an empty cache: turn 2 finds nothing of turn 1
    assert warm["hits"] == 3  # turn 1's three blocks are still there
    # only the window is counted: one request of four blocks, one of them new
    assert (warm["requests"], warm["accesses"], warm["block_hit_rate"]) == (1, 4, 0.75)


def test_a_warm_window_replays_the_same_cache_the_whole_trace_does(conversation: str) -> None:
    """Its counts are the whole replay's for the window's requests: the head is replayed, not skipped."""
    whole = _lru(_eval(conversation, {"capacity": 4}))
    head = _lru(_eval(conversation, {"capacity": 4, "requests": "0:3"}))
    warm = _lru(_eval(conversation, {"capacity": 4, "requests": "3:4", "warm": True}))
    for counter in ("requests", "accesses", "hits", "evictions"):
        assert warm[counter] == whole[counter] - head[counter]


def test_warm_changes_nothing_for_a_window_that_starts_the_trace(conversation: str) -> None:
    cold = _lru(_eval(conversation, {"capacity": 4, "requests": "0:4"}))
    warm = _lru(_eval(conversation, {"capacity": 4, "requests": "0:4", "warm": True}))
    assert warm == cold


def test_a_warm_window_measures_the_gap_against_lru_and_belady_run_warm_too(conversation: str) -> None:
    instance = _eval(conversation, {"capacity": 4, "requests": "3:4", "warm": True})
    assert instance.label.endswith("[3:4] warm")
    lru, belady = _lru(instance), _TARGET.evaluate_builtin("belady", instance)
    assert (lru["hits"], belady["hits"]) == (1, 2)  # LRU let block 2 go for 9; Belady dropped 8 instead
    assert lru["gap_closed"] == pytest.approx(0.0)
    assert belady["gap_closed"] == pytest.approx(1.0)


def test_a_flat_warm_window_counts_the_window_s_accesses(conversation: str) -> None:
    """A flat stream turns every access into a request; the warm-up still ends where the window starts."""
    flat = Instance(conversation, {"capacity": 10, "requests": [3, 4], "warm": True, "flat": True})
    counts = _lru(flat)
    assert (counts["requests"], counts["accesses"], counts["hits"]) == (4, 4, 3)
