"""Tune a candidate's PARAMS with Optuna's TPE, starting from its defaults so tuning never makes it worse."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import optuna

from verifiers.program import ParamRange

from .job import TrialRecord

MAX_STARTUP_TRIALS = 10
"""Optuna's own default: random trials before TPE models the results; fewer when the budget is small."""


def startup_trials(trials: int) -> int:
    """Half the budget explores at random (the defaults count), at most Optuna's 10: TPE always engages."""
    return min(MAX_STARTUP_TRIALS, max(1, trials // 2))


@dataclass(frozen=True)
class TuneOutcome:
    """The best parameters, their objective (NaN when no trial gave a finite one), and the trials run."""

    best_params: dict[str, float]
    best_value: float
    trials_run: int
    history: tuple[TrialRecord, ...] = ()


def tune(
    evaluate: Callable[[dict[str, float]], float],
    params: tuple[ParamRange, ...],
    direction: Literal["maximize", "minimize"],
    trials: int,
    seed: int,
) -> TuneOutcome:
    """Search `params` for `trials` trials, the first at the defaults; non-finite objectives never win.

    With Optuna's fixed 10 random startup trials a budget of 10 or fewer would be random search only.
    """
    if trials < 1:
        raise ValueError(f"trials must be at least 1, got {trials}")
    defaults = {p.name: p.initial for p in params}
    if not params:
        value = float(evaluate(defaults))
        finite = math.isfinite(value)
        trial = TrialRecord(0, dict(defaults), value if finite else None, "COMPLETE" if finite else "PRUNED")
        return TuneOutcome(defaults, value if finite else math.nan, 1, (trial,))

    def objective(trial: optuna.Trial) -> float:
        values = {p.name: trial.suggest_float(p.name, p.low, p.high, log=p.log) for p in params}
        value = float(evaluate(values))
        if not math.isfinite(value):
            raise optuna.TrialPruned(f"non-finite objective {value}")
        return value

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(
            storage=optuna.storages.InMemoryStorage(),
            sampler=optuna.samplers.TPESampler(n_startup_trials=startup_trials(trials), seed=seed),
            direction=direction,
        )
        study.enqueue_trial(defaults)
        study.optimize(objective, n_trials=trials)
    finally:
        optuna.logging.set_verbosity(verbosity)
    history = tuple(_record(t) for t in study.trials)
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not complete:
        return TuneOutcome(defaults, math.nan, len(study.trials), history)
    best = study.best_trial
    return TuneOutcome(dict(best.params), float(best.value), len(study.trials), history)


def _record(trial: optuna.trial.FrozenTrial) -> TrialRecord:
    value = float(trial.value) if trial.value is not None else None
    return TrialRecord(trial.number, dict(trial.params), value, trial.state.name)
