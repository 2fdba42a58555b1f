"""What Z3 proves of every kv priority before it runs; failing a hard property rejects the candidate."""

from __future__ import annotations

from verifiers.properties import Monotone, Property, common

PRIORITY_BOUND = 1.0e300
"""Any finite priority orders blocks; the bound only keeps the output a float with room to spare."""

PROPERTIES: tuple[Property, ...] = (
    *common("priority", -PRIORITY_BOUND, PRIORITY_BOUND, subject="The priority", inputs="block state"),
    Property(
        "more-hits-never-lower",
        "More hits never lower a block's priority, all else equal.",
        "priority",
        Monotone("hits"),
        severity="soft",
    ),
)
