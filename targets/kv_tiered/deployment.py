"""What a tier's hit is worth: named deployments that price prefill and the loads that replace it.

A deployment is a model served on H100s, with host memory behind each GPU's PCIe link and an NVMe drive
per GPU. Every constant is cited beside it:
- model shapes from the models' config.json files on the Hugging Face hub (meta-llama/Meta-Llama-3-8B and
  meta-llama/Meta-Llama-3-70B: hidden_size, intermediate_size, num_attention_heads, num_key_value_heads,
  num_hidden_layers, vocab_size; torch_dtype bfloat16, 2 bytes a value);
- prefill time from the shipped `h100-vidur` profile, fits of Vidur's measured H100 operator and NCCL
  timings (targets/costmodel/vidur.py). Vidur's data holds no attention kernel, so attention's two products
  are priced at the profile's measured GEMM cost per multiply-accumulate (FlashAttention-3 runs them at
  about 75 % of H100's peak, close to the large GEMMs': Shah et al., 2024), a lower bound on its time;
- host to GPU at 50 GB/s a direction: vLLM's KV offloading measured one-way DMA between pinned host memory
  and an H100 80GB HBM3 at about 50 GB/s ("Inside vLLM's New KV Offloading Connector", vLLM blog,
  2026-01-08), below the 64 GB/s a direction of PCIe Gen5 x16 (H100 datasheet: 128 GB/s both ways);
- NVMe reads at 13 GB/s: Samsung PM1743 (PCIe 5.0 x4), its rated sequential read (Samsung, December 2021).

Loads are priced serially before the prefill of what was not reused (no layer-by-layer overlap as HiCache
and LMCache do, so a load costs its whole transfer), and a disk block crosses the drive and then the PCIe
link. Writes to the lower tiers are off the request's path (asynchronous in HiCache, LMCache and vLLM) and
cost it nothing. With tensor parallelism each GPU holds its heads' share of every block and loads it over
its own link from its own drive, in parallel with the others.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from targets.base import Command, CommandResult, Option
from targets.costmodel.model import CostModel
from targets.costmodel.shapes import ModelShape
from targets.kv.trace import Trace

LLAMA3_8B = ModelShape(
    "llama3-8b", layers=32, hidden=4096, heads=32, head_dim=128, ffn=14336, vocab=128256, kv_heads=8
)
LLAMA3_70B = ModelShape(
    "llama3-70b", layers=80, hidden=8192, heads=64, head_dim=128, ffn=28672, vocab=128256, kv_heads=8
)
BF16_BYTES = 2
HOST_GB_S = 50.0
NVME_GB_S = 13.0
MACS_TERM = "macs"
"""The GEMM fit's term whose coefficient is the measured cost of one multiply-accumulate."""


