"""The toy target: which key a small cache evicts, as one `priority(b, p)`; the objective is the hit rate."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from targets.base import (
    FeatureRegistry,
    Instance,
    Objective,
    Option,
    OptionError,
    TargetBase,
    Validation,
    WorkloadError,
    resolve_options,
)
from verifiers.compiler import to_python
from verifiers.program import Program, Signature
from verifiers.properties import Property
from verifiers.static import check

from . import cache, reference
from .features import SLOT_FEATURES
from .properties import PROPERTIES
from .workload import keys

PRIORITY = Signature("priority", SLOT_FEATURES.names, doc="Score a cached key; the lowest is evicted.")
OPTIONS = (Option("capacity", "int", 8, "cache slots", low=1, high=64),)


class ToyCacheTarget(TargetBase):
    """A cache of a few slots over a generated key stream; the optional hooks at TargetBase's defaults but
    its validation."""

    name = "toy"
    description = "Choose which key a cache of a few slots evicts. Maximize the hit rate."
    signatures = (PRIORITY,)
    objective = Objective("hit_rate", "maximize")
    report_metrics = ("hit_rate", "hits")
    integer_metrics = ("hits",)
    options = OPTIONS

    def default_config(self) -> dict[str, Any]:
        return {"workload": "gen:0", "capacity": 8}

    def registry(self, signature: str) -> FeatureRegistry:
        if signature != PRIORITY.name:
            raise KeyError(signature)
        return SLOT_FEATURES

    def instances(self, workload: str, config: Mapping[str, Any]) -> list[Instance]:
        try:
            capacity = resolve_options(OPTIONS, {"capacity": config.get("capacity", 8)})["capacity"]
        except OptionError as exc:
            raise WorkloadError(str(exc)) from None
        cut = len(keys(workload)) * 3 // 10
        return [
            Instance(workload, {"capacity": capacity, "window": [0, cut]}, f"{workload}[:{cut}]", "train"),
            Instance(workload, {"capacity": capacity}, workload, "eval"),
        ]

    def properties(self) -> tuple[Property, ...]:
        return PROPERTIES

    def evaluate(self, program: Program, instance: Instance, params: Mapping[str, float]) -> dict[str, float]:
        stream = keys(instance.workload)
        start, stop = instance.config.get("window", (0, len(stream)))
        stream = stream[start:stop]
        policy = _policy(program.source)

        def priority(state: Mapping[str, float]) -> float:
            return policy(state, params)

        capacity = int(instance.config["capacity"])
        hits = cache.replay(stream, capacity, priority)
        metrics = {"hit_rate": hits / len(stream), "hits": float(hits)}
        if instance.config.get("engine"):
            metrics["engine_hit_rate"] = reference.replay(stream, capacity, priority) / len(stream)
        return metrics

    def evaluate_builtin(self, name: str, instance: Instance) -> dict[str, float]:
        raise KeyError(f"the toy target has no built-in baselines (asked for {name!r})")

    def validation(self) -> Validation:
        from .validation import VALIDATION

        return VALIDATION


@functools.lru_cache(maxsize=16)
def _policy(source: str) -> Any:
    """A candidate as plain Python, made once per process however many trials evaluate it."""
    return to_python(check(source, [PRIORITY]), PRIORITY.name)
