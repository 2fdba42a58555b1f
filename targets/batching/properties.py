"""What Z3 proves of every batching priority before it runs; failing a hard property rejects the candidate."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from targets.base import OptionError, Requirable
from verifiers.properties import GrowsWith, Outranks, Property, common

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

ITERATION_FEATURES = ("now", "free_blocks", "queued", "batch")
"""What every request scored in one iteration reads alike: two requests compared differ in the rest."""
DEFAULT_SHARE = 0.5


def bounded_wait(wait_s: float, share: float, ttft_slo_s: float) -> Property:
    """The hard property that a request waiting `wait_s` for its first token outranks every request that
    has waited less than `share` of that, whatever else either holds: the order of "Online Dynamic Batching
    with Formal Guarantees". Before its first token a request's deadline is its arrival plus the TTFT SLO
    (the scheduler fills it so), which EDF's proof needs."""
    return Property(
        "bounded-wait",
        f"A request that has waited {wait_s:g} s for its first token outranks every request that has waited "
        f"less than {share * wait_s:g} s, whatever else either holds.",
        "priority",
        Outranks(
            "waiting",
            wait_s,
            share * wait_s,
            ITERATION_FEATURES,
            ("generated == 0", f"deadline == arrival + {ttft_slo_s!r}"),
        ),
    )


def _bounded_wait(text: str, options: Mapping[str, Any]) -> Property:
    wait, _, share = text.partition(":")
    try:
        wait_s, fraction = float(wait), float(share) if share else DEFAULT_SHARE
    except ValueError:
        raise OptionError(f"--require bounded-wait={text}: expected W[:SHARE], two numbers") from None
    if not (0 < wait_s < 1e9 and 0 < fraction < 1):
        raise OptionError(f"--require bounded-wait={text}: W must be positive seconds, SHARE within (0, 1)")
    return bounded_wait(wait_s, fraction, float(options["ttft_slo_s"]))


REQUIRABLE = {
    "bounded-wait": Requirable(
        "W[:SHARE]",
        "a request waiting W s for its first token outranks every request that waited under SHARE x W s "
        f"(SHARE {DEFAULT_SHARE:g} unless given), whatever else they hold: proved by Z3, or the candidate "
        "is rejected",
        _bounded_wait,
    )
}
"""The properties a batching run may require (`--require bounded-wait=30`)."""
