"""The batching targets priced on a named GPU deployment (`--set deployment=NAME`): its KV blocks, an
interactive SLO and a load past the baselines' capacity by default, and the deployment in every label."""

from __future__ import annotations

import pytest

from targets.base import OptionError, WorkloadError
from targets.batching.target import BatchingTarget, configured, shipped_workload_path
from targets.batching_capacity.target import BatchingCapacityTarget
from targets.deployments.catalog import deployment

TARGET = BatchingTarget()
WORKLOAD = str(shipped_workload_path())


def _eval(config: dict[str, object]):  # type: ignore[no-untyped-def]
    return next(i for i in TARGET.instances(WORKLOAD, config) if i.role == "eval")


def test_on_a_gpu_the_defaults_are_its_kv_blocks_an_interactive_slo_and_a_load_past_capacity() -> None:
    instance = _eval({"deployment": "h100-llama3-8b"})
    blocks = deployment("h100-llama3-8b").kv_blocks(16, 512, 256)
    assert instance.config["capacity"] == blocks
    slo = (instance.config["ttft_slo_s"], instance.config["tpot_slo_s"])
    assert slo == (1.0, 0.05) and (instance.config["load"], instance.config["token_budget"]) == (3.0, 512)
    assert instance.label == f"azure_conv_head.csv@h100-llama3-8b:{blocks}x3"


def test_what_a_user_sets_holds_on_every_deployment() -> None:
    chosen = {"capacity": 5000, "ttft_slo_s": 2.0, "tpot_slo_s": 0.1, "load": 1.5}
    instance = _eval({"deployment": "a100-llama3-70b-tp4", **chosen})
    assert {k: instance.config[k] for k in chosen} == chosen
    assert configured({"deployment": "h100-llama3-8b", "block_tokens": 32})["capacity"] == deployment(
        "h100-llama3-8b"
    ).kv_blocks(32, 512, 256), "the blocks that fit, counted at the block size chosen"


def test_the_cpu_keeps_its_defaults_and_labels() -> None:
    instance = _eval({})
    assert (instance.config["capacity"], instance.config["load"], instance.config["deployment"]) == (
        2048,
        0.4,
        "cpu",
    )
    assert instance.label == "azure_conv_head.csv@2048x0.4"


def test_an_unknown_deployment_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(
        OptionError, match=r"option deployment must be one of cpu, h100-llama3-8b, .*'h100-405b'"
    ):
        TARGET.instances(WORKLOAD, {"deployment": "h100-405b"})


def test_a_gpu_prices_decode_in_milliseconds_where_the_cpu_prices_the_tiny_model() -> None:
    gpu = TARGET.evaluate_builtin("srpt", _eval({"deployment": "h100-llama3-8b", "load": 1.0}))
    cpu = TARGET.evaluate_builtin("srpt", _eval({"load": 0.1}))
    assert 5.0 < gpu["tpot_p50_ms"] < 50.0, "an 8B model on an H100 decodes in 5 to 50 ms a token"
    assert gpu["slo_attainment"] > 0.95, "at the trace's own rate one H100 keeps up"
    assert gpu["tpot_p50_ms"] != cpu["tpot_p50_ms"]


def test_batching_capacity_takes_the_deployment_too() -> None:
    instance = next(
        i
        for i in BatchingCapacityTarget().instances(
            WORKLOAD, {"deployment": "h100-llama3-8b", "requests": "0:300"}
        )
        if i.role == "eval"
    )
    metrics = BatchingCapacityTarget().evaluate_builtin("srpt", instance)
    assert metrics["capacity"] > 1.0 and metrics["capacity_rps"] > 0


def test_sizes_that_leave_no_kv_block_on_the_gpu_are_one_line_naming_them() -> None:
    with pytest.raises(WorkloadError, match="on h100-llama3-8b no KV block of 1000000000000 tokens fits"):
        TARGET.instances(WORKLOAD, {"deployment": "h100-llama3-8b", "block_tokens": 10**12})
