"""GPU clusters: GPUs per socket and node, the links between them, and which links a group of GPUs spans.

Bandwidths are vendor specifications, per direction and per GPU unless a link is shared:
- NVLink 4 on H100 SXM: 900 GB/s bidirectional per GPU (NVIDIA H100 datasheet), 450 GB/s each way, every
  pair of a node's 8 GPUs at full rate through NVSwitch (DGX H100).
- NVLink 4 on H20: 900 GB/s bidirectional per GPU (NVIDIA H20 datasheet), as on H100.
- NVLink 3 on A100 SXM: 600 GB/s bidirectional per GPU (NVIDIA A100 datasheet), 300 GB/s each way.
- PCIe Gen4 x16 on L40 and L20: 64 GB/s bidirectional (NVIDIA L40, L20 datasheets), 32 GB/s each way; GPUs
  under one socket's PCIe switch talk at that rate.
- PCIe Gen5 x16 on H100 PCIe: 128 GB/s bidirectional (NVIDIA H100 PCIe datasheet), 64 GB/s each way.
- Across the two sockets, GPU peer traffic crosses the CPUs' UPI link: 11.2 GT/s x 2 bytes = 22.4 GB/s each
  way per link (Intel Xeon Scalable 3rd gen specification), shared by the GPUs sending across it. A PCIe
  Gen5 box is assumed to have 4th gen Xeon hosts (the first with PCIe Gen5), whose UPI 2.0 runs at 16 GT/s:
  32 GB/s each way (Intel Xeon Scalable 4th gen specification).
- Between nodes: 400 Gb/s (50 GB/s each way) per node (NVIDIA ConnectX-7 NDR), shared by the node's GPUs.
NCCL moves data at a share of a link's line rate: "with the protocol overhead (~20%) NCCL can get an
effective NVLink bandwidth of 370GB/s" of NVLink 4's 450 (S. Jeaugey, NVIDIA/nccl-tests issue 212); that
share is applied to every link (measured on NVLink only: an assumption elsewhere). A launch costs what a
measured NCCL send/recv costs on H100 before its bytes (the h100-vidur profile's fit, 7.6 us), on every link:
software, not wire time, dominates small messages.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from targets.base import WorkloadError
from targets.costmodel.model import load_profile

GB = 1e9
NCCL_EFFICIENCY = 370 / 450
"""The share of a link's line rate NCCL's protocols reach (nccl-tests issue 212, NVLink 4)."""


@dataclass(frozen=True)
class GPU:
    """One accelerator: its memory, peak dense bf16 tensor throughput, memory bandwidth and float32 throughput
    (datasheets)."""

    name: str
    memory_bytes: float
    peak_tflops: float
    memory_tbps: float
    """Its DRAM's bandwidth, TB/s: what paces a norm or an activation, which only streams data."""
    fp32_tflops: float = 0.0
    """Peak float32 throughput of its CUDA cores, TFLOPS: what paces a float32 matrix product, since PyTorch
    leaves TF32 off for matmuls (torch.backends.cuda.matmul.allow_tf32 defaults to False since 1.12). 0 for a
    device that is not a GPU: its float32 products are priced by its profile's GEMM fit."""


H100 = GPU("H100 SXM 80GB", 80e9, 989.0, 3.35, 67.0)
"""NVIDIA H100 SXM datasheet: 80 GB HBM3 at 3.35 TB/s, 989 TFLOPS dense BF16, 67 TFLOPS FP32."""
H100_PCIE = GPU("H100 PCIe 80GB", 80e9, 756.0, 2.0, 51.0)
"""NVIDIA H100 PCIe datasheet: 80 GB HBM2e at 2.0 TB/s, 756 TFLOPS dense BF16 (1,513 with sparsity), 51
TFLOPS FP32."""
H20 = GPU("H20 96GB", 96e9, 148.0, 4.0, 44.0)
"""NVIDIA H20 datasheet: 96 GB HBM3 at 4.0 TB/s, 148 TFLOPS dense BF16, 44 TFLOPS FP32."""
A100 = GPU("A100 SXM 80GB", 80e9, 312.0, 2.039, 19.5)
"""NVIDIA A100 datasheet: 80 GB HBM2e at 2,039 GB/s, 312 TFLOPS dense BF16, 19.5 TFLOPS FP32."""
L40 = GPU("L40 48GB", 48e9, 181.0, 0.864, 90.5)
"""NVIDIA L40 datasheet: 48 GB GDDR6 at 864 GB/s, 181 TFLOPS dense BF16, 90.5 TFLOPS FP32."""
L20 = GPU("L20 48GB", 48e9, 119.5, 0.864, 59.8)
"""NVIDIA L20: 48 GB GDDR6 at 864 GB/s, 59.8 TFLOPS FP32 (datasheet), 119.5 TFLOPS dense FP16 (as xDiT's
docs/performance/hunyuandit.md states it)."""


@dataclass(frozen=True)
class Link:
    """A kind of connection: its bandwidth each way, and whether the GPUs crossing it share that."""

    name: str
    bandwidth: float
    """Bytes per second, each way."""
    shared: bool


