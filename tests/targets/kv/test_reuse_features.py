"""The reuse features (frontier, parent_age, parent_requests, turns, turn_gap, the population's moving
averages ewma_hit_age and ewma_evict_age) take the values their docs say on hand-built traces, a key reading
them is verified on their declared domains and relations, and adding them moved no baseline: the shipped
head's hit and eviction counts are those of the README's first table. The LLM prompt shows them and the
offline proposer's mutations draw them."""

from __future__ import annotations

import ast

import numpy as np
import pytest
from prefix_traces import recording_lru

from search.loop.search import brief
from search.proposers.base import Entry, ProposalRequest
from search.proposers.evolve.proposer import EvolveProposer
from search.proposers.llm.prompting import Templates
from targets.kv.block_tree import POLICY_KEY
from targets.kv.features import BLOCK_FEATURES, N_COLUMNS
from targets.kv.prefix_cache import TIME_VARYING
from targets.kv.target import SHIPPED_CAPACITY, KVTarget, replay_trace, shipped_workload_path
from targets.kv.trace import build_trace
from verifiers.compiler import to_python
from verifiers.smt import prove
from verifiers.static import check

_COLUMN = BLOCK_FEATURES.columns()
_LAST = _COLUMN["last_access"]


def _request(t_ms: int, hash_ids: list[int]) -> dict[str, object]:
    return {"timestamp": t_ms, "input_length": 512 * len(hash_ids), "output_length": 1, "hash_ids": hash_ids}


# Conversation A (root block 1 shared with B) takes two turns, then C and two one-block requests need room
# in a cache of 5 blocks. LRU evicts B's end 5 and A's end 3 at t=5 s (A's block 2 is then exposed), then 2 at
# t=9 s (exposing the root 1).
_TRACE = build_trace(
    enumerate(
        [
            _request(0, [1, 2]),  # A, turn 1: ends at 2
            _request(1000, [1, 5]),  # B: ends at 5
            _request(2000, [1, 2, 3]),  # A, turn 2: passes 2, ends at 3
            _request(5000, [7, 8, 9]),  # C: needs 2 blocks of room
            _request(9000, [11]),  # needs 1
        ],
        start=1,
    ),
    source="hand-built",
)

# Each scored row, by (now, depth, last_access): (frontier, parent_age, parent_requests).
_EXPECTED = {
    (5.0, 2, 1.0): (1.0, 3.0, 3.0),  # block 5: B ended at it; parent 1 last used at 2 s by 3 requests
    (5.0, 3, 2.0): (1.0, 3.0, 2.0),  # block 3: A's turn 2 ended at it; parent 2 used by A's 2 turns
    (5.0, 2, 2.0): (0.0, 3.0, 3.0),  # block 2: A's turn 2 passed it on the way to 3, so it is no frontier
    (9.0, 3, 5.0): (1.0, 4.0, 1.0),  # block 9: C ended at it; parent 8 used once, at 5 s
    (9.0, 2, 2.0): (0.0, 7.0, 3.0),  # block 2 again, 7 s after its parent's latest use
    (9.0, 1, 2.0): (0.0, 0.0, 5.0),  # block 1, a first block: the root is passed by all 5 requests so far
}


def _scored_rows() -> np.ndarray:
    store = np.zeros(1 + 100 * N_COLUMNS)
    replay_trace(_TRACE, 5, recording_lru, store, POLICY_KEY)
    n = int(store[0])
    return store[1 : 1 + n * N_COLUMNS].reshape(n, N_COLUMNS)


def test_each_reuse_feature_takes_the_value_its_doc_says_on_a_hand_built_trace() -> None:
    seen: dict[tuple[float, int, float], set[tuple[float, float, float]]] = {}
    for row in _scored_rows():
        at = (float(row[_COLUMN["now"]]), int(row[_COLUMN["depth"]]), float(row[_LAST]))
        values = tuple(float(row[_COLUMN[name]]) for name in ("frontier", "parent_age", "parent_requests"))
        seen.setdefault(at, set()).add(values)
    assert seen == {at: {values} for at, values in _EXPECTED.items()}


# Conversation A takes three turns: turn 2 extends all of turn 1 but its last block (3), turn 3 all of turn 2.
# D shares only the first block and E branches off A's block 2: both are first turns. The last request needs
# all 8 blocks of the cache, so LRU scores every cached block once, at t=50 s.
_TURNS_TRACE = build_trace(
    enumerate(
        [
            _request(0, [1, 2, 3]),  # A, turn 1
            _request(10_000, [1, 2, 4, 5]),  # A, turn 2: 10 s after turn 1
            _request(30_000, [1, 2, 4, 5, 6]),  # A, turn 3: 20 s after turn 2
            _request(31_000, [1, 7]),  # D: a first block in common is no conversation
            _request(40_000, [1, 2, 8]),  # E: leaves A before its turn 3's blocks 4 and 5
            _request(50_000, [20, 21, 22, 23, 24, 25, 26, 27]),
        ],
        start=1,
    ),
    source="hand-built",
)

