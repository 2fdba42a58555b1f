"""Targets: each fixes a mechanism and asks candidates only for a narrow policy."""

from __future__ import annotations

from collections.abc import Callable

from .base import Target

_TARGETS: dict[str, Callable[[], Target]] = {}


def _kv() -> Target:
    from .kv import KVTarget

    return KVTarget()


def _batching() -> Target:
    from .batching import BatchingTarget

    return BatchingTarget()


def _dit() -> Target:
    from .dit.target import DiTTarget

    return DiTTarget()


_TARGETS["kv"] = _kv
_TARGETS["batching"] = _batching
_TARGETS["dit"] = _dit


def names() -> tuple[str, ...]:
    return tuple(_TARGETS)


def load(name: str) -> Target:
    """The target called `name`; KeyError names the known ones."""
    try:
        return _TARGETS[name]()
    except KeyError:
        raise KeyError(f"unknown target {name!r}; known targets: {', '.join(_TARGETS)}") from None
