"""Serving capacity: the largest load a policy sustains with at least 90 % of its requests meeting both SLOs.

Sarathi-Serve and DistServe report a scheduler by this figure rather than by its SLO attainment at one load.
It is found by a sweep of the load (arrivals as many times as dense as the trace's): from the instance's
own load, double (or halve) until the goal is missed (or met), then bisect the bracket on a log scale until
its ends are within `RESOLUTION` of each other. The answer is the bracket's lower end, a load that was
simulated and met the goal, so a policy's capacity is never an interpolation. The sweep is deterministic
(same instance, same policy, same loads); it assumes attainment falls as load rises, which holds for the
baselines on the shipped trace, and where it does not it still returns a load that met the goal.
"""

from __future__ import annotations

import math
from collections.abc import Callable

GOAL = 0.9
"""The share of requests that must meet both the TTFT and the TPOT SLO."""
RESOLUTION = 0.02
"""The sweep stops when the highest load that met the goal is within 2 % of the lowest that missed it."""
LOWEST = 1 / 1024
"""Below this load factor a policy is said to sustain no load at all (capacity 0)."""
HIGHEST = 1024.0
"""Above this load factor the sweep stops looking (capacity HIGHEST)."""


def capacity(
    attainment: Callable[[float], float],
    start: float,
    goal: float = GOAL,
    resolution: float = RESOLUTION,
    lowest: float = LOWEST,
    highest: float = HIGHEST,
) -> float:
    """The largest load, to `resolution`, at which `attainment(load)` is at least `goal`; 0.0 if none down
    to `lowest`, `highest` if even that load meets it."""
    load = min(max(start, lowest), highest)
    if attainment(load) >= goal:
        met, missed = load, math.inf
        while missed == math.inf and met < highest:
            trial = min(met * 2, highest)
            met, missed = (trial, missed) if attainment(trial) >= goal else (met, trial)
        if missed == math.inf:
            return highest
    else:
        met, missed = 0.0, load
        while met == 0.0 and missed > lowest:
            trial = max(missed / 2, lowest)
            met, missed = (trial, missed) if attainment(trial) >= goal else (met, trial)
        if met == 0.0:
            return 0.0
    while missed / met > 1 + resolution:
        trial = math.sqrt(met * missed)
        met, missed = (trial, missed) if attainment(trial) >= goal else (met, trial)
    return met
