"""How the toy simulator is checked: the same slice replayed by the engine, an independent implementation
of the same cache, must give every policy the same hit rate and so the same ranking."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from targets.base import Check, Compared, Instance, Option, Shown, Validation

from .workload import REQUESTS, keys

OPTIONS = (
    Option("capacity", "int", 4, "cache slots", low=1, high=64),
    Option("requests", "int", 500, "requests of the workload replayed, from the start", low=1, high=REQUESTS),
)


def instance(workload: str, values: Mapping[str, Any]) -> Instance:
    """The slice both replay; the "engine" setting makes the target replay it in the engine too."""
    keys(workload)  # a workload that is not gen:<seed> fails here
    config = {"capacity": values["capacity"], "window": [0, values["requests"]], "engine": True}
    return Instance(workload, config, f"{workload}[:{values['requests']}]@{values['capacity']}")


VALIDATION = Validation(
    options=OPTIONS,
    instance=instance,
    compared=(Compared("hit rate", "hit_rate", "engine_hit_rate", ".4f"),),
    rank_by="hit rate",
    direction="maximize",
    shown=(Shown("hits", "hits", ".0f"),),
    checks=(Check("kendall_tau", at_least=1.0), Check("error_max", at_most=0.0)),
)
