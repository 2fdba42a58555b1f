"""The compiled simulator decides exactly as scheduler.serve with the priced executor, and prices alike."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from targets.base import Instance
from targets.batching.compiled_scheduler import Pricing, serve_priced, serve_priced_recorded
from targets.batching.kernels import PricedExecutor, cost_model
from targets.batching.metrics import serving_metrics
from targets.batching.scheduler import Batch, Limits, serve
from targets.batching.target import (
    BatchingTarget,
    _compiled,
    _srpt_key,
    instance_limits,
    instance_requests,
    shipped_workload_path,
)
from targets.batching.trace import Requests
from targets.costmodel.model import CostModel

TARGET = BatchingTarget()
SLO = (1.0, 0.1)
_FEATURES = ("waiting", "since_run", "prompt", "generated", "computed", "pending", "decoding", "running",
             "blocks", "preemptions", "slack", "free_blocks", "queued", "batch")  # fmt: skip


def random_candidate(seed: int) -> str:
    """A candidate over random features with tuned weights, a branch and a nonlinearity."""
    rng = np.random.default_rng(seed)
    a, b, c, d = rng.choice(_FEATURES, 4, replace=False)
    return (
        '"""A random candidate."""\n\n'
        'PARAMS = {"w": (0.0, 10.0), "v": (-5.0, 5.0)}\n\n\n'
        "def priority(r, p):\n"
        f"    if r.{a} > {rng.uniform(0, 50):.3f}:\n"
        f"        return p.w * r.{b} - log(1 + abs(r.{c}))\n"
        f"    return p.v * min(r.{d}, {rng.uniform(1, 100):.2f}) + {rng.uniform(-1, 1):.3f} * r.{b}\n"
    )


def _generated(n: int, seed: int, gap_s: float) -> Requests:
    rng = np.random.default_rng(seed)
    return Requests(np.cumsum(rng.exponential(gap_s, n)), rng.integers(1, 200, n), rng.integers(1, 40, n))


def _shipped_head(n: int) -> tuple[Requests, Limits]:
    config = {**TARGET.default_config(), "requests": [0, n], "capacity": 400, "load": 3.0}
    instance = Instance(str(shipped_workload_path()), config, "head", "eval")
    return instance_requests(instance), instance_limits(instance)


TRACES: dict[str, Callable[[], tuple[Requests, Limits]]] = {
    "generated, small pool": lambda: (
        _generated(150, 1, 0.002),
        Limits(kv_blocks=60, block_tokens=8, token_budget=96, max_seqs=12),
    ),
    "generated, dense arrivals": lambda: (
        _generated(100, 3, 0.001),
        Limits(kv_blocks=200, block_tokens=8, token_budget=64, max_seqs=8),
    ),
    "together, outputs outgrow the pool": lambda: (
        Requests(np.zeros(30), np.full(30, 30), np.full(30, 100)),
        Limits(kv_blocks=40, block_tokens=8, token_budget=128, max_seqs=32),
    ),
    "shipped Azure head, overloaded": lambda: _shipped_head(120),
}
POLICIES = [*sorted(TARGET.baselines()), "srpt", "random 1", "random 2"]


def _key_and_params(policy: str) -> tuple[Callable[..., float], np.ndarray]:
    if policy == "srpt":
        return _srpt_key(), np.zeros(0)
    if policy.startswith("random"):
        seed = int(policy.split()[1])
        params = np.random.default_rng(seed).uniform([0.0, -5.0], [10.0, 5.0])
        return _compiled(random_candidate(seed)), params
    return _compiled(TARGET.baselines()[policy]), np.zeros(0)


def _python_decisions(
    requests: Requests,
    limits: Limits,
    key: Callable[..., float],
    params: np.ndarray,
    horizon_s: float,
    model: CostModel | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """scheduler.serve with PricedExecutor, its decisions as rows (iteration, request, start, tokens)."""
    rows: list[tuple[int, int, int, int]] = []
    iteration = [0]

    def observe(batch: Batch, state: np.ndarray, free: int) -> None:
        i = iteration[0]
        rows.extend(
            (i, int(r), int(s), int(t)) for r, s, t in zip(batch.ids, batch.starts, batch.tokens, strict=True)
        )
        rows.extend((i, int(r), -1, 0) for r in batch.preempted)
        iteration[0] += 1

    priced = PricedExecutor(model or cost_model(), limits.token_budget, limits.max_seqs)
    served = serve(requests, limits, key, params, priced, SLO, horizon_s, observe=observe)
    return np.array(rows, dtype=np.int64).reshape(-1, 4), served.state, served.end_s


@pytest.mark.parametrize("trace", sorted(TRACES))
@pytest.mark.parametrize("policy", POLICIES)
def test_every_decision_equals_the_python_schedulers(trace: str, policy: str) -> None:
    requests, limits = TRACES[trace]()
    key, params = _key_and_params(policy)
    horizon = float(requests.arrival_s[-1]) + 3600.0
    expected, state, end = _python_decisions(requests, limits, key, params, horizon)
    pricing = Pricing.of(cost_model(), limits.token_budget, limits.max_seqs)
    served, decisions = serve_priced_recorded(requests, limits, key, params, pricing, SLO, horizon)
    assert decisions.shape == expected.shape and np.array_equal(decisions, expected)
    assert np.array_equal(served.state, state, equal_nan=True), "the same state at the end"
    assert served.end_s == end and served.iterations == int(expected[-1, 0]) + 1


def test_a_horizon_stops_both_schedulers_at_the_same_iteration() -> None:
    requests, limits = TRACES["together, outputs outgrow the pool"]()
    key, params = _key_and_params("fcfs")
    expected, state, end = _python_decisions(requests, limits, key, params, 0.5)
    pricing = Pricing.of(cost_model(), limits.token_budget, limits.max_seqs)
    served, decisions = serve_priced_recorded(requests, limits, key, params, pricing, SLO, 0.5)
    assert served.unfinished > 0 and np.array_equal(decisions, expected) and served.end_s == end
    unrecorded = serve_priced(requests, limits, key, params, pricing, SLO, 0.5)
    assert np.array_equal(unrecorded.state, state, equal_nan=True) and unrecorded.end_s == end


@pytest.mark.parametrize(
    ("profile", "on"),
    [
        ("cpu-2core", "cpu"),  # without timed passes
        ("cpu-2core-busy", "cpu"),  # with them
        ("cpu-2core", "h100-llama3-8b"),  # a GPU deployment: published attention, the bandwidth floor
        ("cpu-2core", "h100-llama3-70b-tp4"),  # and the all-reduces of tensor parallelism
    ],
)
def test_an_iteration_costs_what_the_priced_executor_says_to_the_bit(profile: str, on: str) -> None:
    model, rng = cost_model(profile, on), np.random.default_rng(7)
    pricing, priced = Pricing.of(model, 4096, 256), PricedExecutor(model, 4096, 256)
    for rows in [1, 2, 7, 8, 9, 17, 100, 129, 200]:
        tokens = np.where(rng.random(rows) < 0.5, 1, rng.integers(2, 4096 // rows + 3, rows))
        starts = rng.integers(0, 5000, rows)
        batch = Batch(np.arange(rows), starts, tokens, np.zeros(0, np.int64))
        assert pricing.iteration_ms(starts, tokens) == priced(batch)


def test_on_a_gpu_deployment_every_decision_equals_the_python_schedulers_too() -> None:
    requests, limits = TRACES["generated, dense arrivals"]()
    model = cost_model("cpu-2core", "h100-llama3-8b")
    key, params = _key_and_params("srpt")
    expected, state, end = _python_decisions(requests, limits, key, params, np.inf, model)
    pricing = Pricing.of(model, limits.token_budget, limits.max_seqs)
    served, decisions = serve_priced_recorded(requests, limits, key, params, pricing, SLO)
    assert np.array_equal(decisions, expected) and served.end_s == end
    assert np.array_equal(served.state, state, equal_nan=True)


def test_pricing_smaller_than_the_limits_is_refused() -> None:
    requests, limits = TRACES["generated, small pool"]()
    key, params = _key_and_params("fcfs")
    with pytest.raises(ValueError, match="pricing tables"):
        serve_priced(requests, limits, key, params, Pricing.of(cost_model(), 10, 4), SLO)


@pytest.mark.skipif(
    not Path("../shared/data/batching/azure_llm_conv_2023_train.csv").exists(), reason="no shared data"
)
@pytest.mark.slow
def test_every_decision_equals_on_a_real_training_slice() -> None:
    config = {**TARGET.default_config(), "requests": [2000, 2600], "load": 1.0}
    instance = Instance("../shared/data/batching/azure_llm_conv_2023_train.csv", config, "slice", "eval")
    requests, limits = instance_requests(instance), instance_limits(instance)
    pricing = Pricing.of(cost_model(), limits.token_budget, limits.max_seqs)
    for policy in POLICIES:
        key, params = _key_and_params(policy)
        expected, state, _ = _python_decisions(requests, limits, key, params, np.inf)
        served, decisions = serve_priced_recorded(requests, limits, key, params, pricing, SLO)
        assert np.array_equal(decisions, expected), policy
        assert np.array_equal(served.state, state, equal_nan=True), policy


def test_a_late_limit_stops_a_replay_once_the_goal_is_out_of_reach_and_changes_nothing_before() -> None:
    requests, limits = _shipped_head(400)
    key, params = _key_and_params("fcfs")
    pricing = Pricing.of(cost_model(), limits.token_budget, limits.max_seqs)
    whole = serve_priced(requests, limits, key, params, pricing, SLO)
    late = 20  # 5 % of the requests; at load 3 far more than that miss the TTFT SLO
    assert serving_metrics(whole, SLO)["slo_attainment"] < (requests.n - late) / requests.n
    stopped = serve_priced(requests, limits, key, params, pricing, SLO, late_limit=late)
    assert stopped.iterations < whole.iterations and stopped.unfinished > 0
    assert serving_metrics(stopped, SLO)["slo_attainment"] < (requests.n - late) / requests.n
    free = serve_priced(requests, limits, key, params, pricing, SLO, late_limit=requests.n)
    assert np.array_equal(free.state, whole.state, equal_nan=True) and free.end_s == whole.end_s
