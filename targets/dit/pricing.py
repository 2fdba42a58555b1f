"""What one operator and one collective cost on a cluster's GPUs, from the shipped measured profiles.

Which measurement prices what:
- GEMMs, norms and activations: the profile's fits (h100-vidur: Vidur's measured H100 operators; cpu-2core:
  this machine's). Off H100, tensor work (GEMMs, attention) takes the H100's time x H100 peak / (this GPU's
  peak x its achieved efficiency), the efficiency fitted on the calibration half of measurements.toml
  (CALIBRATION); norms and activations only stream memory, so they scale by DRAM bandwidth.
- Attention on H100: FlashAttention-2's measured forward throughput on H100 SXM5 without a causal mask (DiT
  attention has none), by head dim (64, 128, 256; linear between) and sequence length (Shah et al.,
  "FlashAttention-3", 2024, Figure 5: e.g. 309, 350, 362, 368, 370, 370 TFLOPS at head dim 128 and 512 ...
  16k tokens), the kernel xDiT and HunyuanVideo run. Linear attention (SANA) runs in float32 as diffusers'
  and xDiT's processors cast it: its two products per head (the d x d key-value state and the queries
  against it) on the CUDA cores at the datasheet's FP32 peak, its casts and copies streamed. On a CPU
  profile, attention is priced as its two GEMMs per head and a softmax over the scores (the profile's gemm
  and act fits), as the real block runs it.
- Eager elementwise passes and layout copies: the profile's measured activation kernel per byte moved
  (ACT_BYTES), scaled off H100 by DRAM bandwidth.
- Collectives: the profile's fit where it measured that collective at that group size on the GPUs it
  describes (H100 all-reduce over 2, 4, 8 and send/recv over 2 NVLink GPUs; gloo over 2 local processes
  on the CPU); otherwise the link formulas below at the bandwidth NCCL reaches on the slowest link the group
  spans (topology.py): a launch (the measured send/recv latency) and a small latency per further peer.
- Host overheads (CALIBRATION): a fixed dispatch time per block and per ring step, which no kernel fit sees
  and no plan divides; fitted on the calibration half.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from targets.base import WorkloadError
from targets.costmodel.model import Profile, ProfileError, load_profile

from .topology import H100, Topology, message_latency_s

FA2_H100_LENGTHS = np.log2([512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0])
FA2_H100_HEAD_DIMS = np.array([64.0, 128.0, 256.0])
FA2_H100_TFLOPS = np.array([
    [282.0, 306.0, 318.0, 321.0, 322.0, 324.0],  # head dim 64
    [309.0, 350.0, 362.0, 368.0, 370.0, 370.0],  # head dim 128
    [275.0, 313.0, 321.0, 323.0, 324.0, 326.0],  # head dim 256
])  # fmt: skip
"""FlashAttention-2's forward throughput on H100 SXM5 without a causal mask, by head dim and sequence length
(FlashAttention-3 paper, arXiv 2407.08608, Figure 5, the panels without causal mask)."""
ACT_BYTES = 6.0
"""Bytes the profiled activation kernel moves per element: Vidur's Llama-2 gated MLP activation reads the
gate and the up projection (2 x 2 bytes) and writes their product (2 bytes) (targets/costmodel/vidur.py)."""
PEER_LATENCY_S = 2.0e-6
"""Each further step or peer of one NCCL collective launch: ring all-reduce on a DGX A100 took 10 us over 2
GPUs and 33.7 us over 8, (33.7 - 10) / (14 - 2) steps = 2.0 us (NVIDIA/nccl-tests issue 123)."""


@dataclass(frozen=True)
class Calibration:
    """The constants no datasheet gives, fitted on the calibration half of measurements.toml (fidelity.py)."""

    block_overhead_s: float
    """Per block and patch: host time dispatching the block's kernels, beyond the kernels the fits price."""
    ring_step_overhead_s: float
    """Per ring step after the first: its attention call's launch, the fp32 merge of partial outputs and the
    wait on the K,V exchange, beyond what the fits price."""
    efficiency: Mapping[str, float]
    """GPU name -> its achieved tensor throughput per peak FLOP relative to the H100's measured kernels (the
    H100 is the measurement itself: 1.0)."""


CALIBRATION = Calibration(
    block_overhead_s=0.000193,
    ring_step_overhead_s=3.02e-05,
    efficiency={"A100 SXM 80GB": 0.826, "H20 96GB": 1.55, "L20 48GB": 2.13, "L40 48GB": 0.677},
)
"""Fitted by `python bench/dit_calibrate.py` on the calibration half (3 significant digits);
tests/targets/dit/test_fidelity.py refits and compares."""


