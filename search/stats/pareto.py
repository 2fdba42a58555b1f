"""The Pareto front of points scored on several objectives: those no other point dominates."""

from __future__ import annotations

from collections.abc import Sequence


def dominates(a: Sequence[float], b: Sequence[float], maximize: Sequence[bool]) -> bool:
    """`a` is at least as good as `b` on every objective and better on one."""
    better = [x > y if up else x < y for x, y, up in zip(a, b, maximize, strict=True)]
    worse = [x < y if up else x > y for x, y, up in zip(a, b, maximize, strict=True)]
    return any(better) and not any(worse)


def front(points: Sequence[Sequence[float]], maximize: Sequence[bool]) -> list[int]:
    """The indices of the points no other point dominates (equal points are all on it, as Optuna's are)."""
    return [i for i, p in enumerate(points) if not any(dominates(q, p, maximize) for q in points)]
