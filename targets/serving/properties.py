"""What Z3 proves of every serving candidate before it runs; failing a hard property rejects it."""

from __future__ import annotations

from verifiers.properties import Monotone, Property, common

from .features import ROUTE_AFFINITY, ROUTE_LOAD

BOUND = 1.0e300
"""Any finite score orders instances, requests or blocks; the bound only keeps it a float."""

PROPERTIES: tuple[Property, ...] = (
    *common("route", -BOUND, BOUND, subject="The route score", inputs="request and instance state"),
    *common("priority", -BOUND, BOUND, subject="The priority", inputs="request state"),
    *common("evict", -BOUND, BOUND, subject="The eviction score", inputs="block state"),
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