@dataclass(frozen=True, eq=False)
class Pricing:
    """Seconds of operators on one GPU of a topology, and of collectives over groups of its GPUs."""

    topology: Topology
    profile: Profile
    scale: float
    """This GPU's time over the profiled device's for the same tensor work (GEMMs, attention)."""
    stream_scale: float
    """This GPU's time over the profiled device's for the same bytes streamed (norms, activations)."""
    block_overhead_s: float
    """See Calibration."""
    ring_step_overhead_s: float
    """See Calibration."""
    flash_attention: bool
    """Attention priced from FlashAttention-2's measured H100 throughput (else as GEMMs + softmax)."""
    measured_collectives: bool
    """The profile measured collectives on this kind of device, so its fits price them."""

    def gemm_s(self, m: float, k: float, n: float) -> float:
        """An (m x k) by (k x n) product, from the profile's GEMM fit."""
        return float(self.profile.operator("gemm").predict(m=m, k=k, n=n)) * self.scale / 1e3

    def elementwise_s(self, op: str, m: float, width: float) -> float:
        """A norm or an activation over m x width elements, from the profile's fit."""
        return float(self.profile.operator(op).predict(m=m, width=width)) * self.stream_scale / 1e3

    def stream_s(self, elements: float, bytes_per_element: float = 4.0) -> float:
        """One eager elementwise kernel or layout copy over `elements` values, moving `bytes_per_element`
        bytes each (4: read and written in bf16), priced at the rate of the profile's measured activation
        kernel: Vidur's is the gated MLP's SiLU-and-multiply, which reads two bf16 values and writes one (6
        bytes) per element of its `width`."""
        return self.elementwise_s("act", elements, 1.0) * bytes_per_element / ACT_BYTES

    def conv_s(self, values: float, taps: int) -> float:
        """A depthwise convolution of `taps` taps per value over `values` bf16 values: each read and written
        once at DRAM speed, or 2 x taps FLOPs per value on the CUDA cores at the FP32 peak (no tensor cores
        for a depthwise convolution), whichever is longer."""
        fp32 = self.topology.gpu.fp32_tflops
        flops = 2.0 * taps * values / (fp32 * 1e12) if fp32 > 0 else 0.0
        return max(flops, self.stream_s(values, 4.0))

    def fp32_gemm_s(self, m: float, k: float, n: float) -> float:
        """An (m x k) by (k x n) product in float32: 2 m k n FLOPs at the GPU's FP32 peak, or its operands
        read and its result written once at DRAM speed, whichever is longer (no tensor cores: PyTorch leaves
        TF32 off for matmuls). A device without an FP32 figure prices it by its GEMM fit."""
        fp32 = self.topology.gpu.fp32_tflops
        if fp32 <= 0:
            return self.gemm_s(m, k, n)
        return max(2.0 * m * k * n / (fp32 * 1e12), self.stream_s(m * k + k * n + m * n, 4.0))

    def linear_attention_s(
        self, batch_heads: float, q: float, kv: float, head_dim: float, chunks: int = 1
    ) -> float:
        """ReLU linear attention as diffusers' and xDiT's SANA processors run it: ReLU on q and k in bf16,
        q, k, v cast to float32, v padded with a row of ones, the state K^T [V;1] (d x kv x (d+1)) and the
        queries against it (q x d x (d+1)) as float32 products, the output divided by its last row, copied
        back to (tokens, heads x d) and cast to bf16 (SanaLinearAttnProcessor2_0). Over `chunks` ring chunks
        of kv keys each (xDiT's xdit_sana_ring_flash_attn_forward), the products and the key/value casts
        repeat per chunk, the query's passes do not."""
        d = head_dim
        state = self.fp32_gemm_s(batch_heads * (d + 1), kv, d)
        read = self.fp32_gemm_s(q, d, batch_heads * (d + 1))
        q_side = batch_heads * q * d
        kv_side = batch_heads * kv * d
        # per query value: relu 4 B, cast 6 B, divide 8 B, layout copy 8 B, cast back 6 B
        # per key/value: relu of k 4 B, casts of k and v 6 + 6 B, padded copy of v 8 B
        return chunks * (state + read + self.stream_s(kv_side, 24.0)) + self.stream_s(q_side, 32.0)

    def attention_s(
        self, batch_heads: float, q: float, kv: float, head_dim: float, linear: bool = False
    ) -> float:
        """Non-causal attention of q queries over kv keys for batch_heads heads: 4 q kv d FLOPs each, or
        linear attention (linear_attention_s)."""
        if linear:
            return self.linear_attention_s(batch_heads, q, kv, head_dim)
        if self.flash_attention:
            length = min(q, kv)
            by_length = [
                np.interp(np.log2(max(length, 1.0)), FA2_H100_LENGTHS, row) for row in FA2_H100_TFLOPS
            ]
            tflops = float(np.interp(head_dim, FA2_H100_HEAD_DIMS, by_length))
            tflops *= min(1.0, length / 512.0)  # below 512 tokens the kernel cannot fill the GPU
            return 4.0 * batch_heads * q * kv * head_dim / (tflops * 1e12) * self.scale
        scores = self.gemm_s(q, head_dim, kv) + self.gemm_s(q, kv, head_dim)
        return batch_heads * (scores + self.elementwise_s("act", q, kv))

    def _fit_s(self, op: str, nbytes: float, group: Sequence[int]) -> float | None:
        """The profile's measured time for this collective and group size, if it has one that applies."""
        if not self.measured_collectives or not self.topology.within_nvlink_node(group):
            return None
        fit = self.profile.collectives.get(op, {}).get(len(group))
        return None if fit is None else float(fit.predict(bytes=nbytes)) / 1e3

    def all_to_all_s(self, nbytes: float, group: Sequence[int]) -> float:
        """Each member keeps 1/g of its nbytes and sends the rest to its g-1 peers in one launch:
        launch + (g-1) per-peer latencies + (g-1)/g nbytes / NCCL's bandwidth (DeepSpeed-Ulysses)."""
        g = len(group)
        measured = self._fit_s("all_to_all", nbytes, group)
        if measured is not None:
            return measured
        latency = message_latency_s() + (g - 1) * PEER_LATENCY_S
        return latency + (g - 1) / g * nbytes / self.topology.effective_bandwidth(group)

    def all_reduce_s(self, nbytes: float, group: Sequence[int]) -> float:
        """Ring all-reduce in one launch: 2 (g-1) steps, each member sending 2 (g-1)/g nbytes."""
        g = len(group)
        measured = self._fit_s("all_reduce", nbytes, group)
        if measured is not None:
            return measured
        bandwidth = self.topology.effective_bandwidth(group)
        latency = message_latency_s() + 2 * (g - 1) * PEER_LATENCY_S
        return latency + 2 * (g - 1) / g * nbytes / bandwidth

    def all_gather_s(self, nbytes: float, group: Sequence[int]) -> float:
        """Ring all-gather of nbytes per member in one launch: g-1 steps of nbytes each."""
        g = len(group)
        measured = self._fit_s("all_gather", nbytes, group)
        if measured is not None:
            return measured
        latency = message_latency_s() + (g - 1) * PEER_LATENCY_S
        return latency + (g - 1) * nbytes / self.topology.effective_bandwidth(group)

    def send_s(self, nbytes: float, group: Sequence[int]) -> float:
        """One point-to-point message between two members: latency + nbytes / NCCL's bandwidth."""
        measured = self._fit_s("send_recv", nbytes, group)
        if measured is not None:
            return measured
        return message_latency_s() + nbytes / self.topology.effective_bandwidth(group)


