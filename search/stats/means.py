"""Averages of metrics over instances: what a score over several instances is."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def mean_metrics(metrics: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each metric present in every mapping, averaged (an exact float sum, so the order never matters)."""
    if not metrics:
        return {}
    keys = set.intersection(*(set(m) for m in metrics))
    return {k: math.fsum(m[k] for m in metrics) / len(metrics) for k in sorted(keys)}
