"""The kv properties: each one refutes a candidate that breaks it (and the candidate really breaks it when
run) and proves one that keeps it; every baseline of every target is proved on its hard properties; and
the relations the kv registry declares hold on every block the simulator scores."""

from __future__ import annotations

import math

import numpy as np
import pytest
from prefix_traces import recording_lru

import targets
from targets.base import Feature, FeatureRegistry
from targets.kv.block_tree import POLICY_KEY
from targets.kv.features import BLOCK_FEATURES
from targets.kv.target import KVTarget, load_workload, replay_trace
from verifiers.compiler import param_vector, to_numba, to_python
from verifiers.program import Program
from verifiers.properties import Domain, Outcome
from verifiers.smt import prove
from verifiers.static import check

TARGET = KVTarget()
DOMAINS = {"priority": BLOCK_FEATURES.domain()}
PROPERTIES = {p.name: p for p in TARGET.properties()}


def candidate(body: str, params: str = "") -> Program:
    return check(f"{params}\ndef priority(b, p):\n    return {body}\n", TARGET.signatures)


TUNED = check(
    'PARAMS = {"w": (0.0, 8.0), "tau": (1.0, 3600.0, "log")}\n'
    "def priority(b, p):\n    return p.w * log1p(b.hits) - b.age / p.tau\n",
    TARGET.signatures,
)


def outcome(prog: Program, name: str) -> Outcome:
    [result] = prove(prog, DOMAINS, [PROPERTIES[name]])
    return result


def test_the_kv_properties_read_as_one_line_each_and_only_the_hits_one_is_soft() -> None:
    assert set(PROPERTIES) == {
        "no-division-by-zero",
        "no-log-of-non-positive",
        "no-sqrt-of-negative",
        "no-overflow",
        "finite-bounded",
        "more-hits-never-lower",
    }
    assert all(p.statement and "\n" not in p.statement for p in PROPERTIES.values())
    assert [p.name for p in PROPERTIES.values() if p.severity == "soft"] == ["more-hits-never-lower"]


@pytest.mark.parametrize("name", targets.names())
def test_every_baseline_of_every_target_is_proved_on_its_hard_properties(name: str) -> None:
    target = targets.load(name)
    domains = {s.name: target.registry(s.name).domain() for s in target.signatures}
    hard = [p for p in target.properties() if p.severity == "hard"]
    for baseline, source in target.baselines().items():
        outcomes = prove(check(source, target.signatures), domains, hard)
        assert {o.property: o.verdict for o in outcomes} == {p.name: "proved" for p in hard}, baseline


BROKEN = {
    "no-division-by-zero": ("b.hits / b.age", ZeroDivisionError),
    "no-log-of-non-positive": ("log(b.hits) + b.age", ValueError),
    "no-sqrt-of-negative": ("sqrt(b.age - b.lifetime)", ValueError),  # age <= lifetime for every block
    "no-overflow": ("exp(b.hits / 100)", OverflowError),
}
KEPT = {
    "no-division-by-zero": "b.hits / (1 + b.age) + b.prefix_tokens / b.depth",
    "no-log-of-non-positive": "log(b.accesses) + log1p(b.hits)",
    "no-sqrt-of-negative": "sqrt(b.lifetime - b.age)",  # provable only through the declared relations
    "no-overflow": "exp(-b.age / 60) + exp(min(b.hits, 50))",
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_faulting_priority_is_refuted_on_a_block_state_where_it_really_faults(name: str) -> None:
    body, raised = BROKEN[name]
    prog = candidate(body)
    result = outcome(prog, name)
    assert result.verdict == "counterexample" and result.rejects, result.message
    cex = result.counterexample
    assert cex is not None
    inputs = cex["inputs"]
    assert inputs["age"] == inputs["now"] - inputs["last_access"]  # a state the mechanism can produce
    with pytest.raises(raised):
        to_python(prog, "priority")(inputs, cex["params"])
    row = np.array([[inputs[f] for f in BLOCK_FEATURES.names]])
    compiled = to_numba(prog, "priority", BLOCK_FEATURES.columns())(row, 0, param_vector(prog, cex["params"]))
    assert not math.isfinite(compiled)


@pytest.mark.parametrize("name", sorted(KEPT))
def test_a_safe_priority_is_proved(name: str) -> None:
    assert outcome(candidate(KEPT[name]), name).verdict == "proved"


def test_a_priority_beyond_the_bound_is_refuted_and_an_ordinary_one_proved() -> None:
    prog = candidate("1 / (b.age + 1e-301)")
    result = outcome(prog, "finite-bounded")
    assert result.verdict == "counterexample"
    assert result.counterexample is not None
    assert to_python(prog, "priority")(result.counterexample["inputs"], {}) > 1e300
    kept = candidate(
        "p.w * log1p(b.hits) - b.age / p.tau", 'PARAMS = {"w": (0.0, 8.0), "tau": (1.0, 3600.0)}'
    )
    assert outcome(kept, "finite-bounded").verdict == "proved"


def test_more_hits_lowering_the_priority_is_reported_with_both_block_states() -> None:
    prog = candidate("b.last_access - p.w * b.hits", 'PARAMS = {"w": (-1.0, 1.0)}')
    result = outcome(prog, "more-hits-never-lower")
    assert result.verdict == "counterexample" and not result.rejects  # soft: reported, not rejected
    cex = result.counterexample
    assert cex is not None
    run = to_python(prog, "priority")
    assert cex["inputs_after"]["hits"] > cex["inputs"]["hits"]
    assert run(cex["inputs_after"], cex["params"]) < run(cex["inputs"], cex["params"])
    kept = candidate(
        "p.w * log1p(b.hits) - b.age / p.tau", 'PARAMS = {"w": (0.0, 8.0), "tau": (1.0, 3600.0)}'
    )
    assert outcome(kept, "more-hits-never-lower").verdict == "proved"


_ROWS = 200_000


@pytest.mark.parametrize("workload", ["gen:chat:1", "gen:agentic:2"])
def test_the_declared_relations_hold_on_every_block_the_simulator_scores(workload: str) -> None:
    width = len(BLOCK_FEATURES) + 1
    store = np.zeros(1 + _ROWS * width)
    replay_trace(load_workload(workload), 150, recording_lru, store, POLICY_KEY)
    n = int(store[0])
    assert n > 1000, "the capacity is small enough that blocks are evicted"
    rows = store[1 : 1 + n * width].reshape(n, width)
    columns = {name: rows[:, i] for name, i in BLOCK_FEATURES.columns().items()}
    for feature in BLOCK_FEATURES.features:
        assert ((columns[feature.name] >= feature.low) & (columns[feature.name] <= feature.high)).all()
    for relation in BLOCK_FEATURES.relations:
        assert eval(relation, {}, columns).all(), relation


def test_a_registry_hands_its_bounds_relations_and_whole_numbers_to_the_verifier() -> None:
    registry = FeatureRegistry(
        (
            Feature("heads", "count", 1.0, 64.0, "attention heads", integer=True),
            Feature("t", "s", 0.0, 9.0, "t"),
        ),
        relations=("heads <= 8 * t",),
    )
    assert registry.domain() == Domain(
        {"heads": (1.0, 64.0), "t": (0.0, 9.0)}, ("heads <= 8 * t",), frozenset({"heads"})
    )
    with pytest.raises(ValueError, match="unknown features: now"):
        FeatureRegistry(registry.features, relations=("t <= now",))
