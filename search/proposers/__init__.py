"""Proposers write candidate programs: offline program evolution, an LLM, or a mix of the two.

Each proposer is a folder here (or any installed package) whose `KIND` an entry point of the
`crucible.proposers` group names (`NAME = "package.module:KIND"`), the way targets register: a new
proposer is one folder plus one line in pyproject.toml, and the CLI, the UI's launch form and crucible.toml
list it and its settings without an edit of theirs.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from search.proposers.base import ProposerKind
from search.settings import Setting

ENTRY_POINT_GROUP = "crucible.proposers"


class ProposerUnknown(LookupError):
    """No installed proposer has the name, or its entry point does not load; one line."""


def names() -> tuple[str, ...]:
    """The installed proposers, read from the import path on every call (no cache to go stale)."""
    return tuple(sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)))


def load(name: str) -> ProposerKind:
    """The proposer kind called `name`; ProposerUnknown names the known ones, or the broken entry point."""
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        raise ProposerUnknown(f"unknown proposer {name!r}; choose {', '.join(names())}")
    try:
        return found[0].load()  # type: ignore[no-any-return]
    except (ImportError, AttributeError) as exc:
        raise ProposerUnknown(f"proposer {name!r} ({found[0].value}) cannot be loaded: {exc}") from None


def settings() -> tuple[Setting, ...]:
    """Every installed proposer's settings, each name once (proposers that share one, as mix shares the
    LLM's, declare the same Setting); the flags and fields front ends offer beside the run's own."""
    found: dict[str, Setting] = {}
    for name in names():
        for setting in load(name).settings:
            other = found.setdefault(setting.name, setting)
            if other != setting:
                raise ProposerUnknown(f"proposer {name!r} declares setting {setting.name!r} unlike another")
    return tuple(found.values())
