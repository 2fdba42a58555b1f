"""The process backend runs real KV jobs (hostile candidates: tests/sandbox/hostile/, on every backend)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

import targets
from sandbox.job import Job, Limits, Result, Tuning
from sandbox.process import ProcessSandbox
from sandbox.zygote import warming
from targets.base import Instance
from verifiers.static import StaticError, check

CANDIDATE = '''"""Recency, with a bonus for blocks that were hit, fading with age."""
PARAMS = {"w_hits": (0.0, 100.0, 1.0), "half_life_s": (1.0, 3600.0, "log")}


def priority(b, p):
    return b.last_access + p.w_hits * log(1 + b.hits) - b.age / p.half_life_s
'''
RANGES = {"w_hits": (0.0, 100.0), "half_life_s": (1.0, 3600.0)}
INSTANCES = (
    Instance("gen:chat:1", {"capacity": 200, "requests": [0, 500]}, "chat[:500]@200", role="train"),
    Instance("gen:chat:1", {"capacity": 200}, "chat@200", role="eval"),
)


@pytest.fixture(scope="module")
def box() -> ProcessSandbox:
    return ProcessSandbox()


def _job(source: str = CANDIDATE, **fields: object) -> Job:
    return replace(Job("kv", source, INSTANCES), **fields)


def _hostile(source: str, **limits: float) -> Job:
    return _job(source, skip_check=True, limits=Limits(**limits))  # type: ignore[arg-type]


def _train_rate(result: Result) -> float:
    (train,) = (i for i in result.instances if i.role == "train")
    return train.metrics["block_hit_rate"]


@pytest.fixture(scope="module")
def tuned(box: ProcessSandbox) -> Result:
    return box.run(_job(tuning=Tuning(trials=8, seed=0)))


def test_kv_job_tunes_on_train_and_scores_every_instance(tuned: Result) -> None:
    assert tuned.status == "ok", tuned.message
    assert (tuned.backend, tuned.trials, tuned.gated) == ("process", 8, False)
    assert tuned.seconds > 0
    assert sorted(i.role for i in tuned.instances) == ["eval", "train"]
    for instance in tuned.instances:
        assert 0.0 <= instance.metrics["block_hit_rate"] <= 1.0
        assert instance.metrics["accesses"] > 0
    assert set(tuned.params) == set(RANGES)
    for name, (low, high) in RANGES.items():
        assert low <= tuned.params[name] <= high


def test_the_study_crosses_the_sandbox_boundary_trial_by_trial(tuned: Result) -> None:
    assert [t.number for t in tuned.study] == list(range(tuned.trials))
    complete = [t for t in tuned.study if t.state == "COMPLETE"]
    assert complete and all(set(t.params) == set(RANGES) for t in complete)
    best = max(complete, key=lambda t: t.value or 0.0)
    assert best.params == pytest.approx(tuned.params)
    assert best.value == pytest.approx(_train_rate(tuned))


def test_tuning_never_loses_to_the_defaults(box: ProcessSandbox, tuned: Result) -> None:
    defaults = box.run(_job())
    assert defaults.status == "ok", defaults.message
    assert defaults.params == {"w_hits": 1.0, "half_life_s": pytest.approx(60.0)}
    assert defaults.trials == 0
    assert defaults.study == ()
    assert _train_rate(tuned) >= _train_rate(defaults)


def test_gate_skips_the_eval_instances_when_train_falls_short(box: ProcessSandbox) -> None:
    gated = box.run(_job(tuning=Tuning(trials=2, gate=1.0)))
    assert gated.status == "ok", gated.message
    assert gated.gated
    assert [i.role for i in gated.instances] == ["train"]
    passed = box.run(_job(tuning=Tuning(trials=2, gate=0.0)))
    assert not passed.gated
    assert sorted(i.role for i in passed.instances) == ["eval", "train"]


def test_candidate_outside_the_subset_is_invalid_with_the_checkers_line(box: ProcessSandbox) -> None:
    source = CANDIDATE.replace("def priority", "import os\n\n\ndef priority")
    with pytest.raises(StaticError) as expected:
        check(source, targets.load("kv").signatures)
    result = box.run(_job(source))
    assert result.status == "invalid"
    assert result.message == str(expected.value)
    assert result.message.startswith("line 5: ")


def test_candidate_gets_a_private_home_removed_after_the_job(box: ProcessSandbox) -> None:
    source = "import os\nraise RuntimeError(f\"home={os.environ['HOME']} cwd={os.getcwd()}\")\n"
    result = box.run(_hostile(source))
    assert result.status == "invalid"
    seen = dict(part.split("=", 1) for part in result.message.split()[1:])
    assert seen["home"] == seen["cwd"] != os.environ.get("HOME")
    assert not Path(seen["home"]).exists()  # the private temp dir is removed after the job


def test_a_zygote_warms_on_every_instance_of_the_job_with_a_packaged_baseline() -> None:
    two = (
        Instance("gen:chat:1", {"capacity": 100, "requests": [0, 100]}),
        Instance("gen:chat:1", {"capacity": 100}),
    )
    warm = warming(Job("kv", "candidate source", two), targets.load("kv"))
    assert warm is not None and warm.instances == two, (
        "a later instance left cold costs every job its first touch"
    )
    assert warm.source in targets.load("kv").baselines().values(), "never candidate code"
