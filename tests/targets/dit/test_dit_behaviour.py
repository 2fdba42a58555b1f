"""The dit target's behaviour: how a score orders the options of the sample's scheduling points, and which
it puts below zero (where the mechanism waits). Scores that serve every stream alike share one signature;
others do not."""

from __future__ import annotations

import pytest

from sandbox.job import Job, Tuning
from sandbox.worker import behaviour_signature, run
from targets.dit.target import SHIPPED_WORKLOAD, DiTTarget
from verifiers.static import check

TARGET = DiTTarget()


def source(score: str) -> str:
    return f'"""A score."""\n\n\ndef score(o, p):\n    return {score}\n'


def signature(score: str) -> str:
    return behaviour_signature(TARGET, check(source(score), TARGET.signatures))


def test_scores_that_order_every_point_alike_and_wait_alike_share_one_signature() -> None:
    assert signature("o.efficiency") == signature("2 * o.efficiency") == signature("o.efficiency + o.queued")
    assert signature("1.0e9 - o.deadline") == signature("1.0e9 - o.slack"), "now is one value at a point"
    assert signature("-o.predicted_s") == signature("-o.predicted_s - o.free_gpus")


def test_scores_that_order_differently_get_different_signatures() -> None:
    scores = ["o.efficiency", "-o.predicted_s", "1.0e9 - o.deadline", "o.gpus", "-o.gpus", "o.waiting"]
    assert len({signature(s) for s in scores}) == len(scores)
    baselines = {name: behaviour_signature(TARGET, check(src, TARGET.signatures))
                 for name, src in TARGET.baselines().items()}  # fmt: skip
    assert len(set(baselines.values())) == len(baselines), baselines


def test_which_options_fall_below_zero_is_part_of_the_behaviour() -> None:
    """The same order, but one score waits where the other starts work: two programs, not one."""
    assert signature("o.efficiency - 0.5") != signature("o.efficiency")
    assert signature("o.slack_after") != signature("o.slack_after + 1.0e9")
    assert signature("o.efficiency - 2.0") == signature("o.efficiency - 3.0"), "below zero everywhere alike"


def test_the_sample_is_the_mechanisms_own_options_each_point_at_one_moment() -> None:
    # tests/targets/test_contract.py holds every row to the features' domains and relations.
    points = TARGET.behaviour_sample("score")
    assert len(points) > 1 and all(len(p) > 1 for p in points)
    for point in points:
        moment = {(r["now"], r["free_gpus"], r["cluster_gpus"], r["queued"]) for r in point}
        assert len(moment) == 1, "one scheduling point each"
    rows = [r for p in points for r in p]
    assert {r["slow_link"] for r in rows} == {0.0, 1.0}, "groups on one link and across sockets or nodes"
    assert {r["video"] for r in rows} == {0.0, 1.0}, "image and video requests"
    assert min(r["slack_after"] for r in rows) < 0 < max(r["slack_after"] for r in rows), "late and in time"
    assert TARGET.behaviour_cuts("score") == (0.0,)
    with pytest.raises(KeyError):
        TARGET.behaviour_sample("priority")


def test_a_dit_job_whose_behaviour_was_seen_stops_before_tuning() -> None:
    instances = tuple(TARGET.instances(SHIPPED_WORKLOAD, {"requests": 20}))
    seen = (signature("o.efficiency"),)
    again = run(Job("dit", source("3 * o.efficiency"), instances, tuning=Tuning(trials=2, seen=seen)))
    assert (again.status, again.repeated, again.behaviour, again.instances) == ("ok", True, seen[0], ())
    fresh = run(Job("dit", source("-o.predicted_s"), instances, tuning=Tuning(trials=2, seen=seen)))
    assert (fresh.status, fresh.repeated) == ("ok", False) and fresh.instances
