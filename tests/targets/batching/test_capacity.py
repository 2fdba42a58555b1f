"""Serving capacity: the sweep finds the largest load at which 90 % of requests meet both SLOs, to 2 %;
every batching evaluation reports it, and the batching-capacity target tunes and selects on it."""

from __future__ import annotations

from dataclasses import replace

import pytest

import targets
from sandbox.job import Job, Tuning
from sandbox.worker import run
from targets.base import Instance
from targets.batching import target as batching_target
from targets.batching.capacity import GOAL, HIGHEST, RESOLUTION, capacity
from targets.batching.target import BatchingTarget, late_limit
from verifiers.static import check

TARGET = BatchingTarget()
WINDOW = {"requests": "0:120"}
"""120 requests of the shipped trace: a sweep over them takes a fraction of a second."""


def step(edge: float, calls: list[float]) -> object:
    """Attainment that meets the goal up to `edge` and misses it beyond, noting every load tried."""

    def attainment(load: float) -> float:
        calls.append(load)
        return 0.95 if load <= edge else 0.5

    return attainment


@pytest.mark.parametrize("start", [0.01, 0.4, 1.0, 50.0])
def test_the_sweep_finds_the_edge_to_its_resolution_from_any_start(start: float) -> None:
    calls: list[float] = []
    found = capacity(step(0.37, calls), start)  # type: ignore[arg-type]
    assert 0.37 / (1 + RESOLUTION) <= found <= 0.37
    assert found in calls  # a load that was simulated, never an interpolation
    assert len(calls) <= 20
    again: list[float] = []
    assert capacity(step(0.37, again), start) == found and again == calls  # type: ignore[arg-type]


def test_a_policy_that_never_meets_the_goal_has_no_capacity_and_one_that_always_does_the_ceiling() -> None:
    assert capacity(lambda load: 0.0, 0.4) == 0.0
    assert capacity(lambda load: 1.0, 0.4) == HIGHEST


def eval_instance(**config: object) -> Instance:
    [instance] = [
        i
        for i in TARGET.instances(TARGET.default_config()["workload"], {**WINDOW, **config})
        if i.role == "eval"
    ]
    return instance


def attainment_at(program_name: str, instance: Instance, load: float) -> float:
    program = check(TARGET.baselines()[program_name], TARGET.signatures)
    loaded = replace(instance, config={**instance.config, "load": load})
    return TARGET.evaluate(program, loaded, program.defaults())["slo_attainment"]


@pytest.mark.parametrize("name", ["fcfs", "sarathi"])
def test_a_baselines_capacity_meets_the_goal_and_a_step_above_it_does_not(name: str) -> None:
    instance = eval_instance()
    program = check(TARGET.baselines()[name], TARGET.signatures)
    metrics = TARGET.evaluate(program, instance, program.defaults())
    found = metrics["capacity"]
    assert 0 < found < HIGHEST
    assert attainment_at(name, instance, found) >= GOAL
    assert attainment_at(name, instance, found * (1 + RESOLUTION)) < GOAL
    assert metrics["capacity_rps"] > 0


def test_the_sweep_stopping_replays_that_cannot_meet_the_goal_finds_what_whole_replays_find() -> None:
    instance = eval_instance(load=3.0)
    program = check(TARGET.baselines()["spf"], TARGET.signatures)
    swept = TARGET.evaluate(program, instance, {})["capacity"]
    assert swept == capacity(lambda load: attainment_at("spf", instance, load), 3.0)
    assert late_limit(120, GOAL) == 12 and late_limit(10, GOAL) == 1 and late_limit(1, GOAL) == 0


def test_an_evaluation_replays_each_load_once_its_own_load_included(monkeypatch: pytest.MonkeyPatch) -> None:
    instance = eval_instance(load=0.5)
    loads: list[float] = []
    replay = batching_target.simulate

    def noted(loaded: Instance, *args: object, **kwargs: object) -> object:
        loads.append(float(loaded.config["load"]))
        return replay(loaded, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(batching_target, "simulate", noted)
    program = check(TARGET.baselines()["fcfs"], TARGET.signatures)
    found = TARGET.evaluate(program, instance, {})["capacity"]
    assert loads[0] == 0.5 and len(loads) == len(set(loads)) > 2, "the sweep reuses the instance's replay"
    assert found in loads


def test_the_oracle_srpt_sustains_more_load_than_fcfs() -> None:
    instance = eval_instance()
    fcfs = check(TARGET.baselines()["fcfs"], TARGET.signatures)
    assert (
        TARGET.evaluate_builtin("srpt", instance)["capacity"]
        > TARGET.evaluate(fcfs, instance, {})["capacity"]
    )


def test_tuning_trials_on_the_train_share_skip_the_sweep_unless_capacity_is_the_objective() -> None:
    fcfs = TARGET.baselines()["fcfs"]
    workload = TARGET.default_config()["workload"]
    for name, swept in (("batching", {"eval"}), ("batching-capacity", {"train", "eval"})):
        target = targets.load(name)
        job = Job(name, fcfs, tuple(target.instances(workload, WINDOW)), tuning=Tuning(trials=1))
        result = run(job)
        assert result.status == "ok", result.message
        assert {i.role for i in result.instances if "capacity" in i.metrics} == swept


def test_the_capacity_target_declares_capacity_its_objective_and_shows_it_first() -> None:
    target = targets.load("batching-capacity")
    assert (target.objective.metric, target.objective.direction) == ("capacity", "maximize")
    assert target.report_metrics[0] == "capacity"
    assert "90%" in target.description and "Maximize the serving capacity" in target.description
