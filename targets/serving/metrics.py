"""A fleet replay's figures: the batching latencies and SLOs, and what only a fleet has (hits, imbalance)."""

from __future__ import annotations

import numpy as np

from targets.base import timeline_metrics
from targets.batching.metrics import latencies, serving_metrics

from .fleet import Replayed

SHOWN_INSTANCES = 16
"""Instances whose queue and hit rate over time an evaluation keeps (the first ones): what a figure shows."""


def fleet_metrics(replayed: Replayed, slo_s: tuple[float, float], instances: int) -> dict[str, float]:
    """Latency percentiles (a request's time between tokens is its mean over its output), SLO attainment,
    goodput, the fleet's prefix hit rate (prompt tokens found cached when first admitted, over all prompt
    tokens), and load imbalance (the busiest instance's prompt tokens over the mean instance's)."""
    served = replayed.served
    metrics = serving_metrics(served, slo_s)
    ttft, tbt, _ = latencies(served)
    routed = replayed.routed >= 0
    per_instance = np.bincount(replayed.routed[routed], weights=served.prompt[routed], minlength=instances)

    def pct(x: np.ndarray, q: float) -> float:
        return float(np.percentile(x, q)) * 1e3 if x.size else 0.0

    prompt = float(served.prompt.sum())
    return {
        **metrics,
        "ttft_p90_ms": pct(ttft, 90),
        "tbt_p50_ms": pct(tbt, 50),
        "tbt_p90_ms": pct(tbt, 90),
        "tbt_p99_ms": pct(tbt, 99),
        "hit_rate": float(replayed.hit_tokens.sum()) / prompt if prompt else 0.0,
        "imbalance": float(per_instance.max() / per_instance.mean()) if per_instance.sum() else 1.0,
    }


def fleet_timelines(replayed: Replayed) -> dict[str, float]:
    """Each instance's waiting requests and recent hit rate over the replay, as timeline metrics."""
    shown = slice(0, SHOWN_INSTANCES)
    series = {"queued": replayed.queue_series[shown], "hit_rate": replayed.hit_series[shown]}
    return timeline_metrics(series, replayed.sample_s)
