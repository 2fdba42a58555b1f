"""Parameter importance comes from a candidate's stored study alone, and says in one line when it cannot."""

from __future__ import annotations

import random

import pytest

from search.stats.importance import NoImportance, param_importances

SOURCE = '''"""Recency, hits and age."""
PARAMS = {"w_hits": (0.0, 100.0, 1.0), "half_life_s": (1.0, 3600.0, "log")}


def priority(b, p):
    return b.last_access + p.w_hits * log(1 + b.hits) - b.age / p.half_life_s
'''
NO_PARAMS = '"""Recency."""\n\n\ndef priority(b, p):\n    return b.last_access\n'


def _trials(count: int, state: str = "COMPLETE") -> list[dict[str, object]]:
    """A study whose objective follows w_hits alone; half_life_s is noise."""
    rng = random.Random(0)
    trials = []
    for number in range(count):
        params = {"w_hits": rng.uniform(0.0, 100.0), "half_life_s": 10 ** rng.uniform(0.0, 3.5)}
        trials.append({"number": number, "params": params, "value": params["w_hits"] / 100, "state": state})
    return trials


def test_the_parameter_the_objective_follows_is_the_important_one() -> None:
    importances = param_importances("kv", SOURCE, _trials(24), "maximize")
    assert set(importances) == {"w_hits", "half_life_s"}
    assert sum(importances.values()) == pytest.approx(1.0)
    assert importances["w_hits"] > importances["half_life_s"]


def test_a_candidate_without_params_has_no_importance() -> None:
    with pytest.raises(NoImportance, match="declares no PARAMS"):
        param_importances(
            "kv", NO_PARAMS, [{"number": 0, "params": {}, "value": 0.5, "state": "COMPLETE"}], "maximize"
        )


def test_fewer_than_two_complete_trials_say_so() -> None:
    trials = _trials(1) + _trials(3, state="PRUNED")
    with pytest.raises(NoImportance, match="1 complete trial"):
        param_importances("kv", SOURCE, trials, "maximize")


def test_a_study_whose_trials_all_tie_says_no_constant_stands_out() -> None:
    trials = [{**t, "value": 0.25} for t in _trials(6)]
    with pytest.raises(NoImportance, match="no constant stands out"):
        param_importances("kv", SOURCE, trials, "maximize")
