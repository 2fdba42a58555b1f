"""Parallel plans for one DiT request, what a denoising step costs under one, and the exhaustive planner.

A plan has xDiT's degrees: CFG parallel (the two guidance passes on different GPUs), PipeFusion (layers in
stages, the image in patches that reuse one-step-stale activations of the others), ring and Ulysses
sequence parallelism (USP), and tensor parallelism. Ranks are laid out as xDiT's rank generator does:
tensor innermost, then Ulysses, ring, PipeFusion, CFG outermost, so the innermost groups are the closest
GPUs. A plan is valid as xDiT requires: the degrees multiply to the GPUs used, Ulysses and tensor degrees
divide the heads, CFG is 2 only for models with CFG, every patch's tokens split evenly over the sequence
degrees, and the memory fits.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from .models import BYTES_PER_PARAM, DiTModel
from .pricing import Pricing

PIPEFUSION_WARMUP_STEPS = 1
"""xDiT's default: the first step runs without stale activations, every stage in turn over the whole image."""
PATCHES_PER_STAGE = (1, 2, 4)
"""PipeFusion patch counts tried: this many patches per pipeline stage."""


@dataclass(frozen=True)
class Request:
    """What one generation asks for."""

    model: DiTModel
    height: int
    width: int
    frames: int
    steps: int

    @property
    def tokens(self) -> int:
        return self.model.image_tokens(self.height, self.width, self.frames)

    @property
    def sequence(self) -> int:
        return self.model.sequence(self.height, self.width, self.frames)

    @property
    def batch(self) -> int:
        """Passes per step: two (with and without the prompt) under classifier-free guidance."""
        return 2 if self.model.cfg else 1


