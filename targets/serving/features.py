"""What the router, each instance's scheduler and each instance's cache may read, in column order."""

from __future__ import annotations

from targets.base import Feature, FeatureRegistry
from targets.batching.features import CACHED_PREFIX, PREFIX_COLUMNS, REQUEST_FEATURES

_INF = 1.0e12
_TOKENS = 1.0e7

ROUTE_FEATURES = FeatureRegistry(
    (
        Feature(
            "prompt_tokens",
            "tokens",
            1.0,
            _TOKENS,
            "the arriving request's prompt tokens",
            integer=True,
            shared=True,
        ),
        Feature(
            "prompt_blocks",
            "blocks",
            1.0,
            _TOKENS,
            "blocks of its prompt (the trace's prefix blocks)",
            integer=True,
            shared=True,
        ),
        Feature(
            "cached_blocks",
            "blocks",
            0.0,
            _TOKENS,
            "leading blocks of its prompt this instance's prefix cache holds now",
            integer=True,
        ),
        Feature(
            "uncached_tokens", "tokens", 0.0, _TOKENS, "prompt tokens this instance would have to prefill"
        ),
        Feature("match", "share", 0.0, 1.0, "cached_blocks / prompt_blocks"),
        Feature(
            "best_match", "share", 0.0, 1.0, "the highest match over every instance of the fleet", shared=True
        ),
        Feature(
            "instance", "index", 0.0, 1024.0, "this instance's position in the fleet (0 first)", integer=True
        ),
        Feature("outstanding", "requests", 0.0, _INF, "requests routed here and not finished", integer=True),
        Feature("running", "requests", 0.0, _INF, "of those, requests holding KV blocks", integer=True),
        Feature("queued", "requests", 0.0, _INF, "of those, requests waiting for admission", integer=True),
        Feature(
            "queued_prefill_tokens",
            "tokens",
            0.0,
            _INF,
            "prompt tokens its live requests have still to prefill (after their cache hits once admitted)",
        ),
        Feature(
            "decode_batch", "requests", 0.0, _INF, "running requests past their first token", integer=True
        ),
        Feature("active_blocks", "blocks", 0.0, _INF, "KV blocks its running requests hold", integer=True),
        Feature(
            "free_blocks",
            "blocks",
            0.0,
            _INF,
            "KV blocks not held by a running request (cached or empty)",
            integer=True,
        ),
        Feature("kv_used", "share", 0.0, 1.0, "active_blocks / the instance's KV blocks"),
        Feature(
            "tree_blocks",
            "blocks",
            0.0,
            _INF,
            "distinct prompt blocks routed to this instance so far: the size of a router's approximate tree "
            "of it (what it sent, whatever the engine has evicted since)",
            integer=True,
        ),
        Feature(
            "hit_rate",
            "share",
            0.0,
            1.0,
            "the share of its prompt each recent admission found cached, averaged over about the last 32",
        ),
        Feature(
            "ttft_estimate_s",
            "s",
            0.0,
            _INF,
            "the mechanism's estimate of this request's time to first token here: its uncached tokens and "
            "the queued prefill tokens ahead of it, at the deployment's prefill rate",
        ),
        Feature(
            "min_outstanding",
            "requests",
            0.0,
            _INF,
            "the fewest outstanding requests of any instance",
            integer=True,
            shared=True,
        ),
        Feature(
            "max_outstanding",
            "requests",
            0.0,
            _INF,
            "the most outstanding requests of any instance",
            integer=True,
            shared=True,
        ),
        Feature(
            "min_queued",
            "requests",
            0.0,
            _INF,
            "the fewest queued requests of any instance",
            integer=True,
            shared=True,
        ),
        Feature(
            "max_queued",
            "requests",
            0.0,
            _INF,
            "the most queued requests of any instance",
            integer=True,
            shared=True,
        ),
        Feature(
            "routed_blocks",
            "blocks",
            0.0,
            _TOKENS,
            "leading blocks of its prompt that earlier requests routed to this instance had: a router's "
            "approximate view of the instance's cache",
            integer=True,
        ),
        Feature("routed_match", "share", 0.0, 1.0, "routed_blocks / prompt_blocks"),
        Feature(
            "best_routed_match",
            "share",
            0.0,
            1.0,
            "the highest routed_match over every instance",
            shared=True,
        ),
    ),
    relations=(
        "cached_blocks <= prompt_blocks",
        "uncached_tokens <= prompt_tokens",
        "match <= best_match",
        "running + queued == outstanding",
        "decode_batch <= running",
        "min_outstanding <= outstanding",
        "outstanding <= max_outstanding",
        "min_queued <= queued",
        "queued <= max_queued",
        "routed_blocks <= prompt_blocks",
        "routed_match <= best_routed_match",
    ),
)
"""A request's features against one instance's state at the request's arrival; the router scores every
instance and the highest score gets the request (ties: the first instance)."""

ROUTE_LOAD = ("outstanding", "queued", "queued_prefill_tokens", "ttft_estimate_s")
"""The features that measure queued work: a router must never prefer more of it, all else equal."""
ROUTE_AFFINITY = ("cached_blocks", "match", "routed_blocks", "routed_match")
"""The features that measure the request's cached prefix here: a router must never prefer less of it."""

SCHEDULE_FEATURES = FeatureRegistry((*REQUEST_FEATURES.features, CACHED_PREFIX), REQUEST_FEATURES.relations)
"""The batching scheduler's request features, and the prefix its instance's cache holds of a waiting one."""
SCHEDULE_COLUMNS = PREFIX_COLUMNS

EVICT_FEATURES = FeatureRegistry(
    (
        Feature("last_access", "s", 0.0, _INF, "when a request last used the block", clock=True),
        Feature("inserted", "s", 0.0, _INF, "when the block entered this instance's cache", clock=True),
        Feature("hits", "count", 0.0, _INF, "admissions that found the block cached here", integer=True),
        Feature(
            "depth", "blocks", 1.0, _TOKENS, "position of the block in its prefix (1 = first)", integer=True
        ),
    ),
    relations=("inserted <= last_access",),
)
"""An evictable block's features when it becomes evictable (no running request and no cached child holds
it); they do not change until a request touches it again, so its score stays exact while it waits, as
in Vulcan's priority queue and GDSF. The lowest score is evicted first."""
