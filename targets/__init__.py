"""Targets: each fixes a mechanism and asks candidates only for a narrow policy.

Every target, built-in or not, registers by an entry point of the `crucible.targets` group
(`NAME = "package.module:Factory"`, a callable that returns the Target): Crucible's own are declared in its
pyproject.toml like any plugin's, so a new target is one folder plus one line there. Where two installed
packages declare one name, Crucible's own target keeps it.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

from targets.base import Target

ENTRY_POINT_GROUP = "crucible.targets"
_OURS = "crucible"


class TargetUnavailable(ImportError):
    """An installed target's entry point names a module or callable that does not load; one line."""


def _installed() -> dict[str, EntryPoint]:
    """Targets by name, read from the import path on every call: no cache to go stale."""
    found: dict[str, EntryPoint] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        ours = entry.dist is not None and entry.dist.name == _OURS
        if entry.name not in found or ours:
            found[entry.name] = entry
    return found


def names() -> tuple[str, ...]:
    return tuple(sorted(_installed()))


def load(name: str) -> Target:
    """The target called `name`; KeyError names the known ones, TargetUnavailable the broken plugin."""
    installed = _installed()
    if name not in installed:
        raise KeyError(f"unknown target {name!r}; known targets: {', '.join(sorted(installed))}")
    entry = installed[name]
    try:
        factory = entry.load()
    except (ImportError, AttributeError) as exc:
        raise TargetUnavailable(f"target {name!r} ({entry.value}) cannot be loaded: {exc}") from None
    return factory()  # type: ignore[no-any-return]
