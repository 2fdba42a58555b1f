"""The engine's paged cache is correct, not just fast: reused prefixes give the logits of a full prefill."""

from __future__ import annotations

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from targets.costmodel.shapes import ModelShape  # noqa: E402
from targets.kv.block_tree import POLICY_KEY  # noqa: E402
from targets.kv.reference import _timed, replay  # noqa: E402
from targets.kv.target import KVTarget, _compiled, load_workload, replay_trace  # noqa: E402
from targets.kv.trace import whole_blocks  # noqa: E402
from targets.reference_engine.model import KVPool, Transformer  # noqa: E402
from targets.reference_engine.profiler import compute_clock  # noqa: E402
from verifiers.static import check  # noqa: E402

pytestmark = pytest.mark.torch

SMALL = ModelShape("test", layers=2, hidden=64, heads=2, head_dim=32, ffn=96, vocab=101)
BLOCK = 4


def test_prefill_over_a_cached_prefix_equals_prefill_from_scratch() -> None:
    model = Transformer(SMALL, seed=3)
    pool = KVPool.empty(SMALL, blocks=12, block_tokens=BLOCK)
    prompt = torch.randint(SMALL.vocab, (5 * BLOCK,), generator=torch.Generator().manual_seed(1))
    cached = torch.tensor([6, 2, 7])  # any slots, in any order
    first = model.prefill(prompt[: 3 * BLOCK], pool, cached, 0)
    scratch = torch.arange(8, 12)
    assert torch.allclose(first, model.prefill(prompt[: 3 * BLOCK], pool, scratch, 0), atol=1e-5)
    full = model.prefill(prompt, pool, torch.tensor([8, 9, 10, 11, 1]), 0)
    reused = model.prefill(prompt[3 * BLOCK :], pool, torch.cat((cached, torch.tensor([0, 4]))), 3 * BLOCK)
    assert torch.allclose(reused, full, atol=1e-4)
    # A prompt cached whole computes its last block again, into a block of its own.
    last = model.prefill(prompt[-BLOCK:], pool, torch.tensor([6, 2, 7, 0, 5]), 4 * BLOCK)
    assert torch.allclose(last, full, atol=1e-4)


def test_prefill_leaves_the_cached_prefix_untouched() -> None:
    model = Transformer(SMALL, seed=6)
    pool = KVPool.empty(SMALL, blocks=6, block_tokens=BLOCK)
    prompt = torch.randint(SMALL.vocab, (3 * BLOCK,), generator=torch.Generator().manual_seed(3))
    model.prefill(prompt[: 2 * BLOCK], pool, torch.tensor([4, 1]), 0)
    before = pool.data.clone()
    model.prefill(prompt[2 * BLOCK :], pool, torch.tensor([4, 1, 3]), 2 * BLOCK)
    changed = (pool.data != before).transpose(0, 2).flatten(1).any(1)  # per slot
    assert changed.nonzero().flatten().tolist() == [3]


def test_decode_over_the_paged_cache_equals_a_longer_prefill() -> None:
    model = Transformer(SMALL, seed=4)
    pool = KVPool.empty(SMALL, blocks=8, block_tokens=BLOCK)
    prompt = torch.randint(SMALL.vocab, (2 * BLOCK,), generator=torch.Generator().manual_seed(2))
    table = torch.tensor([1, 3, 0])
    logits = model.prefill(prompt, pool, table, 0)
    token = logits.argmax().reshape(1)
    stepped = model.decode(token, pool, [table], [2 * BLOCK])[0]
    longer = model.prefill(torch.cat((prompt, token)), pool, torch.tensor([4, 5, 6]), 0)
    assert torch.allclose(stepped, longer, atol=1e-4)


def test_replaying_a_trace_under_an_eviction_policy_reuses_real_prefixes_exactly() -> None:
    trace = whole_blocks(load_workload("gen:chat:1").slice(0, 40), BLOCK)
    key = _compiled(check(KVTarget().baselines()["lru"], KVTarget().signatures).source)
    _, hits, ev_req, ev_block = replay_trace(trace, 60, key, np.zeros(0), POLICY_KEY, record=True)
    assert ev_req.size > 0, "the capacity is small enough to evict"
    report = replay(Transformer(SMALL, seed=5), trace, 60, hits, ev_req, ev_block, repeats=1)
    assert report.hit_tokens > 0
    assert report.max_logit_diff < 1e-4
    assert report.requests == 40 and report.ttft_ms_mean > 0 and report.tpot_ms_mean > 0


def test_replay_times_computation_not_time_the_os_gives_other_processes() -> None:
    def idle(seconds: float) -> torch.Tensor:  # the thread waits, as it does while another job runs
        time.sleep(seconds)
        return torch.zeros(1)

    def work(n: int) -> torch.Tensor:
        return torch.ones(n, n) @ torch.ones(n, n)

    ((_, idle_ms),) = _timed(idle, ((0.05,),), repeats=3, clock=compute_clock("cpu"))
    ((_, work_ms),) = _timed(work, ((256,),), repeats=3, clock=compute_clock("cpu"))
    assert idle_ms < 5.0 and work_ms > 0.0
