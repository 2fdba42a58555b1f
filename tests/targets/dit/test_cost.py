"""A step priced part by part, as xDiT runs each method: PipeFusion's patches, hops, bubble, warm-up and
fill; Ulysses' all-to-all at NCCL's bandwidth with a per-peer latency; CFG's one gather; memory per GPU."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from targets.dit.cost import (
    MODULATION_BYTES,
    PIPEFUSION_WARMUP_STEPS,
    RESIDUAL_BYTES,
    ROPE_BYTES,
    STEP_PARTS,
    step_cost,
)
from targets.dit.models import MODELS
from targets.dit.plans import Plan, Request, memory
from targets.dit.pricing import ACT_BYTES, CALIBRATION, PEER_LATENCY_S, gpu_pricing, scaled_pricing
from targets.dit.topology import NCCL_EFFICIENCY, TOPOLOGIES, UPI2, Link, message_latency_s

A100 = gpu_pricing(TOPOLOGIES["a100-nvlink"])
H100 = gpu_pricing(TOPOLOGIES["h100-nvlink"])
SD3 = Request(MODELS["sd3-medium"], 1024, 1024, 1, 28)


def _plan(cfg: int = 1, pipefusion: int = 1, patches: int = 0, ring: int = 1, ulysses: int = 1) -> Plan:
    n = cfg * pipefusion * ring * ulysses
    return Plan(cfg, pipefusion, patches or pipefusion, ring, ulysses, 1, tuple(range(n)))


def test_the_step_is_the_sum_of_its_parts_and_a_request_adds_what_it_pays_once() -> None:
    cost = step_cost(SD3, _plan(cfg=2, pipefusion=4), A100)
    assert set(cost.parts) == set(STEP_PARTS)
    assert cost.step_s == pytest.approx(sum(cost.parts.values()))
    assert cost.warmup_steps == PIPEFUSION_WARMUP_STEPS
    assert cost.total_s == pytest.approx(cost.pipelined_steps * cost.step_s + sum(cost.once.values()))


def test_pipefusion_idles_when_fewer_patches_than_stages_circulate() -> None:
    full = step_cost(SD3, _plan(pipefusion=4, patches=4), A100)
    starved = step_cost(SD3, _plan(pipefusion=4, patches=2), A100)
    assert full.parts["pipeline_bubble"] == 0.0
    # Two patches keep stage 0 busy two slots of four: it idles two.
    slot = (starved.step_s - starved.parts["pipeline_bubble"]) / 2
    assert starved.parts["pipeline_bubble"] == pytest.approx(2 * slot)


def test_pipefusion_warms_up_over_the_whole_image_and_fills_its_pipeline_once() -> None:
    cost = step_cost(SD3, _plan(pipefusion=4), A100)
    # The warm-up step runs all 24 blocks in turn, about a pipelined step's work times the stages it waits on.
    assert cost.step_s < cost.once["warmup"] < 4 * 1.2 * cost.step_s
    assert cost.once["pipeline_fill"] == pytest.approx(3 / 4 * cost.step_s, rel=0.05)  # 3 of 4 patch slots
    plain = step_cost(SD3, _plan(ulysses=4), A100)
    assert plain.once["warmup"] == plain.once["pipeline_fill"] == 0.0 and plain.warmup_steps == 0


def test_pipefusion_hops_hide_behind_the_next_patch_unless_the_link_is_too_slow() -> None:
    fast = step_cost(SD3, _plan(pipefusion=4), A100)
    assert fast.parts["pipefusion_p2p"] == 0.0 and fast.hidden["pipefusion_p2p"] > 0
    slow_link = Link("a 10 MB/s link", 1e7, False)
    crawl = replace(TOPOLOGIES["a100-nvlink"], socket_link=slow_link, node_link=slow_link)
    slow = step_cost(SD3, _plan(pipefusion=4), scaled_pricing(crawl, CALIBRATION))
    assert slow.parts["pipefusion_p2p"] > 0


def test_long_skips_that_leave_a_stage_add_hops() -> None:
    hunyuandit = Request(MODELS["hunyuandit"], 1024, 1024, 1, 50)
    with_skips = step_cost(hunyuandit, _plan(pipefusion=2), A100).hidden["pipefusion_p2p"]
    without = replace(hunyuandit, model=replace(MODELS["hunyuandit"], skips=0))
    # Blocks 0-18 of stage 0 feed blocks 21-39 of stage 1: 19 messages more than the one hop.
    assert with_skips == pytest.approx(
        20 * step_cost(without, _plan(pipefusion=2), A100).hidden["pipefusion_p2p"]
    )


def test_ulysses_pays_four_all_to_alls_per_block_at_ncclS_bandwidth_with_a_latency_per_peer() -> None:
    cost = step_cost(SD3, _plan(ulysses=4), A100)
    tokens = 2 * SD3.sequence / 4  # both CFG passes, a quarter of the sequence
    per_call = message_latency_s() + 3 * PEER_LATENCY_S
    per_call += 3 / 4 * tokens * 1536 * 2 / (300e9 * NCCL_EFFICIENCY)
    # yunchang's all_to_all_4D copies its tensor into the send layout before and out of it after
    per_call += 2 * A100.stream_s(tokens * 1536)
    assert cost.parts["ulysses_all_to_all"] == pytest.approx(24 * 4 * per_call)


def test_cfg_parallel_gathers_one_noise_prediction_per_step() -> None:
    cost = step_cost(SD3, _plan(cfg=2), A100)
    latent = SD3.tokens * 16 * 4 * 2  # 16 channels x 2 x 2 patch, bfloat16
    assert cost.parts["cfg_all_gather"] == pytest.approx(A100.all_gather_s(latent, (0, 1)))
    assert cost.comm_s == pytest.approx(cost.parts["cfg_all_gather"])


def test_memory_per_gpu_divides_weights_by_stages_and_keeps_pipefusions_stale_kv() -> None:
    whole = memory(SD3, _plan())
    staged = memory(SD3, _plan(pipefusion=4))
    assert staged.weights == pytest.approx(whole.weights / 4)
    # Every block of a stage keeps both passes' K and V over the whole sequence.
    assert staged.stale_kv == pytest.approx(math.ceil(24 / 4) * 2 * 2 * SD3.sequence * 1536 * 2)
    assert whole.stale_kv == 0.0
    assert memory(SD3, _plan(ring=2)).ring_buffer > 0 == whole.ring_buffer


def test_a_streamed_pass_costs_the_measured_activation_kernel_per_byte() -> None:
    """Vidur's activation kernel reads two bf16 values and writes one per element: 6 bytes."""
    values = 4096 * 3072
    assert H100.stream_s(values, ACT_BYTES) == pytest.approx(H100.elementwise_s("act", values, 1))
    assert H100.stream_s(values, 12.0) == pytest.approx(2 * H100.stream_s(values, 6.0))