@dataclass(frozen=True)
class Plan:
    """Degrees of each parallel method (their product is the GPUs used) and the GPUs, in rank order."""

    cfg: int
    pipefusion: int
    patches: int
    ring: int
    ulysses: int
    tensor: int
    gpus: tuple[int, ...]

    @property
    def degree(self) -> int:
        return self.cfg * self.pipefusion * self.ring * self.ulysses * self.tensor

    @property
    def label(self) -> str:
        parts = [f"{name}{getattr(self, name)}" for name in reversed(_METHODS) if getattr(self, name) > 1]
        if self.pipefusion > 1:
            parts = [f"{p}/M{self.patches}" if p.startswith("pipefusion") else p for p in parts]
        return "x".join(parts) or "single"

    def groups(self, method: str) -> list[tuple[int, ...]]:
        """Every group of GPUs that communicates for `method` (one of the degree names)."""
        sizes = [getattr(self, name) for name in _METHODS]
        axis = _METHODS.index(method)
        stride = math.prod(sizes[:axis])
        found = []
        for rank in range(self.degree):
            if (rank // stride) % sizes[axis] == 0:
                found.append(tuple(self.gpus[rank + i * stride] for i in range(sizes[axis])))
        return found


@dataclass(frozen=True)
class StepCost:
    """A plan's predicted times and memory for one request."""

    plan: Plan
    compute_s: float
    """Per step, on the busiest GPU."""
    comm_s: float
    """Per step, communication not hidden behind compute."""
    step_s: float
    outside_s: float
    """Once per request, outside the transformer (text encoders, VAE decoding): every plan runs it whole."""
    total_s: float
    """End to end: all steps, PipeFusion's warm-up step and pipeline fill, and the work outside included."""
    memory_bytes: float
    """Per GPU: the transformer's weights it holds and its live activations."""

    @property
    def comm_share(self) -> float:
        return self.comm_s / self.step_s if self.step_s > 0 else 0.0


def step_cost(request: Request, plan: Plan, pricing: Pricing) -> StepCost:
    """Price one denoising step of `request` under `plan` (one doc line per formula below)."""
    m, b = request.model, request.batch / plan.cfg
    u, r, t, p, patches = plan.ulysses, plan.ring, plan.tensor, plan.pipefusion, plan.patches
    seq, h, d, word = request.sequence, m.hidden, m.head_dim, BYTES_PER_PARAM
    local = b * seq / (u * r) / patches  # tokens one GPU computes per patch (CFG share, sequence shard)
    shard = seq / r / patches  # query tokens per patch each GPU attends with after Ulysses' all-to-all
    heads = b * m.heads / (u * t)  # heads each GPU attends over, per pass
    worst = {k: min(plan.groups(k), key=pricing.topology.bandwidth) for k in _METHODS}  # slowest group

    # Linear layers: qkv (h -> 3h/t), output (h/t -> h), MLP up (h -> mlp/t) and down, on local tokens.
    linear = (
        pricing.gemm_s(local, h, 3 * h / t) + pricing.gemm_s(local, h / t, h)
        + pricing.gemm_s(local, h, m.mlp / t) + pricing.gemm_s(local, m.mlp / t, h)
    )  # fmt: skip
    # Two norms over the hidden width and the MLP's activation over its width.
    linear += 2 * pricing.elementwise_s("norm", local, h) + pricing.elementwise_s("act", local, m.mlp / t)
    # Cross-attention models add a query and an output projection and attention over the text tokens.
    if m.text == "cross":
        linear += pricing.gemm_s(local, h, h / t) + pricing.gemm_s(local, h / t, h)
        linear += pricing.attention_s(b * m.heads / t, local / b, m.text_tokens, d)
    # Self-attention: r ring steps, each `shard` queries over `seq / r` keys, for this GPU's heads.
    attention_step = pricing.attention_s(heads, shard, seq / r, d)
    attention = r * attention_step
    comm = 0.0
    # Ulysses: four all-to-alls (q, k, v in; output back) of the local activations, h/t wide.
    if u > 1:
        comm += 4 * pricing.all_to_all_s(local * h / t * word, worst["ulysses"])
    # Ring: r-1 K,V passes, each hidden behind one attention step; the excess and the r-1 merges of
    # partial outputs (read and write of shard x h/(u t)) are exposed.
    if r > 1:
        kv_bytes = 2 * b * shard * h / (u * t) * word
        send = pricing.send_s(kv_bytes, worst["ring"][:2])
        comm += (r - 1) * max(0.0, send - attention_step)
        attention += (r - 1) * pricing.elementwise_s("norm", b * shard, h / (u * t))
    # Tensor parallel: two all-reduces of the local activations per block (after attention and MLP).
    if t > 1:
        comm += 2 * pricing.all_reduce_s(local * h * word, worst["tensor"])
    per_patch = (linear + attention + comm) * m.blocks / p  # one stage's blocks over one patch
    compute = (linear + attention) * m.blocks / p * patches
    exposed = comm * m.blocks / p * patches
    # PipeFusion: each patch's activations go to the next stage, hidden behind that stage's next patch.
    if p > 1:
        hop = pricing.send_s(local * h * word, worst["pipefusion"][:2])
        exposed += patches * max(0.0, hop - per_patch)
    # CFG parallel: the two halves' noise predictions are gathered once per step.
    if plan.cfg > 1:
        latent = request.tokens * m.latent_channels * math.prod(m.patch) * word
        exposed += pricing.all_gather_s(latent, worst["cfg"])
    step = compute + exposed
    # PipeFusion's warm-up steps run each stage in turn over the whole image; the pipeline fills once.
    warmup = min(PIPEFUSION_WARMUP_STEPS, request.steps) if p > 1 else 0
    steps = warmup * p * step + (request.steps - warmup) * step + (p - 1) * per_patch
    # Text encoding and VAE decoding run whole on every rank, as xDiT's pipelines do: no plan divides them.
    outside = m.outside_s(request.height, request.width, request.frames)
    return StepCost(plan, compute, exposed, step, outside, outside + steps, memory_bytes(request, plan))


def memory_bytes(request: Request, plan: Plan) -> float:
    """Per GPU: weights / (pipefusion x tensor) + one block's live activations + the K,V it keeps."""
    m, b = request.model, request.batch / plan.cfg
    u, r, t, p = plan.ulysses, plan.ring, plan.tensor, plan.pipefusion
    seq, h, word = request.sequence, m.hidden, BYTES_PER_PARAM
    local = b * seq / (u * r)
    live = local * (2 * h + (3 * h + m.mlp) / t) * word  # residual, normed input, qkv, MLP hidden
    kv = 2 * b * (seq / r) * h / (u * t) * word  # the keys and values one attention reads
    stale = kv * m.blocks / p if p > 1 else 0.0  # PipeFusion keeps every block's stale K,V
    ring_buffers = kv if r > 1 else 0.0  # the chunk in flight beside the one in use
    return m.weight_bytes / (p * t) + live + kv + stale + ring_buffers


_METHODS = ("tensor", "ulysses", "ring", "pipefusion", "cfg")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def plans(request: Request, gpus: Sequence[int], pricing: Pricing | None = None) -> Iterator[Plan]:
    """Every valid plan over exactly these GPUs (memory is checked when a pricing is given)."""
    n, m = len(gpus), request.model
    _, rows, columns = m.grid(request.height, request.width, request.frames)
    frames = request.tokens // (rows * columns)
    for cfg in (1, 2) if m.cfg else (1,):
        for pipefusion, ring, ulysses, tensor in itertools.product(_divisors(n), repeat=4):
            if cfg * pipefusion * ring * ulysses * tensor != n or m.heads % (ulysses * tensor):
                continue
            if pipefusion > m.blocks:
                continue
            for per_stage in PATCHES_PER_STAGE if pipefusion > 1 else (1,):
                patches = pipefusion * per_stage
                if rows % patches or (frames * rows // patches * columns) % (ulysses * ring):
                    continue
                plan = Plan(cfg, pipefusion, patches, ring, ulysses, tensor, tuple(gpus))
                if pricing is None or memory_bytes(request, plan) <= pricing.topology.gpu.memory_bytes:
                    yield plan


def ranked(request: Request, gpus: Sequence[int], pricing: Pricing) -> list[StepCost]:
    """Every valid plan on these GPUs, priced, fastest end to end first (the exhaustive optimum first)."""
    costs = [step_cost(request, plan, pricing) for plan in plans(request, gpus, pricing)]
    return sorted(costs, key=lambda c: (c.total_s, c.plan.label))
