"""The sequence features an offline batch policy may read, in the column order the loop fills them.

A batch is known before it starts, so a sequence is scored when it joins the waiting queue (at time zero,
and again after each preemption) on what it is, not on a clock: every sequence arrives at zero, so the
online target's time features would be alike for all of them."""

from __future__ import annotations

from targets.base import Feature, FeatureRegistry

_TOKENS = 1.0e7
"""No sequence of a real batch holds this many tokens; the loaders refuse larger counts."""
_COUNT = 1.0e12

SEQUENCE_FEATURES = FeatureRegistry(
    (
        Feature("prompt", "tokens", 1.0, _TOKENS, "prompt tokens", integer=True),
        Feature(
            "output",
            "tokens",
            1.0,
            _TOKENS,
            "output tokens it will produce, as the batch states them (its max_tokens)",
            integer=True,
        ),
        Feature(
            "order", "count", 0.0, _COUNT, "its position in the batch as submitted, from 0", integer=True
        ),
        Feature(
            "prefix_rank",
            "count",
            0.0,
            _COUNT,
            "its position when the batch is sorted by prompt prefix, from 0: sequences that share a prefix "
            "are neighbours (the same for sequences whose prompts are equal; its order where the batch "
            "states no prefixes)",
            integer=True,
        ),
        Feature(
            "shared",
            "tokens",
            0.0,
            _TOKENS,
            "prompt tokens at its start that another sequence of the batch also begins with, in whole "
            "prefix blocks (0 where the batch states no prefixes)",
            integer=True,
        ),
        Feature(
            "preemptions", "count", 0.0, _COUNT, "times it was preempted (and will recompute)", integer=True
        ),
    ),
    relations=("shared <= prompt",),
)
PREEMPTIONS_COLUMN = SEQUENCE_FEATURES.columns()["preemptions"]
