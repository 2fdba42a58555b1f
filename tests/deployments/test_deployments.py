"""A deployment: a model on GPUs of one kind, its memory arithmetic and its price of any iteration, built from
measured operators and published kernel figures (targets/deployments/)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from search.cli import main
from targets.costmodel.model import PASS
from targets.costmodel.shapes import LLAMA3_8B, LLAMA3_70B
from targets.deployments.catalog import DEPLOYMENTS, SERVING, deployment
from targets.deployments.gpus import H100_SXM

FIVE = (
    "h100-llama3-8b",
    "h100-llama3-70b-tp4",
    "h100-llama3-70b-tp8",
    "a100-llama3-8b",
    "a100-llama3-70b-tp4",
)


def test_the_five_gpu_deployments_price_whole_iterations() -> None:
    assert SERVING == FIVE
    assert {"llama3-8b-h100", "llama3-70b-4xh100"} <= set(DEPLOYMENTS) - set(SERVING), "kv-tiered's first two"
    with pytest.raises(KeyError, match="unknown deployment 'h100-llama3-405b'; known: h100-llama3-8b"):
        deployment("h100-llama3-405b")


def test_weights_and_kv_bytes_follow_the_model_config_and_tensor_parallelism() -> None:
    eight, tp4, tp8 = (deployment(n) for n in FIVE[:3])
    assert eight.parameters() == pytest.approx(8.03e9, rel=0.002)  # Llama-3-8B, untied embeddings
    assert tp4.parameters() == pytest.approx(70.55e9, rel=0.002)
    assert eight.weight_bytes() == 2 * eight.parameters()
    assert tp4.weight_bytes() == 2 * tp4.parameters() / 4
    # 2 (K and V) x layers x this GPU's KV heads x head dim x 2 bytes (BF16): grouped-query attention counted
    assert eight.kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2
    assert tp4.kv_bytes_per_token() == 2 * 80 * 2 * 128 * 2
    assert tp8.kv_bytes_per_token() == 2 * 80 * 1 * 128 * 2
    assert (LLAMA3_8B.kv_heads, LLAMA3_70B.kv_heads) == (8, 8)


def test_the_kv_blocks_are_what_the_memory_fraction_leaves_beside_weights_and_activations() -> None:
    eight = deployment("h100-llama3-8b")
    room = H100_SXM.memory_bytes * 0.9 - eight.weight_bytes() - eight.activation_bytes(2048, 256)
    blocks = eight.kv_blocks(16, 2048, 256)
    assert blocks == int((room - 1.5 * 2**30) // (16 * eight.kv_bytes_per_token()))
    assert 25_000 < blocks < 30_000, "about 440,000 tokens of KV on one H100 beside Llama-3-8B"
    assert deployment("h100-llama3-70b-tp8").kv_blocks(16, 2048, 256) > 2.5 * deployment(
        "h100-llama3-70b-tp4"
    ).kv_blocks(16, 2048, 256), "twice the GPUs, half the weights and half the KV heads on each"
    tight = replace(eight, memory_fraction=0.2)
    assert tight.kv_blocks(16, 2048, 256) == 0, "no room beside the weights is no blocks, never fewer"
    memory = eight.memory(16, 2048, 256)
    assert memory["KV blocks"] == blocks and memory["KV KiB per token"] == 128


def test_decode_is_bounded_below_by_streaming_the_weights_and_the_keys() -> None:
    eight = deployment("h100-llama3-8b")
    cost = eight.cost_model()
    stream = H100_SXM.hbm_bytes_s * H100_SXM.streaming_share / 1e3  # bytes per ms
    one = cost.iteration_ms([], [], [100])
    assert one >= eight.weight_bytes() / stream, "one decode reads every weight"
    many = cost.iteration_ms([], [], [4000] * 64)
    keys = 64 * 4001
    assert many >= (eight.weight_bytes() + keys * eight.kv_bytes_per_token()) / stream
    assert 5.0 < one < 15.0, "Llama-3-8B decodes in milliseconds on an H100, not in tens"


def test_prefill_is_bound_by_compute_and_attention_grows_with_the_context() -> None:
    cost = deployment("h100-llama3-8b").cost_model()
    short, long = cost.iteration_ms([4096], [0], []), cost.iteration_ms([4096], [28672], [])
    assert long > short, "attention over 28,672 cached tokens costs more"
    flops = 2 * deployment("h100-llama3-8b").parameters() * 4096
    assert 0.25 < flops / (short / 1e3) / 989e12 < 0.9, "a prefill runs at a plausible share of the peak"
    a100 = deployment("a100-llama3-8b").cost_model().iteration_ms([4096], [0], [])
    assert a100 > 1.8 * short, "the A100 is slower at compute than the H100"


def test_tensor_parallelism_divides_the_work_and_adds_all_reduces() -> None:
    tp4 = deployment("h100-llama3-70b-tp4").cost_model()
    tp8 = deployment("h100-llama3-70b-tp8").cost_model()
    assert tp8.iteration_ms([2048], [0], []) < tp4.iteration_ms([2048], [0], [])
    reduce = tp4.profile.collectives["all_reduce"][4]
    with_reduce = tp4.linear_ms(2048)
    without = replace(tp4, tensor_parallel=1).linear_ms(2048)
    assert with_reduce - without == pytest.approx(2 * 80 * reduce.predict(bytes=2048 * 8192 * 2.0))


def test_a_measured_attention_fit_replaces_the_published_one() -> None:
    eight = deployment("h100-llama3-8b")
    published = eight.cost_model()
    assert PASS in published.profile.operators, "the engine's overheads as a pass fit"
    measured_profile = replace(
        published.profile,
        operators={
            **published.profile.operators,
            "attn_decode": replace(published.profile.operators["attn_decode"], coef=(1.0, 0.0, 0.0)),
        },
    )
    measured = replace(published, profile=measured_profile)
    assert measured.attn_decode_ms([10]) == pytest.approx(32 * 1.0)
    assert published.attn_decode_ms([10]) < 1.0


def test_every_iteration_price_is_finite_and_grows_with_the_batch() -> None:
    for name in FIVE:
        cost = deployment(name).cost_model()
        prices = [cost.iteration_ms([512] * k, [0] * k, [1000] * (8 * k)) for k in (1, 2, 4, 8)]
        assert all(np.isfinite(prices)) and prices == sorted(prices), name


def test_the_deployments_command_lists_them_with_memory_costs_and_sources(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["deployments", "--json"])
    rows = {r["deployment"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(FIVE) <= set(rows)
    eight = rows["h100-llama3-8b"]
    assert eight["GPUs"] == "1 x H100 SXM5 80GB" and eight["KV KiB per token"] == 128
    assert eight["decode ms"] > 5 and eight["prefill ms"] > eight["decode ms"]
    assert "FlashAttention-3" in eight["sources"] and "FlashAttention-2" in rows["a100-llama3-8b"]["sources"]
    assert rows["llama3-8b-h100"]["decode ms"] is None, "kv-tiered's first pricing has no decode attention"
    main(["deployments"])
    shown = capsys.readouterr().out
    assert all(name in shown for name in FIVE) and "weights GiB" in shown


def test_an_absurd_size_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["deployments", "--block-tokens", "0"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
