"""Parallel plans for one DiT request: which are valid, and what each holds in a GPU's memory.

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

PATCHES_PER_STAGE = (1, 2, 4)
"""PipeFusion patch counts tried: this many patches per pipeline stage (xDiT's default is one)."""


@dataclass(frozen=True)
class Request:
    """What one generation asks for."""

    model: DiTModel
    height: int
    width: int
    frames: int
    steps: int
    compiled: bool = False
    """Run under torch.compile, which fuses the elementwise work between the matrix products (xDiT's
    --use_torch_compile); eager PyTorch, xDiT's default, launches each elementwise operation on its own."""

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
class Memory:
    """What one GPU holds under a plan, in bytes."""

    weights: float
    """The transformer's weights it keeps: a 1 / (pipefusion x tensor) share."""
    activations: float
    """One block's live activations over its tokens: residual, normed input, q/k/v, the MLP's hidden."""
    kv: float
    """The keys and values one attention reads."""
    stale_kv: float
    """PipeFusion: every block of its stage keeps the whole image's K,V from the previous step."""
    ring_buffer: float
    """Ring attention: the K,V chunk in flight beside the one in use."""

    @property
    def total(self) -> float:
        return self.weights + self.activations + self.kv + self.stale_kv + self.ring_buffer


def memory(request: Request, plan: Plan) -> Memory:
    """Per GPU, each term as its field documents it; PipeFusion's buffer is what PipeFusion's paper trades
    for its small messages (its stale K,V replaces a sequence split's all-to-all)."""
    m, b = request.model, request.batch / plan.cfg
    u, r, t, p = plan.ulysses, plan.ring, plan.tensor, plan.pipefusion
    seq, h, word = request.sequence, m.hidden, BYTES_PER_PARAM
    local = b * seq / (u * r)
    up = m.mlp * (2 if m.gated_mlp else 1)
    live = local * (2 * h + (3 * h + up) / t) * word
    kv = 2 * b * (seq / r) * h / (u * t) * word
    whole_kv = 2 * b * seq * h / (u * t) * word  # xDiT replicates fresh K,V across the ring for the next step
    stale = whole_kv * math.ceil(m.blocks / p) if p > 1 else 0.0
    return Memory(m.weight_bytes / (p * t), live, kv, stale, kv if r > 1 else 0.0)


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
                if pricing is None or memory(request, plan).total <= pricing.topology.gpu.memory_bytes:
                    yield plan
