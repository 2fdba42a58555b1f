"""The toy mechanism as the simulator runs it: a cache of fixed slots that evicts the lowest priority.

Every resident key's counters are advanced each request; the first key in insertion order wins a tie.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

Priority = Callable[[Mapping[str, float]], float]


def replay(stream: Sequence[int], capacity: int, priority: Priority) -> int:
    """The hits of the stream through a cache of `capacity` keys."""
    resident: dict[int, dict[str, float]] = {}
    hits = 0
    for key in stream:
        for state in resident.values():
            state["age"] += 1
            state["lifetime"] += 1
        if key in resident:
            hits += 1
            resident[key]["hits"] += 1
            resident[key]["age"] = 0
            continue
        if len(resident) >= capacity:
            victim = min(resident, key=lambda k: priority(resident[k]))
            del resident[victim]
        resident[key] = {"age": 0.0, "lifetime": 0.0, "hits": 0.0}
    return hits
