"""The features a tiered cache's decisions read: the single-tier block features and where the block sits.

The population statistics of the single-tier registry (percentiles of the evictable blocks' hits and ages,
moving averages of hit and eviction ages) are left out: the three decisions each rank another population
(GPU leaves, host blocks, disk blocks), and a tier's own statistics would cost a selection over thousands of
blocks at every eviction below. Every other single-tier feature keeps its meaning, with a residency the
block's stay in the cache as a whole (any tier): a load from below is a hit.
"""

from __future__ import annotations

from targets.base import Feature, FeatureRegistry
from targets.kv.features import BLOCK_FEATURES, N_COLUMNS, ORACLE_COLUMNS, ORACLE_NEXT_USE, UNBOUNDED

POPULATION = frozenset(
    {"pop_hits_p50", "pop_hits_p90", "pop_age_p50", "pop_age_p90", "ewma_hit_age", "ewma_evict_age"}
)
"""Single-tier features a tiered decision does not read (see above)."""

TIER_FEATURES = (
    Feature(
        "tier",
        "0/1/2",
        0.0,
        2.0,
        "where the block sits as it is scored: 0 GPU memory (priority), 1 host memory, 2 disk (below); for "
        "keep, the tier it is leaving (0 GPU memory to host, 1 host memory to disk)",
        integer=True,
    ),
    Feature(
        "backed",
        "0/1",
        0.0,
        1.0,
        "1 if a GPU block also has a copy below (written through, or loaded back and kept there): evicting "
        "it from GPU memory loses nothing a load cannot bring back",
        integer=True,
    ),
    Feature(
        "in_tier_s",
        "s",
        0.0,
        UNBOUNDED,
        "time since the block entered the tier it is scored in (for keep, the tier it is leaving)",
    ),
    Feature(
        "load_ms",
        "ms",
        0.0,
        1.0e4,
        "time to load the block back into GPU memory from below: from host memory for a GPU or host block "
        "(or one leaving GPU memory), from disk for a disk block (or one leaving host memory)",
    ),
    Feature(
        "recompute_ms",
        "ms",
        0.0,
        1.0e5,
        "time to compute the block again over its cached prefix, as the deployment prices it: what a load "
        "saves, less load_ms",
    ),
)

TIER_COLUMN = N_COLUMNS
"""Column of `tier` in the replay's feature row: the tier features follow the single-tier columns."""
N_TIER_COLUMNS = N_COLUMNS + len(TIER_FEATURES)

TIERED_FEATURES = FeatureRegistry(
    tuple(f for f in BLOCK_FEATURES.features if f.name not in POPULATION) + TIER_FEATURES,
    relations=(
        *(r for r in BLOCK_FEATURES.relations if not any(name in r for name in POPULATION)),
        "in_tier_s <= lifetime",
    ),
)
"""What every decision of the tiered cache may read."""

TIERED_COLUMNS = {
    **{name: column for name, column in ORACLE_COLUMNS.items() if name not in POPULATION},
    **{f.name: TIER_COLUMN + i for i, f in enumerate(TIER_FEATURES)},
}
"""Each feature's column in the replay's row (the single-tier layout, then the tier features), the oracle's
next use included."""
ORACLE_NEXT = ORACLE_NEXT_USE.name
