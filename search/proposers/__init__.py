"""Proposers write candidate programs: offline program evolution, an LLM, or a mix of the two.

Each proposer is a folder here (or any installed package) whose `KIND` an entry point of the
`crucible.proposers` group names (`NAME = "package.module:KIND"`), the way targets register: a new
proposer is one folder plus one line in pyproject.toml, and the CLI, the UI's launch form and crucible.toml
list it and its settings without an edit of theirs.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from search.proposers.base import ProposerKind
from targets.base import Option, setting

ENTRY_POINT_GROUP = "crucible.proposers"
DEFAULT = "evolve"
"""The offline proposer: it needs no endpoint, no key and no network."""


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


def settings() -> tuple[Option, ...]:
    """Every installed proposer's settings, each name once (proposers that share one, as mix shares the
    LLM's, declare the same Option); the flags and fields front ends offer beside the run's own."""
    found: dict[str, Option] = {}
    for name in names():
        for declared in load(name).settings:
            other = found.setdefault(declared.name, declared)
            if other != declared:
                raise ProposerUnknown(f"proposer {name!r} declares setting {declared.name!r} unlike another")
    return tuple(found.values())


SETTING = setting("proposer", "str", DEFAULT, "who writes candidates", choices=names)
"""Which proposer writes a run's candidates: a run's setting whose choices are the installed proposers."""
