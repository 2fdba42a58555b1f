"""Which tuned constants mattered: PED-ANOVA over a candidate's stored Optuna study, rebuilt in memory.

Nothing re-runs: the stored trials and the PARAMS ranges its source declares are the whole study. PED-ANOVA
needs nothing beyond Optuna (fANOVA and mean decrease in impurity need scikit-learn, not a dependency).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from optuna.distributions import FloatDistribution

import targets
from verifiers.program import ParamRange
from verifiers.static import StaticError, check

MIN_TRIALS = 2
"""Complete trials below which importance says nothing."""


class NoImportance(ValueError):
    """Why a candidate's parameter importance cannot be computed, in one line."""


def param_importances(
    target: str,
    source: str,
    trials: Sequence[Mapping[str, Any]],
    direction: str,
) -> dict[str, float]:
    """Each PARAM's share of the importance (they sum to 1), most important first; `direction` is the
    objective's (maximize or minimize). Raises NoImportance."""
    try:
        ranges = check(source, targets.load(target).signatures).params
    except StaticError as exc:
        raise NoImportance(f"its source does not pass the static check: {exc}") from None
    if not ranges:
        raise NoImportance("it declares no PARAMS, so nothing was tuned")
    complete = [t for t in trials if t["state"] == "COMPLETE" and _within(t["params"], ranges)]
    if len(complete) < MIN_TRIALS:
        raise NoImportance(
            f"{len(complete)} complete trial(s) in its study; parameter importance needs {MIN_TRIALS}"
        )
    distributions = {p.name: FloatDistribution(p.low, p.high, log=p.log) for p in ranges}
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # not a line per page view about a new study
    try:
        study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), direction=direction)
        study.add_trials(
            optuna.trial.create_trial(params=dict(t["params"]), distributions=distributions, value=t["value"])
            for t in complete
        )
        with warnings.catch_warnings():  # a tie is answered below, in the page's words
            warnings.simplefilter("ignore")
            raw = optuna.importance.PedAnovaImportanceEvaluator().evaluate(study)
    finally:
        optuna.logging.set_verbosity(verbosity)
    total = sum(raw.values())
    if total <= 0.0:
        raise NoImportance("its best trials do not differ from the rest, so no constant stands out")
    return {name: value / total for name, value in sorted(raw.items(), key=lambda kv: -kv[1])}


def _within(params: Mapping[str, float], ranges: Sequence[ParamRange]) -> bool:
    """The trial set every declared PARAM inside its range (a default outside one cannot be replayed)."""
    return all(p.name in params and p.low <= params[p.name] <= p.high for p in ranges)
