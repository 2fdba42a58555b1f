"""The transformer shapes the targets simulate and the engine runs; the profiler measures at these."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's dimensions: all the cost model needs to compose per-layer kernels."""

    name: str
    layers: int
    hidden: int
    heads: int
    head_dim: int
    ffn: int
    vocab: int
    kv_heads: int | None = None
    """Key-value heads where they are fewer than the query heads (grouped-query attention); None: as many."""

    @property
    def kv_width(self) -> int:
        """Width of the keys (or of the values) of one token in one layer."""
        return (self.kv_heads or self.heads) * self.head_dim

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelShape:
        return cls(**data)


TINY = ModelShape("tiny", layers=4, hidden=256, heads=4, head_dim=64, ffn=512, vocab=512)
"""The engine's random-weight model: small enough that a Mooncake slice replays on 2 CPU cores."""

LLAMA2_7B = ModelShape("llama2-7b", layers=32, hidden=4096, heads=32, head_dim=128, ffn=11008, vocab=32000)
"""Llama-2-7B, the model of Vidur's measured H100 operator timings."""

LLAMA2_70B = ModelShape(
    "llama2-70b", layers=80, hidden=8192, heads=64, head_dim=128, ffn=28672, vocab=32000, kv_heads=8
)
"""Llama-2-70B, the second model of Vidur's H100 timings (meta-llama/Llama-2-70b-hf config.json)."""
LLAMA3_8B = ModelShape(
    "llama3-8b", layers=32, hidden=4096, heads=32, head_dim=128, ffn=14336, vocab=128256, kv_heads=8
)
"""Meta-Llama-3-8B (and 3.1: the same shapes), from its config.json on the Hugging Face hub."""
LLAMA3_70B = ModelShape(
    "llama3-70b", layers=80, hidden=8192, heads=64, head_dim=128, ffn=28672, vocab=128256, kv_heads=8
)
"""Meta-Llama-3-70B (and 3.1), from its config.json on the Hugging Face hub."""

MODELS = {m.name: m for m in (TINY, LLAMA2_7B)}
"""The shapes the CPU engine runs and `crucible profile` measures on a CPU."""
