"""The toy mechanism written again, independently, as the "engine" validation measures: slots that keep
timestamps, features derived at eviction time, ties broken by the earliest insertion."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .cache import Priority


@dataclass
class _Slot:
    key: int
    inserted: int
    used: int
    hits: int = 0


def replay(stream: Sequence[int], capacity: int, priority: Priority) -> int:
    """The hits of the stream through `capacity` slots."""
    slots: list[_Slot] = []
    hits = 0
    for now, key in enumerate(stream):
        slot = next((s for s in slots if s.key == key), None)
        if slot is not None:
            hits += 1
            slot.hits += 1
            slot.used = now
            continue
        if len(slots) >= capacity:

            def rank(s: _Slot, now: int = now) -> tuple[float, int]:
                state = {"age": now - s.used, "lifetime": now - s.inserted, "hits": s.hits}
                return priority({k: float(v) for k, v in state.items()}), s.inserted

            slots.remove(min(slots, key=rank))
        slots.append(_Slot(key, inserted=now, used=now))
    return hits
