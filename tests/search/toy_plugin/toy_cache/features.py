"""What a toy eviction policy may read of a cached key, counted in requests (steps)."""

from __future__ import annotations

from targets.base import Feature, FeatureRegistry

STEPS = 1.0e6
"""More requests than any toy workload has."""

SLOT_FEATURES = FeatureRegistry(
    (
        Feature("age", "steps", 0.0, STEPS, "requests since the key was last used"),
        Feature("lifetime", "steps", 0.0, STEPS, "requests since the key entered the cache"),
        Feature("hits", "count", 0.0, STEPS, "hits on the key since it entered the cache"),
    ),
    relations=("age <= lifetime", "hits <= lifetime"),
)
