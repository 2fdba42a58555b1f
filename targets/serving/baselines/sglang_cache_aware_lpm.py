"""SGLang's router, `--policy cache_aware`, with the defaults of its launcher (sglang_router's RouterArgs:
cache_threshold 0.3, balance_abs_threshold 64, balance_rel_threshold 1.5; the Rust crate's own defaults
differ). Imbalanced (both thresholds exceeded): the instance with the fewest outstanding requests; else,
if the best prefix match in the router's approximate trees (what it sent each instance) exceeds the
threshold: the best-matching instance; else the one with the smallest tree. Per instance, longest prefix
match first (SGLang's `--schedule-policy lpm`), LRU eviction."""


def route(s, p):
    spread = s.max_outstanding - s.min_outstanding
    if spread > 64 and s.max_outstanding > 1.5 * s.min_outstanding:
        return -s.outstanding
    if s.best_routed_match > 0.3:
        return s.routed_match
    return -s.tree_blocks


def priority(r, p):
    return r.cached_prefix


def evict(b, p):
    return b.last_access
