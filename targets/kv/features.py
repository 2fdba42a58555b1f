"""The block features a KV eviction policy may read, in the column order the simulator fills them."""

from __future__ import annotations

from targets.base import Feature, FeatureRegistry

NEVER_S = 1.0e6
"""Stand-in for "never" in time-since features (about 11.6 days, longer than any shipped trace)."""

UNBOUNDED = 1.0e12
"""The upper end of a feature with no natural bound (a time, a count): far beyond any trace."""

BLOCK_FEATURES = FeatureRegistry(
    (
        Feature(
            "now", "s", 0.0, UNBOUNDED, "current time: the arrival of the request that needs room", clock=True
        ),
        Feature("last_access", "s", 0.0, UNBOUNDED, "time of the block's latest access", clock=True),
        Feature(
            "inserted_at",
            "s",
            0.0,
            UNBOUNDED,
            "time the block entered the cache (this residency)",
            clock=True,
        ),
        Feature("age", "s", 0.0, UNBOUNDED, "now - last_access"),
        Feature("lifetime", "s", 0.0, UNBOUNDED, "now - inserted_at: time since insertion"),
        Feature("hits", "count", 0.0, UNBOUNDED, "cache hits on the block during this residency"),
        Feature("accesses", "count", 1.0, UNBOUNDED, "requests that used the block, over all residencies"),
        Feature("depth", "blocks", 1.0, UNBOUNDED, "position of the block in its prefix (1 = first block)"),
        Feature("tokens", "tokens", 1.0, 512.0, "tokens held by the block (the last block may be partial)"),
        Feature(
            "prefix_tokens", "tokens", 1.0, UNBOUNDED, "tokens of the prefix up to and including this block"
        ),
        Feature(
            "fanout", "count", 0.0, UNBOUNDED, "distinct child blocks seen so far (branch points are shared)"
        ),
        Feature(
            "reuse_mean",
            "s",
            0.0,
            UNBOUNDED,
            "mean interval between accesses; now - first access while it was used only once",
        ),
        Feature(
            "last_interval",
            "s",
            0.0,
            UNBOUNDED,
            "interval between the two latest accesses; now - first access while used once",
        ),
        Feature("evictions", "count", 0.0, UNBOUNDED, "ghost history: times the block was evicted before"),
        Feature(
            "since_evicted",
            "s",
            0.0,
            NEVER_S,
            "ghost history: time since the block was last evicted (1e6 if never)",
        ),
        Feature("pop_hits_p50", "count", 0.0, UNBOUNDED, "median hits over the evictable blocks right now"),
        Feature("pop_hits_p90", "count", 0.0, UNBOUNDED, "90th percentile of hits over the evictable blocks"),
        Feature("pop_age_p50", "s", 0.0, UNBOUNDED, "median age over the evictable blocks right now"),
        Feature("pop_age_p90", "s", 0.0, UNBOUNDED, "90th percentile of age over the evictable blocks"),
        Feature(
            "frontier",
            "0/1",
            0.0,
            1.0,
            "1 if the latest request that used the block ended at it (the end a next turn would extend)",
            integer=True,
        ),
        Feature(
            "parent_age",
            "s",
            0.0,
            UNBOUNDED,
            "now - latest access of the block's parent (0 for a first block: every request passes the root)",
        ),
        Feature(
            "parent_requests",
            "count",
            1.0,
            UNBOUNDED,
            "requests that used the block's parent (for a first block, every request so far)",
        ),
        Feature(
            "turns",
            "count",
            1.0,
            UNBOUNDED,
            "turns of the conversation up to the latest request that used the block (1: a first turn); a "
            "request is the next turn of the one whose every block but the last it extends",
            integer=True,
        ),
        Feature(
            "turn_gap",
            "s",
            0.0,
            UNBOUNDED,
            "mean interval between those turns (0 for a first turn): how soon the conversation came back",
        ),
        Feature(
            "ewma_hit_age",
            "s",
            0.0,
            UNBOUNDED,
            "population: moving average (weight 0.01) of a block's age when it is hit, over the hits so far "
            "(0 before the first): how long reused blocks waited",
        ),
        Feature(
            "ewma_evict_age",
            "s",
            0.0,
            UNBOUNDED,
            "population: moving average (weight 0.01) of a block's age when it is evicted, over the "
            "evictions so far (0 before the first): how long the cache keeps what it drops",
        ),
    ),
    relations=(
        "age == now - last_access",
        "lifetime == now - inserted_at",
        "inserted_at <= last_access",
        "last_access <= now",
        "hits <= accesses - 1",
        "tokens <= prefix_tokens",
        "depth <= prefix_tokens",
        "prefix_tokens <= 512 * depth",
        "pop_hits_p50 <= pop_hits_p90",
        "pop_age_p50 <= pop_age_p90",
        "parent_age <= age",
        "accesses <= parent_requests",
    ),
)
"""Relations hold for every block the simulator scores (exactly in reals; its subtractions round)."""

ORACLE_NEXT_USE = Feature(
    "next_use",
    "s",
    0.0,
    UNBOUNDED,
    "time of the block's next use (offline knowledge; only the Belady bound may read it)",
)
"""A hidden column after the registry; no candidate may read it, so it is not in BLOCK_FEATURES."""

N_COLUMNS = len(BLOCK_FEATURES) + 1
ORACLE_COLUMNS = {**BLOCK_FEATURES.columns(), ORACLE_NEXT_USE.name: len(BLOCK_FEATURES)}
