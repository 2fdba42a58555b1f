"""The tuner starts at the defaults, is reproducible per seed, searches log ranges on a log scale, and
models the results (TPE) even within a small budget."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from sandbox.job import Result
from sandbox.tuner import tune
from verifiers.program import ParamRange

PARAMS = (ParamRange("x", 0.0, 1.0, default=0.25), ParamRange("scale", 1e-3, 1e3, log=True))


def _recorder(objective):
    calls: list[dict[str, float]] = []

    def evaluate(params: dict[str, float]) -> float:
        calls.append(dict(params))
        return objective(params)

    return evaluate, calls


def test_first_trial_is_the_defaults() -> None:
    evaluate, calls = _recorder(lambda p: p["x"])
    outcome = tune(evaluate, PARAMS, "maximize", trials=5, seed=0)
    assert calls[0] == {"x": 0.25, "scale": pytest.approx(1.0)}
    assert outcome.trials_run == len(calls) == 5


def test_same_seed_same_trials_other_seed_other_trials() -> None:
    runs = []
    for seed in (3, 3, 4):
        evaluate, calls = _recorder(lambda p: -((p["x"] - 0.7) ** 2) - math.log10(p["scale"]) ** 2)
        outcome = tune(evaluate, PARAMS, "maximize", trials=14, seed=seed)
        runs.append((calls, outcome))
    assert runs[0] == runs[1]
    assert runs[0][0] != runs[2][0]


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_never_worse_than_the_defaults(direction: str) -> None:
    # The objective is best exactly at the defaults, which random sampling essentially never hits again.
    sign = 1.0 if direction == "maximize" else -1.0
    evaluate, _ = _recorder(lambda p: sign * -abs(p["x"] - 0.25))
    outcome = tune(evaluate, PARAMS, direction, trials=8, seed=1)
    assert outcome.best_value == 0.0
    assert outcome.best_params["x"] == 0.25


def test_log_ranges_are_sampled_on_a_log_scale() -> None:
    evaluate, calls = _recorder(lambda p: 0.0)
    tune(evaluate, PARAMS, "maximize", trials=30, seed=0)
    scales = [c["scale"] for c in calls[1:]]
    assert all(1e-3 <= s <= 1e3 for s in scales)
    # Uniform sampling would put one value in a thousand below 1; a log scale puts about half there.
    assert sum(s < 1.0 for s in scales) >= 5


def test_no_params_evaluates_once_at_the_defaults() -> None:
    evaluate, calls = _recorder(lambda p: 0.5)
    outcome = tune(evaluate, (), "maximize", trials=16, seed=0)
    assert calls == [{}]
    assert (outcome.best_params, outcome.best_value, outcome.trials_run) == ({}, 0.5, 1)


def test_non_finite_objectives_never_win() -> None:
    evaluate, calls = _recorder(lambda p: math.inf if p["x"] != 0.25 else 0.1)
    outcome = tune(evaluate, PARAMS, "maximize", trials=6, seed=0)
    assert len(calls) == 6
    assert outcome.best_value == 0.1
    assert outcome.best_params["x"] == 0.25


def test_all_non_finite_gives_nan_and_the_defaults() -> None:
    evaluate, _ = _recorder(lambda p: math.nan)
    outcome = tune(evaluate, PARAMS, "minimize", trials=3, seed=0)
    assert math.isnan(outcome.best_value)
    assert outcome.best_params == {"x": 0.25, "scale": pytest.approx(1.0)}
    assert outcome.trials_run == 3


def test_candidate_errors_propagate() -> None:
    def evaluate(params: dict[str, float]) -> float:
        raise ZeroDivisionError("float division by zero")

    with pytest.raises(ZeroDivisionError):
        tune(evaluate, PARAMS, "maximize", trials=3, seed=0)


def test_tpe_engages_within_a_small_budget() -> None:
    # Optuna's default of 10 random startup trials would make 8 trials a random search: the later trials
    # would land no nearer the best point than the first ones. Here the second half homes in on it.
    def distance(p: dict[str, float]) -> float:
        return abs(p["x"] - 0.9) + abs(math.log10(p["scale"]) - 2) / 6

    early, late = [], []
    for seed in range(10):
        evaluate, calls = _recorder(lambda p: -distance(p))
        tune(evaluate, PARAMS, "maximize", trials=8, seed=seed)
        early += [distance(c) for c in calls[1:4]]
        late += [distance(c) for c in calls[4:]]
    assert statistics.fmean(late) < 0.85 * statistics.fmean(early)


def test_history_records_every_trial_in_order_with_its_state() -> None:
    evaluate, calls = _recorder(lambda p: math.nan if p["x"] > 0.5 else p["x"])
    outcome = tune(evaluate, PARAMS, "maximize", trials=12, seed=0)
    assert [t.number for t in outcome.history] == list(range(12))
    assert [t.params for t in outcome.history] == calls
    for trial in outcome.history:
        finite = trial.params["x"] <= 0.5
        assert (trial.state, trial.value) == (("COMPLETE", trial.params["x"]) if finite else ("PRUNED", None))
    assert any(t.state == "PRUNED" for t in outcome.history)


def test_history_survives_the_json_boundary() -> None:
    evaluate, _ = _recorder(lambda p: p["x"])
    outcome = tune(evaluate, PARAMS, "maximize", trials=4, seed=0)
    result = Result("ok", params=outcome.best_params, trials=4, study=outcome.history)
    assert Result.from_json(json.loads(json.dumps(result.to_json()))) == result
