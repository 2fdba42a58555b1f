"""What Z3 proves of every kv-tiered program before it runs; failing a hard property rejects the candidate.

Each of the three functions gets the properties every decision function must have, named after it (a
property's name is unique in a target); priority keeps the kv target's soft one on hits.
"""

from __future__ import annotations

from dataclasses import replace

from targets.kv.properties import PRIORITY_BOUND
from verifiers.properties import Monotone, Property, common


def _named(function: str, subject: str) -> tuple[Property, ...]:
    return tuple(
        replace(p, name=f"{function}-{p.name}")
        for p in common(function, -PRIORITY_BOUND, PRIORITY_BOUND, subject=subject, inputs="block state")
    )


PROPERTIES: tuple[Property, ...] = (
    *_named("priority", "The priority"),
    *_named("keep", "keep's score"),
    *_named("below", "The score below"),
    Property(
        "more-hits-never-lower",
        "More hits never lower a GPU block's priority, all else equal.",
        "priority",
        Monotone("hits"),
        severity="soft",
    ),
)
