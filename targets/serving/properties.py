"""What Z3 proves of every serving candidate before it runs; failing a hard property rejects it."""

from __future__ import annotations

from dataclasses import replace

from verifiers.properties import Monotone, Property, common

from .features import ROUTE_AFFINITY, ROUTE_LOAD

BOUND = 1.0e300
"""Any finite score orders instances, requests or blocks; the bound only keeps it a float."""


def _common(function: str, subject: str, inputs: str) -> tuple[Property, ...]:
    """The properties every decision function has, named after the function (three share a program)."""
    return tuple(
        replace(p, name=f"{function}-{p.name}") for p in common(function, -BOUND, BOUND, subject, inputs)
    )


PROPERTIES: tuple[Property, ...] = (
    *_common("route", "The route score", "request and instance state"),
    *_common("priority", "The priority", "request state"),
    *_common("evict", "The eviction score", "block state"),
    *(
        Property(
            f"load-monotone-{feature}",
            f"More {feature.replace('_', ' ')} on an instance never scores it higher, all else equal.",
            "route",
            Monotone(feature, increasing=False),
            severity="soft",
        )
        for feature in ROUTE_LOAD
    ),
    *(
        Property(
            f"affinity-monotone-{feature}",
            f"More of the request's prefix there ({feature.replace('_', ' ')}) never scores an instance "
            "lower, all else equal.",
            "route",
            Monotone(feature),
            severity="soft",
        )
        for feature in ROUTE_AFFINITY
    ),
)
