"""Targets: each fixes a mechanism and asks candidates only for a narrow policy.

The built-in targets are named here. Any installed package adds its own by an entry point in the
`crucible.targets` group (`NAME = "package.module:Factory"`, a callable that returns the Target), so a
new target needs no edit of this file; a built-in name is never replaced.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points

from .base import Target

ENTRY_POINT_GROUP = "crucible.targets"


class TargetUnavailable(ImportError):
    """An installed target's entry point names a module or callable that does not load; one line."""


def _kv() -> Target:
    from .kv import KVTarget

    return KVTarget()


def _kv_tiered() -> Target:
    from .kv.tiered import TieredKVTarget

    return TieredKVTarget()


def _batching() -> Target:
    from .batching import BatchingTarget

    return BatchingTarget()


def _batching_capacity() -> Target:
    from .batching import BatchingCapacityTarget

    return BatchingCapacityTarget()


def _dit() -> Target:
    from .dit.target import DiTTarget

    return DiTTarget()


_BUILT_IN: dict[str, Callable[[], Target]] = {
    "kv": _kv,
    "batching": _batching,
    "dit": _dit,
    "batching-capacity": _batching_capacity,
    "kv-tiered": _kv_tiered,
}


def _installed() -> dict[str, EntryPoint]:
    """Targets other packages declare, read from the import path on every call: no cache to go stale."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in _BUILT_IN}


def names() -> tuple[str, ...]:
    return (*_BUILT_IN, *_installed())


def load(name: str) -> Target:
    """The target called `name`; KeyError names the known ones, TargetUnavailable the broken plugin."""
    if name in _BUILT_IN:
        return _BUILT_IN[name]()
    installed = _installed()
    if name not in installed:
        raise KeyError(f"unknown target {name!r}; known targets: {', '.join(names())}")
    entry = installed[name]
    try:
        factory = entry.load()
    except (ImportError, AttributeError) as exc:
        raise TargetUnavailable(f"target {name!r} ({entry.value}) cannot be loaded: {exc}") from None
    return factory()
