"""The tiered prefix KV cache: GPU memory over host memory and disk."""

from .target import TieredKVTarget

__all__ = ["TieredKVTarget"]