def test_a_float32_product_runs_at_the_fp32_peak_or_at_dram_speed() -> None:
    big = 8192.0  # compute-bound: 2 x 8192^3 FLOPs at 19.5 TFLOPS, the A100 datasheet's FP32 peak
    assert A100.fp32_gemm_s(big, big, big) == pytest.approx(2 * big**3 / 19.5e12)
    thin = A100.fp32_gemm_s(33, 16384, 32)  # memory-bound: its operands streamed once
    assert thin == pytest.approx(A100.stream_s(33 * 16384 + 16384 * 32 + 33 * 32, 4.0))


def test_an_eager_block_streams_residuals_modulation_qk_norm_and_rotary_where_compile_fuses_them() -> None:
    eager = Request(MODELS["flux.1-dev"], 1024, 1024, 1, 28)
    compiled = replace(eager, compiled=True)
    single = _plan()
    extra = step_cost(eager, single, H100).parts["elementwise"]
    extra -= step_cost(compiled, single, H100).parts["elementwise"]
    n, h = eager.sequence, 3072  # 4096 image + 512 text tokens, one pass (no CFG)
    per_block = H100.stream_s(n * h, RESIDUAL_BYTES + MODULATION_BYTES)
    per_block += 2 * H100.elementwise_s("norm", n, h) + H100.stream_s(2 * n * h, ROPE_BYTES)
    assert extra == pytest.approx(57 * per_block)


def test_sanas_mix_ffn_convolves_its_gated_input_depthwise() -> None:
    sana = Request(MODELS["sana-1600m"], 4096, 4096, 1, 20)
    plain = replace(sana, model=replace(MODELS["sana-1600m"], depthwise_kernel=0))
    extra = step_cost(sana, _plan(), A100).parts["elementwise"]
    extra -= step_cost(plain, _plan(), A100).parts["elementwise"]
    values = 2 * sana.tokens * 2 * 5600  # both CFG passes, the 2 x 5600 channels before the gate
    assert extra == pytest.approx(20 * A100.conv_s(values, 9))


def test_sanas_linear_attention_runs_in_float32() -> None:
    """diffusers' and xDiT's SANA processors cast q, k, v to float32 before the two products."""
    sana = Request(MODELS["sana-1600m"], 4096, 4096, 1, 20)
    heads, tokens = 2 * 70, sana.tokens  # both CFG passes
    linear = A100.linear_attention_s(heads, tokens, tokens, 32)
    products = A100.fp32_gemm_s(heads * 33, tokens, 32) + A100.fp32_gemm_s(tokens, 32, heads * 33)
    bf16_products = A100.gemm_s(heads * 33, tokens, 32) + A100.gemm_s(tokens, 32, heads * 33)
    assert linear > products > bf16_products


def test_consisid_cross_attends_to_its_face_tokens_after_every_other_block() -> None:
    consisid = Request(MODELS["consisid"], 480, 720, 49, 50)
    plain = replace(consisid, model=replace(MODELS["consisid"], side_attention=None))
    extra = step_cost(consisid, _plan(), H100).parts["gemm"] - step_cost(plain, _plan(), H100).parts["gemm"]
    n = 2 * consisid.sequence  # both CFG passes
    assert extra == pytest.approx(21 * (H100.gemm_s(n, 3072, 2048) + H100.gemm_s(n, 2048, 3072)))


def test_a_ring_that_crosses_sockets_passes_its_chunks_at_the_shared_socket_links_rate() -> None:
    """cfg2 x ring3 on 4 + 4 GPUs: ring {3, 4, 5} crosses the sockets, two of its GPUs behind one link."""
    pcie = gpu_pricing(TOPOLOGIES["h100-pcie"])
    consisid = Request(MODELS["consisid"], 480, 720, 49, 50)
    cost = step_cost(consisid, _plan(cfg=2, ring=3), pcie)
    chunk = 2 * consisid.sequence / 3 * 3072 * 2  # one pass's K and V for a third of the sequence, bf16
    send = message_latency_s() + chunk / (UPI2.bandwidth / 2 * NCCL_EFFICIENCY)
    passed = cost.hidden["ring_p2p"] + cost.parts["ring_p2p"] - 42 * 2 * pcie.ring_step_overhead_s
    assert passed == pytest.approx(42 * 2 * send)
