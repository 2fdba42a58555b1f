"""The batching-capacity target: the batching target's mechanism, features and baselines, with the capacity
sweep (targets/batching/capacity.py) on every instance and its result as the objective."""

from __future__ import annotations

from targets.base import Objective, packaged_baselines
from targets.batching.target import BatchingTarget


class BatchingCapacityTarget(BatchingTarget):
    """The batching target with serving capacity as its objective: PARAMS are tuned and candidates selected
    on the largest load they sustain with 90 % of requests within both SLOs (`crucible search --target
    batching-capacity`); everything else is the batching target's."""

    name = "batching-capacity"
    description = BatchingTarget.description.replace(
        "Maximize the share of requests that meet both the time-to-first-token and the time-per-output-token "
        "SLOs.",
        "Maximize the serving capacity: the largest load (arrivals as many times as dense as the trace's) "
        "at which at least 90% of requests meet both the time-to-first-token and the time-per-output-token "
        "SLOs.",
    )
    objective = Objective("capacity", "maximize")
    report_metrics = (
        "capacity",
        "capacity_rps",
        *BatchingTarget.report_metrics[:1],
        *BatchingTarget.report_metrics[2:],
    )
    sweep_roles = ("train", "eval")

    def ranks_unseen(self) -> bool:
        """Yes: capacity on the requests PARAMS were tuned on rewards constants that fit those requests; on
        the rest of the head, a program that carries over to later traffic (docs/targets/batching.md)."""
        return True

    def baselines(self) -> dict[str, str]:
        """The batching target's baselines, shipped in targets/batching/baselines/."""
        return packaged_baselines("targets.batching")
