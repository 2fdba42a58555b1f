"""Serving capacity: the batching mechanism, with the largest load a policy sustains as its objective."""

from .target import BatchingCapacityTarget

__all__ = ["BatchingCapacityTarget"]
