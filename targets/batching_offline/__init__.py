"""Offline batch inference: a batch known up front, finished as soon as possible on a deployment."""

from .target import BatchingOfflineTarget

__all__ = ["BatchingOfflineTarget"]