@dataclass(frozen=True)
class Deployment:
    """A model on `tensor_parallel` GPUs of a profiled kind, each with a host link and a drive."""

    name: str
    model: ModelShape
    tensor_parallel: int
    profile: str
    host_gb_s: float = HOST_GB_S
    disk_gb_s: float = NVME_GB_S
    value_bytes: int = BF16_BYTES

    @property
    def shard(self) -> ModelShape:
        """The model as one GPU of a tensor-parallel group holds it: its share of heads, MLP, vocabulary."""
        tp, m = self.tensor_parallel, self.model
        return replace(
            m,
            heads=m.heads // tp,
            kv_heads=(m.kv_heads or m.heads) // tp,
            ffn=m.ffn // tp,
            vocab=m.vocab // tp,
        )

    def kv_bytes_per_token(self) -> float:
        """Keys and values of one token in every layer, as one GPU holds them (its share of the heads)."""
        return 2.0 * self.model.layers * self.shard.kv_width * self.value_bytes

    def load_ms(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Time to bring blocks of `tokens` tokens back into GPU memory: from host memory, and from disk."""
        gb = np.asarray(tokens, dtype=np.float64) * self.kv_bytes_per_token() / 1e9
        host = gb / self.host_gb_s * 1e3
        return host, gb / self.disk_gb_s * 1e3 + host

    def prefill_ms(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> np.ndarray:
        """Time to prefill `new_tokens` tokens of a prompt over `cached_tokens` cached before them (arrays
        broadcast): every layer's work on them (compute_ms) and the head over the last token."""
        cost = _cost_model(self.profile, self.shard)
        q = np.asarray(new_tokens, dtype=np.float64)
        return self.compute_ms(q, cached_tokens) + cost.head_ms(np.ones_like(q))

    def compute_ms(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> np.ndarray:
        """Every layer's work on `new_tokens` tokens over `cached_tokens` cached before them: projections,
        MLP and attention, and the all-reduces of tensor parallelism."""
        cost = _cost_model(self.profile, self.shard)
        q = np.asarray(new_tokens, dtype=np.float64)
        ctx = np.asarray(cached_tokens, dtype=np.float64)
        layers = self.model.layers
        total = cost.linear_ms(q) + layers * self._attention_ms(cost, q, ctx)
        if self.tensor_parallel > 1:  # one all-reduce after attention and one after the MLP, each layer
            reduce = cost.profile.collectives["all_reduce"][self.tensor_parallel]
            total = total + 2 * layers * reduce.predict(bytes=q * self.model.hidden * self.value_bytes)
        return total

    def _attention_ms(self, cost: CostModel, q: np.ndarray, ctx: np.ndarray) -> np.ndarray:
        """One layer's causal attention of q new tokens over ctx cached ones on one GPU."""
        if "attn_prefill" in cost.profile.operators:
            return cost.attn_prefill_ms(q, ctx) / self.model.layers
        gemm = cost.profile.operator("gemm")
        per_mac = gemm.coef[gemm.terms.index(MACS_TERM)]
        scores = q * (ctx + (q + 1.0) / 2.0)  # query-key pairs a causal mask keeps
        return 2.0 * cost.model.heads * cost.model.head_dim * scores * per_mac  # QK^T, then PV

    def request_costs(self, trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per request and reused prefix, and per block, what the mechanism weighs: `prefill[offsets[r] + r +
        i]` the prefill of request r with its first i blocks reused (a prompt reused whole still computes its
        last block, as vLLM does), and each block's compute time over its prefix and its load times from host
        memory and from disk."""
        return _request_costs(self, trace)


@functools.lru_cache(maxsize=8)
def _cost_model(profile: str, shard: ModelShape) -> CostModel:
    return CostModel.load(profile, shard)


@functools.lru_cache(maxsize=8)
def _request_costs(
    deployment: Deployment, trace: Trace
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    lengths = np.diff(trace.offsets)
    reused = np.concatenate([np.minimum(np.arange(n + 1), max(n - 1, 0)) for n in lengths])
    request = np.repeat(np.arange(trace.n_requests), lengths + 1)
    tokens = np.concatenate(([0], np.cumsum(trace.block_tokens[trace.blocks])))
    start = tokens[trace.offsets[:-1]]
    cached = (tokens[trace.offsets[request] + reused] - start[request]).astype(np.float64)
    new = np.maximum(trace.input_tokens[request] - cached, 1.0)
    prefill = deployment.prefill_ms(new, cached)

    block_tokens = trace.block_tokens.astype(np.float64)
    prefix = np.zeros(trace.n_blocks)
    for b in range(trace.n_blocks):  # dense ids are in first-seen order: a parent comes before its children
        p = trace.parent[b]
        prefix[b] = block_tokens[b] + (prefix[p] if p >= 0 else 0.0)
    recompute = deployment.compute_ms(block_tokens, prefix - block_tokens)
    host, disk = deployment.load_ms(block_tokens)
    return prefill, recompute, host, disk


DEPLOYMENTS = {
    d.name: d
    for d in (
        Deployment("llama3-8b-h100", LLAMA3_8B, tensor_parallel=1, profile="h100-vidur"),
        Deployment("llama3-70b-4xh100", LLAMA3_70B, tensor_parallel=4, profile="h100-vidur"),
    )
}
"""The deployments a tiered cache is priced for: Llama-3-8B on one H100, Llama-3-70B on four (tensor
parallel), each GPU with its host link and drive as above."""
DEFAULT_DEPLOYMENT = "llama3-8b-h100"


def costs(values: Mapping[str, Any]) -> CommandResult:
    """Each deployment's price of a block: its bytes, loading it from host memory or disk, computing it."""
    tokens, context = float(values.get("tokens") or 512), float(values.get("context") or 16384)
    rows = []
    for d in DEPLOYMENTS.values():
        host, disk = (float(x[0]) for x in d.load_ms(np.array([tokens])))
        near, far = (float(d.compute_ms(np.array([tokens]), np.array([c]))[0]) for c in (0.0, context))
        rows.append(
            {
                "deployment": d.name,
                "GPUs": d.tensor_parallel,
                "MiB per GPU": round(tokens * d.kv_bytes_per_token() / 2**20, 3),
                "host load ms": round(host, 3),
                "disk load ms": round(disk, 3),
                "compute ms, first": round(near, 3),
                f"compute ms, after {context:g}": round(far, 3),
            }
        )
    title = f"a block of {tokens:g} tokens: its KV bytes on each GPU, loading it back, computing it again"
    return CommandResult(title, tuple(rows[0]), rows, rows)


COMMANDS = (
    Command(
        "costs",
        "what each deployment charges for a block: KV bytes per GPU, its load from host memory and from "
        "disk, and computing it first in a prompt or after a long cached context",
        (
            Option("tokens", "int", 512, "tokens in the block", low=1),
            Option(
                "context", "int", 16384, "cached tokens before the block, for the second compute time", low=0
            ),
        ),
        costs,
    ),
)
