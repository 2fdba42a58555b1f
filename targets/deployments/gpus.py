"""The GPUs a deployment runs on: what their datasheets and their attention kernels' papers say.

Every figure is cited where it is defined. Where a figure is our assumption rather than a measurement, it
says so; the published end-to-end measurements in bench/deployments_check.py are what checks them.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9
MIB = 2**20


@dataclass(frozen=True)
class GPU:
    """One GPU kind: its memory and bandwidths, and what its attention kernels reach."""

    name: str
    memory_bytes: float
    hbm_bytes_s: float
    """Datasheet HBM bandwidth."""
    profile: str
    """The shipped operator profile of this GPU (projections, MLP, norms and NCCL collectives measured)."""
    attention_flops_s: float
    """What a prefill attention kernel reaches on this GPU, BF16, head dim 128, causal."""
    streaming_share: float
    """The share of the HBM bandwidth reached streaming weights and KV (decode): our assumption."""
    host_bytes_s: float
    """Host memory to GPU, one direction."""
    disk_bytes_s: float
    """An NVMe drive per GPU, sequential read."""
    source: str


STREAMING_SHARE = 0.8
"""Decode reads every weight and every cached key and value once per iteration; well-tuned kernels stream
them at most of the datasheet bandwidth, not all of it. 0.8 is our assumption, checked end to end against
published decode latencies (docs/targets/deployments.md)."""

H100_SXM = GPU(
    name="H100 SXM5 80GB",
    memory_bytes=81_559 * MIB,  # datasheet: 80 GB HBM3; nvidia-smi reports 81,559 MiB on an H100 80GB HBM3
    hbm_bytes_s=3.35e12,  # ibid.: 3.35 TB/s (SXM5)
    profile="h100-vidur-llama2",  # Vidur's H100 operators of Llama-2-7B and -70B, one fit across both
    # FlashAttention-3 (Shah et al., 2024, arXiv:2407.08608): BF16 forward up to 740 TFLOPS (75 % of the
    # peak); causal at head dim 128 its figure shows about 600 TFLOPS at the longer sequence lengths
    attention_flops_s=600e12,
    streaming_share=STREAMING_SHARE,
    # vLLM's KV offloading measured one-way DMA between pinned host memory and an H100 80GB HBM3 at about
    # 50 GB/s ("Inside vLLM's New KV Offloading Connector", vLLM blog, 2026-01-08)
    host_bytes_s=50 * GB,
    disk_bytes_s=13 * GB,  # Samsung PM1743 (PCIe 5.0 x4), its rated sequential read (December 2021)
    source="NVIDIA H100 datasheet; FlashAttention-3 (arXiv:2407.08608); vLLM blog 2026-01-08; Samsung PM1743",
)

A100_SXM = GPU(
    name="A100 SXM4 80GB",
    memory_bytes=81_920 * MIB,  # datasheet: 80 GB HBM2e; nvidia-smi reports 81,920 MiB on an A100-SXM4-80GB
    hbm_bytes_s=2.039e12,  # ibid.: 2,039 GB/s (SXM4 80GB)
    profile="a100-vidur-llama3",  # Vidur's A100 operators of Llama-3-8B and -70B, one fit across both
    # FlashAttention-2 (Dao, 2023, arXiv:2307.08691): forward up to 230 TFLOPS on an A100 (73 % of the
    # peak); causal at head dim 128 its figure shows about 190 TFLOPS at the longer sequence lengths
    attention_flops_s=190e12,
    streaming_share=STREAMING_SHARE,
    host_bytes_s=25
    * GB,  # PCIe Gen4 x16: 32 GB/s a direction (A100 datasheet: 64 GB/s both ways), 80 % of it
    disk_bytes_s=7 * GB,  # a PCIe 4.0 x4 NVMe drive, e.g. Samsung PM1733: 7 GB/s sequential read
    source="NVIDIA A100 datasheet; FlashAttention-2 (arXiv:2307.08691); PCIe Gen4; Samsung PM1733",
)
