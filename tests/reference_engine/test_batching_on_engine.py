"""Continuous batching in the engine is correct, not just fast: a request generates the same tokens and logits
however it is batched, chunked and preempted."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from targets.batching.reference import EngineExecutor, prompt_tokens  # noqa: E402
from targets.batching.scheduler import Batch, Limits, serve  # noqa: E402
from targets.batching.target import BatchingTarget, _compiled  # noqa: E402
from targets.batching.trace import Requests  # noqa: E402
from targets.costmodel.shapes import ModelShape  # noqa: E402
from targets.reference_engine.model import Transformer  # noqa: E402

pytestmark = pytest.mark.torch

SMALL = ModelShape("test", layers=2, hidden=64, heads=2, head_dim=32, ffn=96, vocab=101)
REQUESTS = Requests(
    arrival_s=np.array([0.0, 0.0, 0.001, 0.002, 0.002]),
    prompt_tokens=np.array([13, 7, 22, 5, 17]),
    output_tokens=np.array([6, 9, 4, 7, 5]),
)
FCFS = _compiled(BatchingTarget().baselines()["fcfs"])


def _serve(requests: Requests, limits: Limits, first: int = 0) -> tuple[EngineExecutor, list[Batch]]:
    """Serve with the engine; request i's prompt is that of request first + i of REQUESTS."""
    executor = EngineExecutor(Transformer(SMALL, seed=5), requests, limits, seed=2)
    executor.sequences = {
        i: prompt_tokens(first + i, int(n), SMALL.vocab, 2) for i, n in enumerate(requests.prompt_tokens)
    }
    batches: list[Batch] = []
    serve(
        requests, limits, FCFS, np.zeros(0), executor, (1.0, 1.0), observe=lambda b, s, f: batches.append(b)
    )
    return executor, batches


def test_a_request_generates_the_same_under_chunking_and_preemption_as_alone() -> None:
    tight = Limits(kv_blocks=9, block_tokens=4, token_budget=8, max_seqs=4)
    batched, batches = _serve(REQUESTS, tight)
    assert any(b.preempted.size for b in batches), "the pool is small enough to preempt"
    assert any(((b.starts > 0) & (b.tokens > 1)).any() for b in batches), "prompts are prefilled in chunks"
    assert any(b.prefill.any() and (~b.prefill).any() for b in batches), "chunks and decodes share iterations"
    for r in range(REQUESTS.n):
        alone = REQUESTS.slice(r, r + 1)
        single, _ = _serve(alone, Limits(kv_blocks=64, block_tokens=4, token_budget=256), first=r)
        got, want = batched.logits[r], single.logits[0]
        assert len(got) == len(want) == REQUESTS.output_tokens[r]
        assert batched.sequences[r] == single.sequences[0]
        assert max(float((a - b).abs().max()) for a, b in zip(got, want, strict=True)) < 1e-4


def test_the_engine_never_holds_more_blocks_than_the_budget() -> None:
    tight = Limits(kv_blocks=9, block_tokens=4, token_budget=8, max_seqs=4)
    executor, _ = _serve(REQUESTS, tight)
    assert sorted(executor.free) == list(range(9)), "every block comes back when every request is done"
