"""The batching target's ties to real kernels: iterations priced by the cost model, or run in the engine."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from targets.base import WorkloadError
from targets.costmodel.model import DEFAULT_PROFILE, CostModel, ProfileError, pass_speed
from targets.costmodel.shapes import MODELS
from targets.deployments.catalog import CPU, deployment

from .scheduler import Batch, Executor, Limits
from .trace import Requests


@functools.lru_cache(maxsize=4)
def cost_model(profile: str = DEFAULT_PROFILE, on: str = CPU) -> CostModel:
    """The cost model of a GPU deployment `on`, or on the CPU of a profile, checked once per process to
    answer iteration questions."""
    try:
        model = CostModel.load(profile) if on == CPU else deployment(on).cost_model()
        model.iteration_ms([2], [1], [1])
    except ProfileError as exc:
        raise WorkloadError(str(exc)) from None  # it names the profile already
    return model


class PricedExecutor:
    """The simulator's executor: an iteration's time from the cost model, as CostModel.iteration_ms.

    The parts that depend only on a count (projections over the batch's tokens, the head over its
    sequences) are tabulated once, since every iteration reads them; attention is priced per iteration.
    """

    def __init__(self, model: CostModel, max_tokens: int, max_sequences: int) -> None:
        self.model = model
        self.linear = model.linear_ms(np.arange(max_tokens + 1))
        self.head = model.head_ms(np.arange(max_sequences + 1))

    def __call__(self, batch: Batch) -> float:
        chunk = batch.prefill
        decodes = batch.starts[~chunk]
        tokens = int(batch.tokens.sum())
        ms = self.linear[tokens] + self.head[batch.ids.size] + self.model.attn_decode_ms(decodes)
        if chunk.any():
            ms += float(np.sum(self.model.attn_prefill_ms(batch.tokens[chunk], batch.starts[chunk])))
        if self.model.streaming[0] > 0:  # on a GPU: no faster than its weights and keys read from HBM
            ms = max(ms, float(self.model.floor_ms(float(batch.starts.sum() + batch.tokens.sum()))))
        return float(ms)


PASSES_VS_PROFILE = "passes_vs_profile"
"""The metric an engine job reports when it times the passes again (passes_vs_profile's figure)."""


def passes_vs_profile(model: CostModel, limits: Limits) -> float:
    """How much slower this process runs the profile's whole forward passes than the profile prices them,
    over passes no larger than an iteration (a few seconds: timed just before the engine serves)."""
    from targets.reference_engine.profiler import Settings, time_passes

    passes = time_passes(
        model.profile, Settings(warmup=1, repeats=3), limits.block_tokens, limits.token_budget
    )
    return pass_speed(model.profile, passes)


def engine_executor(requests: Requests, limits: Limits, settings: Mapping[str, Any]) -> Executor:
    """The real engine as an executor: a random-weight model of the settings' shape and seed."""
    from targets.reference_engine.model import Transformer

    from .reference import EngineExecutor

    seed = int(settings.get("seed", 0))
    model = Transformer(MODELS[str(settings.get("model", "tiny"))], seed=seed)
    return EngineExecutor(model, requests, limits, seed)
