"""Where a run selects: the instances its candidates are scored and ranked on.

A target's own eval instance covers the whole window, the part its train instance tuned the constants on
included, so the ranking rewards a fit to those requests as well as a forecast of later ones. With
`--select unseen` (the default of a run that holds out a tail, and of a target whose `ranks_unseen` says
so) the run ranks on what tuning never saw: in place of each eval instance, the window after the train
share, replayed warm after the requests before it (uncounted) where the target can (kv, as a cache in
service meets them), else from an empty state (batching, as its held-out tail is). A target whose
workloads have no request window cannot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from search.errors import UserError
from search.terms import SELECT_CHOICES, UNSEEN, WHOLE
from targets.base import WARM, WINDOW, Instance, OptionError, Target, WorkloadError, request_window, windowed


def default_select(target: Target, holdout: bool) -> str:
    """A run that holds out a tail ranks on what tuning never saw (train, select and report on three parts,
    as a validation split does), and so does one of a target that asks for it (`ranks_unseen`); any other
    ranks on its whole window, as it reports."""
    return UNSEEN if holdout or target.ranks_unseen() else WHOLE


def run_instances(target: Target, workload: str, options: Mapping[str, Any], select: str) -> list[Instance]:
    """The run's instances: the target's train instances, and its eval instances or, for `unseen`, those of
    the window after the train share (warm where the target can); one UserError where it cannot."""
    if select not in SELECT_CHOICES:
        raise UserError(f"--select must be one of {', '.join(SELECT_CHOICES)}, got {select!r}")
    try:
        found = target.instances(workload, options)
        if select == WHOLE:
            return found
        n = target.requests(workload) if windowed(target) else None
        if n is None:
            raise UserError(f"--select unseen: target {target.name} has no request window to rank on")
        train = [i for i in found if i.role == "train"]
        cuts = {_bounds(i.config.get(WINDOW.name), n)[1] for i in train}
        if len(cuts) != 1:
            raise UserError(f"--select unseen: target {target.name} has no single train window to follow")
        lo, hi = _bounds(options.get(WINDOW.name), n)
        (cut,) = cuts
        if cut >= hi:
            raise UserError(
                f"--select unseen: nothing is left to rank on after the train share of the run's {hi - lo} "
                f"requests (window {lo}:{hi}); give the run more requests, or --select window"
            )
        warm = {WARM.name: True} if WARM in target.options else {}
        after = target.instances(workload, {**options, WINDOW.name: f"{cut}:{hi}", **warm})
        return [*train, *(i for i in after if i.role == "eval")]
    except (WorkloadError, OptionError) as exc:
        raise UserError(str(exc)) from None


def _bounds(window: Any, n: int) -> tuple[int, int]:
    """START, STOP of a window given as START:STOP text or a [START, STOP] pair (the whole trace if None)."""
    if window is None:
        return 0, n
    if isinstance(window, str):
        return request_window(window, n)
    start, stop = window
    return int(start), int(stop)
