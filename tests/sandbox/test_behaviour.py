"""Behavioural novelty, measured in the sandbox job: programs that rank every decision of the target's
behaviour sample alike are one program; the job says so and stops before tuning one already seen."""

from __future__ import annotations

import pytest

from sandbox.base import Sandbox
from sandbox.job import Job, Tuning
from sandbox.worker import behaviour_signature, run
from targets.kv.features import BLOCK_FEATURES
from targets.kv.target import KVTarget
from verifiers.static import check

TARGET = KVTarget()


def source(key: str, params: str = "") -> str:
    return f'"""A key."""\n{params}\n\ndef priority(b, p):\n    return {key}\n'


def signature(key: str, params: str = "") -> str:
    return behaviour_signature(TARGET, check(source(key, params), TARGET.signatures))


def test_programs_that_rank_alike_share_one_signature() -> None:
    assert signature("-b.age") == signature("-2 * b.age") == signature("b.last_access")
    assert signature("b.hits + 1") == signature("b.hits")
    assert signature("-b.age * p.w", 'PARAMS = {"w": (0.1, 10.0, "log")}') == signature("-b.age")
    assert signature("b.hits + b.pop_age_p90") == signature("b.hits"), "the same in every eviction"


def test_programs_that_rank_differently_get_different_signatures() -> None:
    keys = ["-b.age", "b.hits", "b.hits + 0.001 * b.age", "b.accesses", "-b.lifetime", "b.depth"]
    assert len({signature(k) for k in keys}) == len(keys)
    assert signature("-b.age") != signature("b.age")


def test_ties_are_kept_and_tunable_constants_are_measured_beyond_their_defaults() -> None:
    assert signature("b.hits") != signature("b.hits - 0.000001 * b.depth"), "ties broken otherwise"
    tunable = signature("b.hits + p.w * b.age", 'PARAMS = {"w": (-1.0, 1.0)}')  # 0 by default
    assert tunable != signature("b.hits")


def test_the_sample_keeps_every_feature_in_its_domain_and_relations() -> None:
    decisions = TARGET.behaviour_sample("priority")
    assert len(decisions) > 1 and all(len(d) > 1 for d in decisions)
    for decision in decisions:
        for row in decision:
            for f in BLOCK_FEATURES.features:
                assert f.low <= row[f.name] <= f.high, f.name
            assert row["age"] == row["now"] - row["last_access"]
            assert row["inserted_at"] <= row["last_access"] <= row["now"]
            assert row["hits"] <= row["accesses"] - 1 and row["parent_age"] <= row["age"]
            assert row["depth"] <= row["prefix_tokens"] <= 512 * row["depth"]
        assert len({(r["now"], r["pop_age_p90"]) for r in decision}) == 1, "one moment per decision"
    assert TARGET.behaviour_sample("priority") == decisions, "the same sample every time"


def test_a_job_whose_behaviour_was_seen_stops_before_tuning() -> None:
    instances = tuple(TARGET.instances("gen:chat:1", {"capacity": 300}))
    fresh = run(Job("kv", source("b.hits"), instances, tuning=Tuning(trials=2)))
    assert fresh.status == "ok" and fresh.behaviour == signature("b.hits") and fresh.instances
    again = run(Job("kv", source("b.hits + 1"), instances, tuning=Tuning(trials=2, seen=(fresh.behaviour,))))
    assert again.status == "ok" and again.repeated and again.behaviour == fresh.behaviour
    assert not again.instances and again.trials == 0
    assert Job.from_json(Job("kv", "", instances, tuning=Tuning(seen=("ab",))).to_json()).tuning == Tuning(
        seen=("ab",)
    )


@pytest.mark.parametrize("backend", ["process_box", pytest.param("docker_box", marks=pytest.mark.docker)])
def test_the_behaviour_phase_crosses_each_backend(backend: str, request: pytest.FixtureRequest) -> None:
    box: Sandbox = request.getfixturevalue(backend)
    instances = tuple(TARGET.instances("gen:chat:1", {"capacity": 300}))
    seen = (signature("-b.age"),)
    result = box.run(Job("kv", source("-3 * b.age"), instances, tuning=Tuning(trials=2, seen=seen)))
    assert (result.status, result.repeated, result.behaviour, result.instances) == ("ok", True, seen[0], ())
