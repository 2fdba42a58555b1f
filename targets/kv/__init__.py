"""Prefix KV-cache eviction."""

from .target import KVTarget

__all__ = ["KVTarget"]