NVLINK4 = Link("NVLink 4", 450 * GB, False)
NVLINK3 = Link("NVLink 3", 300 * GB, False)
PCIE4 = Link("PCIe Gen4 x16", 32 * GB, False)
PCIE5 = Link("PCIe Gen5 x16", 64 * GB, False)
UPI = Link("UPI (cross-socket)", 22.4 * GB, True)
UPI2 = Link("UPI 2.0 (cross-socket)", 32 * GB, True)
NETWORK = Link("400 Gb/s network", 50 * GB, True)


@functools.cache
def message_latency_s() -> float:
    """Seconds a collective launch costs before its bytes: the launch term of H100 NCCL send/recv."""
    return load_profile("h100-vidur").collectives["send_recv"][2].coef[0] / 1e3


@dataclass(frozen=True)
class Topology:
    """Nodes of sockets of GPUs; GPUs are numbered socket by socket, node by node."""

    name: str
    gpu: GPU
    gpus_per_socket: int
    sockets_per_node: int
    nodes: int
    socket_link: Link
    """Between GPUs under one socket (NVSwitch nodes count as one socket)."""
    node_link: Link
    """Between sockets of one node."""
    doc: str

    @property
    def gpus_per_node(self) -> int:
        return self.gpus_per_socket * self.sockets_per_node

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    def socket_of(self, gpu: int) -> int:
        return gpu // self.gpus_per_socket

    def node_of(self, gpu: int) -> int:
        return gpu // self.gpus_per_node

    def bandwidth(self, group: Sequence[int]) -> float:
        """Bytes per second each member can send to the others at once: the slowest level the group
        spans, a shared link divided among the members behind it."""
        sockets = {self.socket_of(g) for g in group}
        nodes = {self.node_of(g) for g in group}
        rate = self.socket_link.bandwidth
        if len(sockets) > 1:
            behind = max(sum(1 for g in group if self.socket_of(g) == s) for s in sockets)
            rate = min(rate, self.node_link.bandwidth / (behind if self.node_link.shared else 1))
        if len(nodes) > 1:
            behind = max(sum(1 for g in group if self.node_of(g) == n) for n in nodes)
            rate = min(rate, NETWORK.bandwidth / behind)
        return rate

    def effective_bandwidth(self, group: Sequence[int]) -> float:
        """Bytes per second NCCL moves for each member: the line rate at NCCL's protocol efficiency."""
        return self.bandwidth(group) * NCCL_EFFICIENCY

    def span(self, group: Sequence[int]) -> str:
        """The slowest kind of link the group spans, in words."""
        if len({self.node_of(g) for g in group}) > 1:
            return NETWORK.name
        if len({self.socket_of(g) for g in group}) > 1:
            return self.node_link.name
        return self.socket_link.name if len(group) > 1 else "-"

    def within_nvlink_node(self, group: Sequence[int]) -> bool:
        """True when the group lies in one node whose GPUs all share one NVLink switch."""
        return self.sockets_per_node == 1 and len({self.node_of(g) for g in group}) == 1

    def check_gpus(self, count: int) -> None:
        if not 1 <= count <= self.gpus:
            raise WorkloadError(f"topology {self.name} has {self.gpus} GPUs; cannot use {count}")


def _nvlink(name: str, gpu: GPU, link: Link, nodes: int, doc: str) -> Topology:
    return Topology(name, gpu, 8, 1, nodes, link, link, doc)


def _pcie(name: str, gpu: GPU, nodes: int, doc: str, socket: Link = PCIE4, node: Link = UPI) -> Topology:
    return Topology(name, gpu, 4, 2, nodes, socket, node, doc)


TOPOLOGIES: dict[str, Topology] = {
    t.name: t
    for t in (
        _nvlink("h100-nvlink", H100, NVLINK4, 1, "8 H100 SXM on NVLink 4 / NVSwitch (a DGX H100)"),
        _nvlink("a100-nvlink", A100, NVLINK3, 1, "8 A100 SXM on NVLink 3 / NVSwitch (a DGX A100)"),
        _pcie("l40-pcie", L40, 1, "8 L40 on PCIe Gen4, 4 per socket, two sockets joined by UPI"),
        _nvlink("h20-nvlink", H20, NVLINK4, 1, "8 H20 on NVLink 4 / NVSwitch"),
        _pcie(
            "h100-pcie",
            H100_PCIE,
            1,
            "8 H100 PCIe on PCIe Gen5, 4 per socket, two sockets joined by UPI 2.0",
            PCIE5,
            UPI2,
        ),
        _pcie("l20-pcie", L20, 1, "8 L20 on PCIe Gen4, 4 per socket, two sockets joined by UPI"),
        _nvlink("h100-nvlink-x2", H100, NVLINK4, 2, "2 nodes of 8 H100 (NVLink) over a 400 Gb/s network"),
        _nvlink("h100-nvlink-x4", H100, NVLINK4, 4, "4 nodes of 8 H100 (NVLink) over a 400 Gb/s network"),
        _nvlink("a100-nvlink-x2", A100, NVLINK3, 2, "2 nodes of 8 A100 (NVLink) over a 400 Gb/s network"),
        _pcie("l40-pcie-x2", L40, 2, "2 nodes of 8 L40 (PCIe, two sockets) over a 400 Gb/s network"),
    )
}


def topology(name: str) -> Topology:
    """The topology called `name`; WorkloadError names the known ones."""
    try:
        return TOPOLOGIES[name]
    except KeyError:
        raise WorkloadError(f"unknown topology {name!r}; topologies: {', '.join(TOPOLOGIES)}") from None
