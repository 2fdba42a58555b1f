"""The request features a batching policy may read, in the column order the scheduler fills them."""

from __future__ import annotations

from targets.base import Feature, FeatureRegistry

_INF = 1.0e12
_TOKENS = 1.0e7
"""No request of a real trace holds this many tokens; the trace loader refuses larger counts."""

REQUEST_FEATURES = FeatureRegistry(
    (
        Feature("now", "s", 0.0, _INF, "current time: the start of the iteration being planned", clock=True),
        Feature("arrival", "s", 0.0, _INF, "time the request arrived", clock=True),
        Feature("waiting", "s", 0.0, _INF, "now - arrival: time since the request arrived"),
        Feature("since_run", "s", 0.0, _INF, "time since it last computed a token (since arrival if never)"),
        Feature("prompt", "tokens", 1.0, _TOKENS, "prompt tokens", integer=True),
        Feature("generated", "tokens", 0.0, _TOKENS, "output tokens produced so far", integer=True),
        Feature(
            "computed",
            "tokens",
            0.0,
            _TOKENS,
            "tokens whose keys and values it holds now (0 while it waits, also after a preemption)",
            integer=True,
        ),
        Feature(
            "pending",
            "tokens",
            1.0,
            _TOKENS,
            "tokens to compute before its next output token: the rest of the prompt before the first "
            "token, 1 while decoding, prompt and output so far again after a preemption",
            integer=True,
        ),
        Feature(
            "decoding", "flag", 0.0, 1.0, "1 while it decodes one token per iteration, else 0", integer=True
        ),
        Feature(
            "running",
            "flag",
            0.0,
            1.0,
            "1 if it holds KV blocks (admitted and not preempted since)",
            integer=True,
        ),
        Feature("blocks", "blocks", 0.0, _INF, "KV blocks it holds", integer=True),
        Feature(
            "preemptions", "count", 0.0, _INF, "times it was preempted (and will recompute)", integer=True
        ),
        Feature(
            "deadline",
            "s",
            0.0,
            _INF,
            "when its next token is due: arrival + TTFT SLO before its first token, then first token time "
            "+ generated x TPOT SLO",
        ),
        Feature("slack", "s", -_INF, _INF, "deadline - now (negative once it is late)"),
        Feature("free_blocks", "blocks", 0.0, _INF, "free KV blocks in the pool now", integer=True),
        Feature("queued", "count", 0.0, _INF, "arrived requests holding no KV blocks now", integer=True),
        Feature("batch", "count", 0.0, _INF, "requests holding KV blocks now", integer=True),
    ),
    relations=(
        "waiting == now - arrival",
        "since_run <= waiting",
        "slack == deadline - now",
        "deadline >= arrival",
        "pending + computed == prompt + generated",
        "decoding <= running",
        "decoding <= generated",
        "running <= batch",
    ),
)
"""Relations hold for every request the scheduler scores (exactly in reals; its subtractions round)."""

ORACLE_REMAINING = Feature(
    "remaining_output",
    "tokens",
    1.0,
    _TOKENS,
    "output tokens still to produce (offline knowledge; only the SRPT bound may read it)",
)
"""A hidden column after the registry; no candidate may read it, so it is not in REQUEST_FEATURES."""

CACHED_PREFIX = Feature(
    "cached_prefix",
    "blocks",
    0.0,
    _INF,
    "full blocks of its prompt the instance's prefix cache holds now, which admitting it skips (0 once "
    "admitted, and on an instance with no prefix cache)",
    integer=True,
)
"""Read only where the scheduler runs over a prefix cache (a serving fleet's instance)."""
PREFIX_COLUMN = len(REQUEST_FEATURES) + 1
N_COLUMNS = len(REQUEST_FEATURES) + 2
ORACLE_COLUMNS = {**REQUEST_FEATURES.columns(), ORACLE_REMAINING.name: len(REQUEST_FEATURES)}
PREFIX_COLUMNS = {**REQUEST_FEATURES.columns(), CACHED_PREFIX.name: PREFIX_COLUMN}
