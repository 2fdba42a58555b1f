"""A fleet's policies as the processes of a real fleet take them: program sources and PARAMS, not compiled
keys (target.py compiles them for the simulator; each process compiles its own)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Keyed:
    """One decision function as a process takes it: a program's source and its PARAMS vector."""

    source: str
    params: tuple[float, ...]


@dataclass(frozen=True)
class Sources:
    """The policies of a fleet as the processes take them: the router's key (or a built-in router by
    name), each engine's schedule and evict keys."""

    route: Keyed
    schedule: Keyed
    evict: Keyed
    builtin: str = ""
