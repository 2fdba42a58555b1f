"""The kv target's ties to real kernels: prefill time saved, from the cost model or measured in the engine."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from targets.base import WorkloadError
from targets.costmodel.model import DEFAULT_PROFILE, CostModel, ProfileError
from targets.costmodel.shapes import MODELS

from .trace import Trace


@functools.lru_cache(maxsize=4)
def cost_model(profile: str = DEFAULT_PROFILE) -> CostModel:
    """The cost model of a profile, checked once per process to answer prefill questions."""
    try:
        model = CostModel.load(profile)
        model.prefill_saved_ms(2, 1)
    except ProfileError as exc:
        raise WorkloadError(str(exc)) from None  # it names the profile already
    return model


def hit_tokens(trace: Trace, hits: np.ndarray) -> np.ndarray:
    """Tokens of each request's cached prefix that its prefill skips, from the hits the mechanism counted.

    A prompt cached whole still computes its last block for its logits (vLLM's rule, and the engine's).
    """
    tokens = np.concatenate(([0], np.cumsum(trace.block_tokens[trace.blocks])))
    starts = trace.offsets[:-1]
    reused = np.minimum(hits, np.diff(trace.offsets) - 1)
    return (tokens[starts + reused] - tokens[starts]).astype(np.float64)


def prefill_ms_saved(trace: Trace, hits: np.ndarray, profile: str = DEFAULT_PROFILE) -> float:
    """Prefill time the hits save over the whole trace: each request's full prefill less its suffix's."""
    return float(cost_model(profile).prefill_saved_ms(trace.input_tokens, hit_tokens(trace, hits)).sum())


def prefill_ms_total(trace: Trace, profile: str = DEFAULT_PROFILE) -> float:
    """Prefill time of every prompt with no cache: what the saved time is a share of."""
    return float(cost_model(profile).prefill_ms(trace.input_tokens, 0).sum())


def engine_metrics(
    trace: Trace,
    capacity: int,
    hits: np.ndarray,
    evicted: tuple[np.ndarray, np.ndarray],
    settings: Mapping[str, Any],
) -> dict[str, float]:
    """Replay the trace in the real engine under the mechanism's eviction decisions; measured figures."""
    if not np.array_equal(trace.input_tokens, np.diff(trace.offsets) * trace.block_size):
        raise WorkloadError("the engine replays whole blocks: give the instance a block_tokens size")
    from targets.reference_engine.model import Transformer

    from .reference import replay

    model = Transformer(MODELS[str(settings.get("model", "tiny"))], seed=int(settings.get("seed", 0)))
    report = replay(
        model,
        trace,
        capacity,
        hits,
        *evicted,
        repeats=int(settings.get("repeats", 3)),
        decode=bool(settings.get("decode", True)),
    )
    return {f"engine_{name}": value for name, value in report.metrics().items()}
