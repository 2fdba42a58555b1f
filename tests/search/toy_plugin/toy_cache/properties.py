"""What Z3 proves of every toy priority: a key with more hits is never ranked lower."""

from __future__ import annotations

from verifiers.properties import Monotone, Property

PROPERTIES: tuple[Property, ...] = (
    Property(
        "more-hits-never-lower",
        "More hits never lower a key's priority, all else equal.",
        "priority",
        Monotone("hits"),
        severity="soft",
    ),
)