# Each scored row, by (depth, last_access): (turns, turn_gap) of the latest request that used the block.
_EXPECTED_TURNS = {
    (3, 0.0): (1.0, 0.0),  # block 3: only A's turn 1 used it
    (3, 30.0): (3.0, 15.0),  # block 4: A's turn 3, after gaps of 10 s and 20 s
    (4, 30.0): (3.0, 15.0),  # block 5
    (5, 30.0): (3.0, 15.0),  # block 6
    (2, 31.0): (1.0, 0.0),  # block 7: D
    (3, 40.0): (1.0, 0.0),  # block 8: E
    (2, 40.0): (1.0, 0.0),  # block 2: E used it last
    (1, 40.0): (1.0, 0.0),  # block 1
}


def test_turns_and_turn_gap_count_a_conversation_by_the_requests_that_extend_it() -> None:
    store = np.zeros(1 + 100 * N_COLUMNS)
    replay_trace(_TURNS_TRACE, 8, recording_lru, store, POLICY_KEY)
    rows = store[1 : 1 + int(store[0]) * N_COLUMNS].reshape(-1, N_COLUMNS)
    turns, gap = _COLUMN["turns"], _COLUMN["turn_gap"]
    seen = {(int(row[_COLUMN["depth"]]), float(row[_LAST])): (row[turns], row[gap]) for row in rows}
    assert seen == _EXPECTED_TURNS
    assert {float(row[_COLUMN["now"]]) for row in rows} == {50.0}


def test_the_population_averages_follow_the_ages_of_hits_and_evictions_as_each_request_arrives() -> None:
    # hits before t=5 s: block 1 at ages 1 s and 1 s, block 2 at 2 s; evictions at t=5 s: 5 and 3 at ages 4 s
    # and 3 s. Each average starts at its first value and moves 1 % of the way to each later one.
    hit_age = 1.0 + 0.01 * (2.0 - 1.0)
    expected = {5.0: (hit_age, 0.0), 9.0: (hit_age, 4.0 + 0.01 * (3.0 - 4.0))}
    seen = {
        float(row[_COLUMN["now"]]): (row[_COLUMN["ewma_hit_age"]], row[_COLUMN["ewma_evict_age"]])
        for row in _scored_rows()
    }
    assert seen.keys() == expected.keys()
    for now, values in expected.items():
        assert seen[now] == pytest.approx(values)


def test_the_reuse_features_are_in_the_registry_with_unit_domain_and_doc() -> None:
    assert BLOCK_FEATURES["frontier"].unit == "0/1" and BLOCK_FEATURES["frontier"].integer
    assert (BLOCK_FEATURES["frontier"].low, BLOCK_FEATURES["frontier"].high) == (0.0, 1.0)
    assert BLOCK_FEATURES["parent_age"].unit == "s" and BLOCK_FEATURES["parent_requests"].unit == "count"
    assert BLOCK_FEATURES["parent_requests"].low == 1.0
    assert {"parent_age <= age", "accesses <= parent_requests"} <= set(BLOCK_FEATURES.relations)
    # the parent's features change when a sibling's request passes the parent, the frontier only when the
    # block itself is used: so a key reading only the frontier keeps the cheap static heap
    assert {"parent_age", "parent_requests"} <= TIME_VARYING and "frontier" not in TIME_VARYING
    assert BLOCK_FEATURES["turns"].unit == "count" and BLOCK_FEATURES["turns"].integer
    assert (BLOCK_FEATURES["turns"].low, BLOCK_FEATURES["turn_gap"].low) == (1.0, 0.0)
    assert BLOCK_FEATURES["turn_gap"].unit == "s"
    # both are set when the block is used and stay until it is used again: no rescoring while it sits
    assert not {"turns", "turn_gap"} & TIME_VARYING
    for name in ("ewma_hit_age", "ewma_evict_age"):  # listeners on the population: they move as requests do
        assert (BLOCK_FEATURES[name].unit, BLOCK_FEATURES[name].low) == ("s", 0.0) and name in TIME_VARYING


# Hits and evictions of every baseline on the shipped head at 2,000 blocks, as measured before the reuse
# features were added (the README's first table: block_hit_rate = hits / 67,694 accesses).
_SHIPPED_COUNTS = {
    "fifo": (3239, 62455),
    "gdsf": (4558, 61136),
    "lfu": (3862, 61832),
    "lru": (3241, 62453),
    "slru": (3862, 61832),
    "s3fifo": (4868, 58545),
    "sieve": (4258, 61128),
    "belady": (15740, 49954),
}


