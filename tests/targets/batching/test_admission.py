"""admit_whole_prompt: a waiting request is admitted only if its whole prompt's blocks are free (vLLM V1's
default), not only its first chunk's; tests/engines checks it step by step against vLLM's Scheduler."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from targets.batching.scheduler import Batch, Limits, serve
from targets.batching.target import BatchingTarget, _compiled, instance_limits
from targets.batching.trace import Requests

LIMITS = Limits(kv_blocks=20, block_tokens=16, token_budget=64, max_seqs=8)
REQUESTS = Requests(np.zeros(2), np.array([200, 100]), np.array([2, 2]))
"""The first prompt holds 13 blocks once computed, the second needs 7 for its whole prompt."""


def first_admissions(limits: Limits) -> list[tuple[int, ...]]:
    steps: list[tuple[int, ...]] = []

    def observe(batch: Batch, state: np.ndarray, free: int) -> None:
        steps.append(tuple(int(i) for i in batch.ids))

    key = _compiled(BatchingTarget().baselines()["fcfs"])
    served = serve(REQUESTS, limits, key, np.zeros(0), lambda b: 10.0, (5.0, 0.1), observe=observe)
    assert served.unfinished == 0
    return steps


def admitted_at(limits: Limits) -> int:
    """The iteration that first serves the second request."""
    return next(k for k, ids in enumerate(first_admissions(limits)) if 1 in ids)


def test_a_first_chunk_that_fits_admits_unless_the_whole_prompt_must() -> None:
    # Three iterations of 64 tokens of the first prompt, then its last 8 leave 56 of the budget for the
    # second's first chunk (4 blocks) while the first holds 13: 7 free of 20, 5 of 18.
    assert admitted_at(LIMITS) == admitted_at(replace(LIMITS, admit_whole_prompt=True)) == 3
    tight = replace(LIMITS, kv_blocks=18)  # the chunk's 4 blocks fit the 5 free, the prompt's 7 do not
    assert admitted_at(tight) == 3
    assert admitted_at(replace(tight, admit_whole_prompt=True)) > 3


def test_the_option_reaches_the_limits() -> None:
    target = BatchingTarget()
    workload = target.default_config()["workload"]
    instance = target.instances(workload, {"admit_whole_prompt": True})[1]
    assert instance_limits(instance).admit_whole_prompt
    assert not instance_limits(target.instances(workload, {})[1]).admit_whole_prompt
