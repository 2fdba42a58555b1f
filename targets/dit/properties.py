"""What Z3 proves of every DiT serving score before it runs; failing a hard property rejects the candidate."""

from __future__ import annotations

from verifiers.properties import Property, common

SCORE_BOUND = 1.0e300
"""Any finite score ranks options; the bound only keeps the output a float with room to spare."""

PROPERTIES: tuple[Property, ...] = common(
    "score", -SCORE_BOUND, SCORE_BOUND, subject="The score", inputs="option (request, GPU group, plan)"
)
