"""What one operator and one collective cost on a cluster's GPUs, from the shipped measured profiles.

Which measurement prices what:
- GEMMs, norms and activations: the profile's fits (h100-vidur: Vidur's measured H100 operators; cpu-2core:
  this machine's). An A100 or L40 is priced as the H100 scaled by the ratio of their datasheet peak dense
  BF16 throughputs: an assumption, since no A100 or L40 measurement is shipped.
- Attention on H100: FlashAttention-2's measured forward throughput on H100 SXM5 at head dim 128, by
  sequence length (Shah et al., "FlashAttention-3", 2024, Figure "Attention forward speed, head dim 128":
  191, 260, 298, 319, 333, 335 TFLOPS at 512 ... 16k tokens), the kernel xDiT and HunyuanVideo run; the
  head-dim-128 curve is used for every head size. On a CPU profile, attention is priced as its two GEMMs
  per head and a softmax over the scores (the profile's gemm and act fits), as the real block runs it.
- Collectives: the profile's fit where it measured that collective at that group size on the GPUs it
  describes (H100 all-reduce over 2, 4, 8 and send/recv over 2 NVLink GPUs; gloo over 2 local processes
  on the CPU); otherwise the link formulas below on the bandwidth of the slowest link the group spans.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from targets.base import WorkloadError
from targets.costmodel.model import Profile, ProfileError, load_profile

from .topology import Topology, message_latency_s

FA2_H100_LENGTHS = np.log2([512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0])
FA2_H100_TFLOPS = np.array([191.0, 260.0, 298.0, 319.0, 333.0, 335.0])
H100_PEAK_TFLOPS = 989.0


@dataclass(frozen=True, eq=False)
class Pricing:
    """Seconds of operators on one GPU of a topology, and of collectives over groups of its GPUs."""

    topology: Topology
    profile: Profile
    scale: float
    """This GPU's time over the profiled device's for the same work."""
    flash_attention: bool
    """Attention priced from FlashAttention-2's measured H100 throughput (else as GEMMs + softmax)."""
    measured_collectives: bool
    """The profile measured collectives on this kind of device, so its fits price them."""

    def gemm_s(self, m: float, k: float, n: float) -> float:
        """An (m x k) by (k x n) product, from the profile's GEMM fit."""
        return float(self.profile.operator("gemm").predict(m=m, k=k, n=n)) * self.scale / 1e3

    def elementwise_s(self, op: str, m: float, width: float) -> float:
        """A norm or an activation over m x width elements, from the profile's fit."""
        return float(self.profile.operator(op).predict(m=m, width=width)) * self.scale / 1e3

    def attention_s(self, batch_heads: float, q: float, kv: float, head_dim: float) -> float:
        """Non-causal attention of q queries over kv keys for batch_heads heads: 4 q kv d FLOPs each."""
        if self.flash_attention:
            length = min(q, kv)
            tflops = float(np.interp(np.log2(max(length, 1.0)), FA2_H100_LENGTHS, FA2_H100_TFLOPS))
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
        """Each member keeps 1/g of its nbytes and sends the rest: latency + (g-1)/g nbytes / bandwidth."""
        g = len(group)
        measured = self._fit_s("all_to_all", nbytes, group)
        if measured is not None:
            return measured
        return message_latency_s() + (g - 1) / g * nbytes / self.topology.bandwidth(group)

    def all_reduce_s(self, nbytes: float, group: Sequence[int]) -> float:
        """Ring all-reduce: 2 (g-1) messages, each member sending 2 (g-1)/g nbytes."""
        g = len(group)
        measured = self._fit_s("all_reduce", nbytes, group)
        if measured is not None:
            return measured
        bandwidth = self.topology.bandwidth(group)
        return 2 * (g - 1) * message_latency_s() + 2 * (g - 1) / g * nbytes / bandwidth

    def all_gather_s(self, nbytes: float, group: Sequence[int]) -> float:
        """Ring all-gather of nbytes per member: g-1 messages of nbytes each."""
        g = len(group)
        measured = self._fit_s("all_gather", nbytes, group)
        if measured is not None:
            return measured
        return (g - 1) * (message_latency_s() + nbytes / self.topology.bandwidth(group))

    def send_s(self, nbytes: float, group: Sequence[int]) -> float:
        """One point-to-point message between two members: latency + nbytes / bandwidth."""
        measured = self._fit_s("send_recv", nbytes, group)
        if measured is not None:
            return measured
        return message_latency_s() + nbytes / self.topology.bandwidth(group)


@functools.cache
def gpu_pricing(topology: Topology) -> Pricing:
    """A GPU topology priced by the H100 profile (scaled by peak throughput off H100)."""
    profile = load_profile("h100-vidur")
    is_h100 = topology.gpu.peak_tflops == H100_PEAK_TFLOPS
    return Pricing(topology, profile, H100_PEAK_TFLOPS / topology.gpu.peak_tflops, True, is_h100)


def profile_pricing(topology: Topology, profile: str) -> Pricing:
    """A topology priced by a measured profile of its own device (a CPU profile for local processes)."""
    try:
        loaded = load_profile(profile)
        for op in ("gemm", "norm", "act"):
            loaded.operator(op)
    except ProfileError as exc:
        raise WorkloadError(str(exc)) from None
    return Pricing(topology, loaded, 1.0, False, True)
