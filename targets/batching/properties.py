"""What Z3 proves of every batching priority before it runs; failing a hard property rejects the candidate."""

from __future__ import annotations

from verifiers.properties import GrowsWith, Property, common

PRIORITY_BOUND = 1.0e300
"""Any finite priority orders requests; the bound only keeps the output a float with room to spare."""

STARVATION_RATE = 1.0e-9
"""Any positive rate makes priority grow without bound with waiting time; this one only rules out flat."""

PROPERTIES: tuple[Property, ...] = (
    *common("priority", -PRIORITY_BOUND, PRIORITY_BOUND, subject="The priority", inputs="request state"),
    Property(
        "no-starvation",
        "Priority grows with waiting time, all else equal, so no request waits forever behind newer ones.",
        "priority",
        GrowsWith("waiting", STARVATION_RATE),
        severity="soft",
    ),
)
