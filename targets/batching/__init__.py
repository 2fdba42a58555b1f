"""LLM request scheduling: continuous batching under a KV memory budget."""

from .target import BatchingCapacityTarget, BatchingTarget

__all__ = ["BatchingCapacityTarget", "BatchingTarget"]
