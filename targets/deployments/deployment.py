"""A deployment: a model served on tensor-parallel GPUs of one kind, priced from measurements and papers.

It answers what every LLM target asks of the hardware: the weights each GPU holds, the KV bytes of a token
(grouped-query attention counted), the KV blocks that fit beside the weights and the activations at the
engine's memory fraction, and the time of any iteration, a mix of prefill chunks and decodes:
- projections, MLP, norms and the all-reduces of tensor parallelism from the GPU's profile, fits of
  Vidur's measured operators and NCCL collectives (targets/costmodel/vidur.py);
- attention from published kernel figures (targets/deployments/gpus.py): prefill at the FLOP rate its
  kernel paper reports, decode and the cached keys a prefill reads at the GPU's streaming bandwidth;
- no iteration faster than streaming the GPU's weights and the keys and values it reads from HBM;
- a per-iteration engine overhead (scheduling, sampling, launches), where published figures show one.
A profile measured on a GPU (`crucible profile --device cuda --deployment NAME`) holds attention fits of
its own, which then replace the published ones: the same code prices a measured deployment.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from targets.costmodel.model import OPERATORS, PASS, CostModel, Fit, load_profile
from targets.costmodel.shapes import ModelShape

from .gpus import GPU

GIB = 2**30
MEMORY_FRACTION = 0.9
"""The share of GPU memory the engine takes for weights, activations and the KV pool: vLLM's default
`gpu_memory_utilization` (SGLang's `mem_fraction_static` is 0.88 at TP 1 and 0.85 at TP 4, per its
benchmark/benchmark_vllm_060/README.md)."""
RESERVED_BYTES = 1.5 * GIB
"""CUDA context, CUDA graphs and the allocator's slack per GPU, outside the activations: our assumption
(vLLM profiles this memory at start-up; about 1 to 2 GiB is what its logs show for 8B-70B models)."""
ATTENTION_LAUNCH_MS = 0.005
"""A few microseconds per attention kernel in a layer: launch and the partial-result merge."""
GEMM_MACS = "macs"


@dataclass(frozen=True)
class Deployment:
    """`model` on `tensor_parallel` GPUs of kind `gpu`."""

    name: str
    model: ModelShape
    gpu: GPU
    tensor_parallel: int = 1
    overhead_ms: float = 0.0
    """The engine's own time per iteration beyond the kernels (scheduling, launches)."""
    overhead_per_sequence_ms: float = 0.0
    """The engine's own time per sequence in an iteration (its bookkeeping, sampling, detokenising)."""
    profile: str = ""
    """The operator profile, a shipped name or a file; empty: the GPU's shipped one."""
    attention: str = "published"
    """"published": attention priced from the GPU's kernel figures unless the profile measured it;
    "gemm-macs": at the GEMM fit's cost per multiply-accumulate (kv-tiered's first pricing)."""
    memory_fraction: float = MEMORY_FRACTION
    value_bytes: int = 2
    """BF16 weights, activations and KV cache."""
    note: str = ""

    @property
    def shard(self) -> ModelShape:
        """The model as one GPU of the tensor-parallel group holds it: its share of heads, MLP, vocabulary."""
        tp, m = self.tensor_parallel, self.model
        return replace(
            m,
            heads=m.heads // tp,
            kv_heads=max((m.kv_heads or m.heads) // tp, 1),
            ffn=m.ffn // tp,
            vocab=m.vocab // tp,
        )

    @property
    def profile_name(self) -> str:
        return self.profile or self.gpu.profile

    def parameters(self) -> int:
        """The model's parameters: embeddings and LM head (untied), and per layer attention, MLP and norms."""
        m = self.model
        per_layer = m.hidden * (m.heads * m.head_dim + 2 * m.kv_width) + m.heads * m.head_dim * m.hidden
        per_layer += 3 * m.hidden * m.ffn + 2 * m.hidden
        return 2 * m.vocab * m.hidden + m.layers * per_layer + m.hidden

    def weight_bytes(self) -> float:
        """Weights one GPU holds (tensor parallelism splits every matrix, embeddings and head included)."""
        return self.parameters() * self.value_bytes / self.tensor_parallel

    def kv_bytes_per_token(self) -> float:
        """Keys and values of one token in every layer, as one GPU holds them (its share of the KV heads)."""
        return 2.0 * self.model.layers * self.shard.kv_width * self.value_bytes

    def activation_bytes(self, token_budget: int, max_seqs: int) -> float:
        """Peak activations of an iteration at the engine's token budget: one layer's widest intermediates
        (the gated MLP's two halves, the QKV output, the residual) for every token, and float32 logits of
        every sequence's sampled row."""
        s = self.shard
        widest = 2 * s.ffn + s.heads * s.head_dim + 2 * s.kv_width + 2 * s.hidden
        return token_budget * widest * self.value_bytes + max_seqs * s.vocab * 4.0

    def kv_blocks(self, block_tokens: int, token_budget: int, max_seqs: int) -> int:
        """KV blocks of `block_tokens` tokens that fit on each GPU beside the weights and activations."""
        room = self.gpu.memory_bytes * self.memory_fraction - self.weight_bytes() - RESERVED_BYTES
        room -= self.activation_bytes(token_budget, max_seqs)
        return max(int(room // (self.kv_bytes_per_token() * block_tokens)), 0)

    def memory(
        self, block_tokens: int = 16, token_budget: int = 8192, max_seqs: int = 256
    ) -> dict[str, float]:
        """The memory arithmetic, per GPU, in GiB, and the blocks it leaves."""
        return {
            "GPU GiB": self.gpu.memory_bytes / GIB,
            "fraction": self.memory_fraction,
            "weights GiB": self.weight_bytes() / GIB,
            "activations GiB": (self.activation_bytes(token_budget, max_seqs) + RESERVED_BYTES) / GIB,
            "KV KiB per token": self.kv_bytes_per_token() / 2**10,
            "KV blocks": float(self.kv_blocks(block_tokens, token_budget, max_seqs)),
            "KV tokens": float(self.kv_blocks(block_tokens, token_budget, max_seqs) * block_tokens),
        }

    def cost_model(self) -> CostModel:
        """The iteration pricing the simulators read (CostModel's interface), built once per process."""
        return _cost_model(self)

    def load_ms(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Time to bring blocks of `tokens` tokens back into GPU memory: from host memory, and from disk
        (a disk block crosses the drive, then the host link; each GPU loads its own share in parallel)."""
        gb = np.asarray(tokens, dtype=np.float64) * self.kv_bytes_per_token()
        host = gb / self.gpu.host_bytes_s * 1e3
        return host, gb / self.gpu.disk_bytes_s * 1e3 + host

    def prefill_ms(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> np.ndarray:
        """Time to prefill `new_tokens` tokens of a prompt over `cached_tokens` cached before them (arrays
        broadcast): every layer's work on them (compute_ms) and the head over the last token."""
        cost = self.cost_model()
        q = np.asarray(new_tokens, dtype=np.float64)
        return self.compute_ms(q, cached_tokens) + cost.head_ms(np.ones_like(q))

    def compute_ms(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> np.ndarray:
        """Every layer's work on `new_tokens` tokens over `cached_tokens` cached before them: projections,
        MLP and attention, and the all-reduces of tensor parallelism."""
        cost = self.cost_model()
        q = np.asarray(new_tokens, dtype=np.float64)
        ctx = np.asarray(cached_tokens, dtype=np.float64)
        layers = self.model.layers
        total = replace(cost, tensor_parallel=1).linear_ms(q) + layers * self._attention_ms(cost, q, ctx)
        if self.tensor_parallel > 1:  # one all-reduce after attention and one after the MLP, each layer
            reduce = cost.profile.collectives["all_reduce"][self.tensor_parallel]
            total = total + 2 * layers * reduce.predict(bytes=q * self.model.hidden * self.value_bytes)
        return total

    def _attention_ms(self, cost: CostModel, q: np.ndarray, ctx: np.ndarray) -> np.ndarray:
        """One layer's causal attention of q new tokens over ctx cached ones on one GPU."""
        if "attn_prefill" in cost.profile.operators:
            return cost.attn_prefill_ms(q, ctx) / self.model.layers
        gemm = cost.profile.operator("gemm")
        per_mac = gemm.coef[gemm.terms.index(GEMM_MACS)]
        scores = q * (ctx + (q + 1.0) / 2.0)  # query-key pairs a causal mask keeps
        return 2.0 * cost.model.heads * cost.model.head_dim * scores * per_mac  # QK^T, then PV


@functools.lru_cache(maxsize=16)
def _cost_model(deployment: Deployment) -> CostModel:
    """The profile with what it lacks filled in from published figures, over one GPU's share."""
    profile = load_profile(deployment.profile_name)
    operators = dict(profile.operators)
    shard, gpu = deployment.shard, deployment.gpu
    stream = gpu.hbm_bytes_s * gpu.streaming_share / 1e3  # bytes per ms
    if deployment.attention == "published":
        kv_share = shard.kv_width / (shard.heads * shard.head_dim)  # the terms count query width
        kv_ms = 2 * deployment.value_bytes * kv_share / stream  # keys and values of one width element
        flop_ms = 1e3 / gpu.attention_flops_s
        published = {
            # launch, tiles, macs (QK^T and PV: 2 MACs of 2 FLOPs a pair and element), kv_read, kv_written
            "attn_prefill": (ATTENTION_LAUNCH_MS, 0.0, 4.0 * flop_ms, kv_ms, kv_ms),
            # launch, sequences, kv_elements: every cached key and value read once
            "attn_decode": (ATTENTION_LAUNCH_MS, 0.0, kv_ms),
        }
        for op, coef in published.items():
            if op not in operators:
                keys, terms, features = OPERATORS[op]
                operators[op] = Fit(terms, coef, (), keys, features)
    overheads = (deployment.overhead_ms, deployment.overhead_per_sequence_ms)
    if PASS not in operators and any(overheads):
        keys, terms, features = OPERATORS[PASS]
        operators[PASS] = Fit(terms, (1.0, overheads[0], 0.0, overheads[1]), (), keys, features)
    streaming = (0.0, 0.0)
    if deployment.attention == "published":
        streaming = (deployment.weight_bytes() / stream, deployment.kv_bytes_per_token() / stream)
    priced = replace(profile, operators=operators)
    return CostModel(priced, shard, deployment.tensor_parallel, streaming)


def describe(
    deployment: Deployment, block_tokens: int = 16, token_budget: int = 8192, max_seqs: int = 256
) -> dict[str, Any]:
    """A deployment as `crucible deployments` lists it: its memory arithmetic, what one decode iteration (32
    sequences at 1,000 cached tokens) and one prefill (a new 1,000-token prompt) cost where it prices whole
    iterations, and where its figures come from."""
    serving = deployment.attention == "published"
    cost = deployment.cost_model() if serving else None
    return {
        "deployment": deployment.name,
        "model": deployment.model.name,
        "GPUs": f"{deployment.tensor_parallel} x {deployment.gpu.name}",
        "profile": deployment.profile_name,
        "attention": deployment.attention,
        "overhead ms": deployment.overhead_ms,
        **deployment.memory(block_tokens, token_budget, max_seqs),
        "decode ms": cost.iteration_ms([], [], [1000] * 32) if cost else None,
        "prefill ms": cost.iteration_ms([1000], [0], []) if cost else None,
        "sources": deployment.gpu.source,
        "note": deployment.note,
    }
