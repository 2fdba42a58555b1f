"""The batching-offline target: its workloads, vLLM's defaults per GPU, the knobs a candidate may tune,
the lower bound under every schedule, and prefix grouping's effect on a batch that shares prefixes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from targets.base import Instance, WorkloadError
from targets.batching_offline.batch import MOONCAKE, load_batch
from targets.batching_offline.target import BatchingOfflineTarget, vllm_offline_defaults
from verifiers.static import check

TARGET = BatchingOfflineTarget()
SMALL = "gen:3000:0"


def evaluate(workload: str, source: str, **config: object) -> dict[str, float]:
    program = check(source, TARGET.signatures)
    (_, whole) = TARGET.instances(workload, config)
    return TARGET.evaluate(program, whole, {})


def baselines(workload: str, **config: object) -> dict[str, dict[str, float]]:
    return {name: evaluate(workload, source, **config) for name, source in TARGET.baselines().items()}


def test_vllm_offline_defaults_follow_the_gpu() -> None:
    assert vllm_offline_defaults("h100-llama3-8b") == (16384, 1024)
    assert vllm_offline_defaults("h100-llama3-70b-tp4") == (16384, 1024)
    assert vllm_offline_defaults("a100-llama3-8b") == (8192, 256)


def test_a_generated_batch_is_seeded_and_drawn_from_the_shipped_lengths() -> None:
    a, b, c = load_batch("gen:500:1"), load_batch("gen:500:1"), load_batch("gen:500:2")
    assert (a.prompt == b.prompt).all() and (a.prompt != c.prompt).any()
    shipped = load_batch(str(Path(__file__).parents[3] / "targets/batching/workloads/azure_conv_head.csv"))
    assert set(a.prompt.tolist()) <= set(shipped.prompt.tolist())
    assert a.units.size == 0 and a.unit_tokens == 0


def test_every_baseline_finishes_the_batch_no_sooner_than_the_lower_bound() -> None:
    for workload in (SMALL, MOONCAKE):
        (_, whole) = TARGET.instances(workload, {})
        bound = TARGET.evaluate_builtin("lower_bound", whole)["makespan_s"]
        for name, metrics in baselines(workload).items():
            assert metrics["unfinished"] == 0, name
            assert metrics["makespan_s"] >= bound, (workload, name)
            assert metrics["vs_bound"] == pytest.approx(metrics["makespan_s"] / bound)
            assert 0 < metrics["peak_kv"] <= 1


ORDERS = (
    "-r.order",
    "r.prompt",
    "-r.prompt",
    "r.output",
    "-r.output",
    "-r.prefix_rank",
    "r.output - r.prompt",
)


@pytest.mark.parametrize(
    ("workload", "config"),
    [(SMALL, {}), (SMALL, {"capacity": 2500}), (SMALL, {"block_tokens": 64}), (MOONCAKE, {})],
)
def test_no_order_budget_or_cap_finishes_sooner_than_the_lower_bound(
    workload: str, config: dict[str, object]
) -> None:
    rng = np.random.default_rng(len(config))
    (train, _) = TARGET.instances(workload, {**config, "train_share": 0.25})
    bound = TARGET.evaluate_builtin("lower_bound", train)["makespan_s"]
    ratios = []
    for order in ORDERS:
        budget, cap = (
            np.exp(rng.uniform(np.log(64), np.log(65536))),
            np.exp(rng.uniform(np.log(8), np.log(4096))),
        )
        knobs = (
            f'PARAMS = {{"token_budget": (1.0, 65536.0, "log", {budget}),\n'
            f'          "max_seqs": (1.0, 65536.0, "log", {cap})}}'
        )
        metrics = TARGET.evaluate(
            check(f"{knobs}\n\ndef priority(r, p):\n    return {order}\n", TARGET.signatures), train, {}
        )
        assert metrics["unfinished"] == 0 and metrics["lower_bound_s"] == bound
        ratios.append(metrics["makespan_s"] / bound)
    assert min(ratios) >= 1.0


def test_the_bound_counts_the_passes_a_pool_allows() -> None:
    """Every decoding sequence holds its blocks through a pass: a smaller pool needs more passes, each
    paying a pass's fixed cost; the bound rises with it, and vLLM's order stays above it."""
    bounds = []
    for capacity in (40000, 8000, 2500):
        (_, whole) = TARGET.instances(SMALL, {"capacity": capacity})
        bounds.append(TARGET.evaluate_builtin("lower_bound", whole)["makespan_s"])
        assert evaluate(SMALL, TARGET.baselines()["vllm_fcfs"], capacity=capacity)["makespan_s"] >= bounds[-1]
    assert bounds[0] < bounds[1] < bounds[2]


def test_the_bound_is_close_to_what_the_best_baseline_reaches() -> None:
    """A bound far below every schedule says little: on a batch without shared prefixes the best baseline
    comes within 10 % of it."""
    best = min(metrics["vs_bound"] for metrics in baselines(SMALL).values())
    assert 1.0 <= best < 1.1


def test_grouping_by_prefix_shortens_a_batch_that_shares_prefixes() -> None:
    ran = baselines(MOONCAKE)
    grouped, fcfs = ran["prefix_grouped"], ran["vllm_fcfs"]
    assert grouped["prefix_reuse"] > 2 * fcfs["prefix_reuse"]
    assert grouped["makespan_s"] < 0.9 * fcfs["makespan_s"]
    off = evaluate(MOONCAKE, TARGET.baselines()["prefix_grouped"], prefix_caching=False)
    assert off["prefix_reuse"] == 0 and off["makespan_s"] > grouped["makespan_s"]


def test_a_candidate_may_tune_the_budget_and_the_batch_cap() -> None:
    plain = evaluate(SMALL, "def priority(r, p):\n    return -r.order\n")
    assert (plain["token_budget"], plain["max_seqs"]) == (16384, 1024)
    knobs = (
        'PARAMS = {"token_budget": (512.0, 32768.0, "log", 2048.0),\n'
        '          "max_seqs": (16.0, 2048.0, "log", 300.0)}\n'
    )
    tuned = evaluate(SMALL, knobs + "\n\ndef priority(r, p):\n    return -r.order\n")
    assert (tuned["token_budget"], tuned["max_seqs"]) == (2048, 300)
    assert tuned["kv_blocks"] > plain["kv_blocks"]  # smaller activations leave more room for keys and values
    assert tuned["preemptions"] < plain["preemptions"]


def test_the_train_instance_is_the_head_of_the_batch() -> None:
    train, whole = TARGET.instances(SMALL, {"train_share": 0.1})
    assert (train.role, whole.role) == ("train", "eval")
    assert train.config["sequences"] == 300 and "sequences" not in whole.config


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ("gen:abc:1", "gen:N:SEED"),
        ("gen:0:1", "1 to"),
        ("/nonexistent/batch.csv", "no such"),
        ("/nonexistent/batch.jsonl", "no such"),
    ],
)
def test_a_bad_workload_is_one_line(workload: str, message: str) -> None:
    with pytest.raises(WorkloadError, match=message) as caught:
        TARGET.instances(workload, {})
    assert "\n" not in str(caught.value)


def test_a_pool_too_small_for_a_sequence_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="needs more than the pool"):
        TARGET.instances(SMALL, {"capacity": 10})


def test_an_instance_evaluates_alike_twice() -> None:
    source = TARGET.baselines()["lpf"]
    program = check(source, TARGET.signatures)
    instance = Instance(SMALL, {"deployment": "a100-llama3-8b"}, "a100", "eval")
    assert TARGET.evaluate(program, instance, {}) == TARGET.evaluate(program, instance, {})
