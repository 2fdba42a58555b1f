"""LLM request scheduling: continuous batching under a KV memory budget."""

from .target import BatchingTarget

__all__ = ["BatchingTarget"]
