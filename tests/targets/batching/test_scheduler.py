"""The scheduler's rules hold whatever the policy: budgets, progress, recompute, and FCFS order."""

from __future__ import annotations

import numpy as np
import pytest

from targets.batching.kernels import PricedExecutor, cost_model
from targets.batching.scheduler import DONE, Batch, Limits, serve
from targets.batching.target import BatchingTarget, _compiled
from targets.batching.trace import Requests

TARGET = BatchingTarget()


def _requests(n: int, seed: int, gap_s: float = 0.002) -> Requests:
    rng = np.random.default_rng(seed)
    return Requests(
        arrival_s=np.cumsum(rng.exponential(gap_s, n)),
        prompt_tokens=rng.integers(1, 200, n),
        output_tokens=rng.integers(1, 40, n),
    )


def _run(policy: str, requests: Requests, limits: Limits) -> tuple[list[Batch], list[int], np.ndarray]:
    batches, frees = [], []

    def observe(batch: Batch, state: np.ndarray, free: int) -> None:
        batches.append(batch)
        frees.append(free)
        # The blocks the requests hold and the free ones add up to the pool, and each holds enough.
        held, live = state[:, 5], state[:, 10] != DONE
        assert held.sum() + free == limits.kv_blocks
        assert np.all(held[live] * limits.block_tokens >= state[live, 4])

    priced = PricedExecutor(cost_model(), limits.token_budget, limits.max_seqs)
    key = _compiled(TARGET.baselines()[policy])
    served = serve(requests, limits, key, np.zeros(0), priced, (1.0, 0.1), observe=observe)
    assert batches, "every iteration was observed"
    return batches, frees, served.state


@pytest.mark.parametrize("policy", sorted(TARGET.baselines()))
def test_budgets_hold_and_every_request_finishes(policy: str) -> None:
    requests = _requests(150, seed=1)
    limits = Limits(kv_blocks=60, block_tokens=8, token_budget=96, max_seqs=12)
    batches, frees, state = _run(policy, requests, limits)
    assert all(0 <= f <= limits.kv_blocks for f in frees)
    assert all(int(b.tokens.sum()) <= limits.token_budget for b in batches)
    assert all(len(set(b.ids.tolist())) == b.ids.size for b in batches), "a request runs once per iteration"
    assert np.all(state[:, 10] == DONE)
    assert np.array_equal(state[:, 3], requests.output_tokens), "each produced exactly its output"


def test_preempted_requests_recompute_their_prompt_and_output_so_far() -> None:
    n = 30  # arriving together, short prompts admitted at once, then outputs that outgrow the pool
    requests = Requests(np.zeros(n), np.full(n, 30), np.full(n, 100))
    limits = Limits(kv_blocks=40, block_tokens=8, token_budget=128, max_seqs=32)
    batches, _, state = _run("fcfs", requests, limits)
    preempted = {int(r) for b in batches for r in b.preempted}
    assert preempted, "the pool is small enough to preempt"
    for r in preempted:  # after its last preemption the request starts again from position 0
        rows = [(b.starts[b.ids == r][0], i) for i, b in enumerate(batches) if r in b.ids]
        last = max(i for i, b in enumerate(batches) if r in b.preempted)
        restart = next(start for start, i in rows if i > last)
        assert restart == 0
    assert state[:, 11].sum() > 0, "recomputed tokens are counted"


def test_fcfs_admits_in_arrival_order() -> None:
    requests = _requests(100, seed=3, gap_s=0.001)
    limits = Limits(kv_blocks=200, block_tokens=8, token_budget=64, max_seqs=8)
    batches, _, _ = _run("fcfs", requests, limits)
    first_seen: dict[int, int] = {}
    for i, b in enumerate(batches):
        for r in b.ids.tolist():
            first_seen.setdefault(r, i)
    order = sorted(first_seen, key=lambda r: (first_seen[r], r))
    assert order == sorted(order), "no request is admitted before an earlier arrival"


def test_a_request_larger_than_the_pool_is_refused() -> None:
    requests = _requests(5, seed=4)
    with pytest.raises(ValueError, match="more than the pool"):
        Limits(kv_blocks=2, block_tokens=8, token_budget=64).check(requests)


def test_iteration_price_is_the_cost_models() -> None:
    model = cost_model()
    priced = PricedExecutor(model, 512, 16)
    batch = Batch(np.array([0, 1, 2]), np.array([100, 0, 37]), np.array([200, 50, 1]), np.zeros(0, np.int64))
    assert priced(batch) == pytest.approx(model.iteration_ms([200, 50], [100, 0], [37]))
    one = Batch(np.array([0]), np.array([64]), np.array([128]), np.zeros(0, np.int64))
    assert priced(one) == pytest.approx(float(model.prefill_ms(128, 64)))
