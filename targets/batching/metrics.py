"""Serving metrics of a replay: TTFT and TPOT percentiles, throughput, goodput under SLOs, preemptions."""

from __future__ import annotations

import numpy as np

from .scheduler import Served

METRICS = (
    "slo_attainment",
    "goodput_rps",
    "ttft_mean_ms",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_mean_ms",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "throughput_tok_s",
    "preemptions",
    "recomputed_tokens",
    "unfinished",
    "iterations",
    "makespan_s",
)


def latencies(served: Served) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each request's TTFT, the TPOT of those with more than one output token, and which those are; a
    request unfinished at the horizon measured up to it."""
    end = served.end_s
    first = np.where(np.isnan(served.first_token), end, served.first_token)
    finish = np.where(np.isnan(served.finish), end, served.finish)
    steps = served.output - 1
    multi = steps > 0
    return first - served.arrival, (finish[multi] - first[multi]) / steps[multi], multi


def serving_metrics(served: Served, slo_s: tuple[float, float]) -> dict[str, float]:
    """Per-request latencies summarised; a request unfinished at the horizon counts as late, its TTFT (and
    TPOT) measured up to the horizon, so a policy cannot gain by never serving someone."""
    end = served.end_s
    ttft, tpot, multi = latencies(served)
    ok = ttft <= slo_s[0]
    ok[multi] &= tpot <= slo_s[1]
    done = ~np.isnan(served.finish)
    ok &= done
    makespan = max(end - float(served.arrival.min()), 1e-9)
    tokens = float(np.sum(served.prompt[done]) + np.sum(served.output[done]))
    ms = 1e3

    def pct(x: np.ndarray, q: float) -> float:
        return float(np.percentile(x, q)) * ms if x.size else 0.0

    return {
        "slo_attainment": float(ok.mean()),
        "goodput_rps": float(ok.sum()) / makespan,
        "ttft_mean_ms": float(ttft.mean()) * ms,
        "ttft_p50_ms": pct(ttft, 50),
        "ttft_p99_ms": pct(ttft, 99),
        "tpot_mean_ms": float(tpot.mean()) * ms if tpot.size else 0.0,
        "tpot_p50_ms": pct(tpot, 50),
        "tpot_p99_ms": pct(tpot, 99),
        "throughput_tok_s": tokens / makespan,
        "preemptions": float(served.preemptions.sum()),
        "recomputed_tokens": float(served.recomputed.sum()),
        "unfinished": float(served.unfinished),
        "iterations": float(served.iterations),
        "makespan_s": makespan,
    }
