"""The batching target's behaviour: how a key orders the sample's iterations, and the token budget the
scheduler reads from PARAMS. Keys that serve every trace alike share one signature; others do not."""

from __future__ import annotations

import pytest

from sandbox.job import Job, Tuning
from sandbox.worker import behaviour_signature, run
from targets.batching.target import BatchingTarget, shipped_workload_path
from verifiers.static import check

TARGET = BatchingTarget()
BUDGET = 'PARAMS = {"token_budget": (64.0, 4096.0, "log", 512.0)}'


def source(key: str, params: str = "") -> str:
    return f'"""A key."""\n{params}\n\ndef priority(r, p):\n    return {key}\n'


def signature(key: str, params: str = "") -> str:
    return behaviour_signature(TARGET, check(source(key, params), TARGET.signatures))


def test_keys_that_order_every_iteration_alike_share_one_signature() -> None:
    assert signature("r.waiting") == signature("-r.arrival") == signature("2 * r.waiting + r.now")
    assert signature("-r.deadline") == signature("-r.slack"), "now is one value within an iteration"
    assert signature("-r.prompt") == signature("-r.prompt + r.queued")


def test_keys_that_order_differently_get_different_signatures() -> None:
    keys = ["r.waiting", "-r.deadline", "-r.prompt", "-r.pending", "r.decoding", "r.since_run", "-r.blocks"]
    assert len({signature(k) for k in keys}) == len(keys)
    assert signature("1.0e6 * r.decoding + r.waiting") != signature("r.waiting")


def test_the_token_budget_the_scheduler_reads_is_part_of_the_behaviour() -> None:
    sarathi = "1.0e6 * r.decoding + r.waiting"
    assert signature(sarathi, BUDGET) != signature(sarathi), "a declared budget is tuned, the instance's not"
    other = 'PARAMS = {"token_budget": (64.0, 4096.0, "log", 1024.0)}'
    assert signature(sarathi, BUDGET) != signature(sarathi, other)
    assert signature(sarathi, BUDGET) == signature(f"2 * ({sarathi})", BUDGET)


def test_the_sample_holds_every_kind_of_request_each_decision_at_one_moment() -> None:
    # tests/targets/test_contract.py holds every row to the features' domains and relations.
    decisions = TARGET.behaviour_sample("priority")
    assert len(decisions) > 1 and all(len(d) > 1 for d in decisions)
    states = set()
    for decision in decisions:
        states |= {(row["running"], row["decoding"], row["generated"] > 0) for row in decision}
        assert len({(r["now"], r["free_blocks"], r["batch"]) for r in decision}) == 1, "one moment each"
    assert len(states) == 4, "waiting, preempted, prefilling and decoding requests"
    with pytest.raises(KeyError):
        TARGET.behaviour_sample("evict")


def test_a_batching_job_whose_behaviour_was_seen_stops_before_tuning() -> None:
    instances = tuple(TARGET.instances(str(shipped_workload_path()), {"requests": "0:60"}))
    seen = (signature("r.waiting"),)
    again = run(Job("batching", source("-r.arrival"), instances, tuning=Tuning(trials=2, seen=seen)))
    assert (again.status, again.repeated, again.behaviour, again.instances) == ("ok", True, seen[0], ())