@pytest.fixture(scope="module")
def shipped_counts() -> dict[str, tuple[int, int]]:
    target = KVTarget()
    [*_, full] = target.instances(str(shipped_workload_path()), {"capacity": SHIPPED_CAPACITY})
    programs = {name: check(source, target.signatures) for name, source in target.baselines().items()}
    metrics = {name: target.evaluate(program, full, program.defaults()) for name, program in programs.items()}
    metrics |= {name: target.evaluate_builtin(name, full) for name in target.builtin_baselines()}
    return {name: (int(m["hits"]), int(m["evictions"])) for name, m in metrics.items()}


def test_every_baseline_keeps_its_hits_and_evictions_on_the_shipped_head(
    shipped_counts: dict[str, tuple[int, int]],
) -> None:
    # perfect_lfu came after: the baselines measured before keep their counts
    assert {name: shipped_counts[name] for name in _SHIPPED_COUNTS} == _SHIPPED_COUNTS


_TARGET = KVTarget()
_PROPERTIES = {p.name: p for p in _TARGET.properties()}

# A key over the reuse features, the property it is checked on, and the verdict the declared domain gives.
_VERDICTS = [
    ("b.hits / b.parent_requests", "no-division-by-zero", "proved"),  # at least the block's own request
    ("b.hits / b.parent_age", "no-division-by-zero", "counterexample"),  # 0 for a first block
    ("log(b.frontier)", "no-log-of-non-positive", "counterexample"),  # 0 off the frontier
    ("log1p(b.frontier) + b.frontier", "no-log-of-non-positive", "proved"),
    ("sqrt(b.age - b.parent_age)", "no-sqrt-of-negative", "proved"),  # only through parent_age <= age
    ("sqrt(b.parent_requests - b.accesses)", "no-sqrt-of-negative", "proved"),  # accesses <= parent_requests
    ("sqrt(b.parent_age - b.age)", "no-sqrt-of-negative", "counterexample"),
    ("b.age / b.turns", "no-division-by-zero", "proved"),  # a first turn counts 1
    ("b.age / b.turn_gap", "no-division-by-zero", "counterexample"),  # 0 for a first turn
    ("log(b.turns) + sqrt(b.turn_gap)", "no-log-of-non-positive", "proved"),
    ("b.age / (1 + b.ewma_hit_age)", "no-division-by-zero", "proved"),
    ("b.age / b.ewma_evict_age", "no-division-by-zero", "counterexample"),  # 0 before the first eviction
]


@pytest.mark.parametrize(("body", "prop", "verdict"), _VERDICTS)
def test_a_key_over_the_reuse_features_is_verified_on_their_declared_domain(
    body: str, prop: str, verdict: str
) -> None:
    program = check(f"def priority(b, p):\n    return {body}\n", _TARGET.signatures)
    [result] = prove(program, {"priority": BLOCK_FEATURES.domain()}, [_PROPERTIES[prop]])
    assert result.verdict == verdict, result.message
    if verdict == "counterexample":  # a block state the mechanism can produce, on which the key faults
        assert result.counterexample is not None
        inputs = result.counterexample["inputs"]
        assert inputs["frontier"] in (0.0, 1.0) and inputs["parent_age"] <= inputs["age"]
        with pytest.raises((ZeroDivisionError, ValueError)):
            to_python(program, "priority")(inputs, result.counterexample["params"])


_REUSE = ("frontier", "parent_age", "parent_requests", "turns", "turn_gap", "ewma_hit_age", "ewma_evict_age")


def test_the_llm_prompt_shows_each_reuse_feature_with_unit_domain_and_doc() -> None:
    lru = Entry(1, _TARGET.baselines()["lru"], 0.05, {"block_hit_rate": 0.05})
    request = ProposalRequest(brief(_TARGET), lru, (), (), seed=0)
    text = "\n".join(m["content"] for m in Templates.load().messages(request))
    for name in _REUSE:
        f = BLOCK_FEATURES[name]
        assert f"b.{name} ({f.unit}, in [{f.low:g}, {f.high:g}]): {f.doc}" in text


def test_the_offline_proposer_mutates_lru_into_keys_reading_each_reuse_feature() -> None:
    lru = Entry(1, _TARGET.baselines()["lru"], 0.05)
    read: set[str] = set()
    for seed in range(150):  # parent_age first at seed 133
        child = EvolveProposer().propose(ProposalRequest(brief(_TARGET), lru, (), (), seed=seed))
        check(child.source, _TARGET.signatures)  # each child is a valid candidate
        read |= {n.attr for n in ast.walk(ast.parse(child.source)) if isinstance(n, ast.Attribute)}
    assert set(_REUSE) <= read