@functools.cache
def h100_profile() -> Profile:
    """The shipped H100 profile, read once per process."""
    return load_profile("h100-vidur")


def scaled_pricing(topology: Topology, calibration: Calibration) -> Pricing:
    """A GPU topology priced by the H100 profile: tensor work scaled by peak x the GPU's efficiency,
    streaming by DRAM bandwidth, H100 collectives by their fits where they apply."""
    profile = h100_profile()
    gpu = topology.gpu
    tensor = H100.peak_tflops / (gpu.peak_tflops * calibration.efficiency.get(gpu.name, 1.0))
    return Pricing(
        topology, profile, tensor, H100.memory_tbps / gpu.memory_tbps,
        calibration.block_overhead_s, calibration.ring_step_overhead_s, True, gpu == H100,
    )  # fmt: skip


@functools.cache
def gpu_pricing(topology: Topology) -> Pricing:
    """A GPU topology priced with the fitted CALIBRATION."""
    return scaled_pricing(topology, CALIBRATION)


def profile_pricing(topology: Topology, profile: str) -> Pricing:
    """A topology priced by a measured profile of its own device (a CPU profile for local processes)."""
    try:
        loaded = load_profile(profile)
        for op in ("gemm", "norm", "act"):
            loaded.operator(op)
    except ProfileError as exc:
        raise WorkloadError(str(exc)) from None
    return Pricing(topology, loaded, 1.0, 1.0, 0.0, 0.0, False, True)
