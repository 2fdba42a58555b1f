"""SGLang's router, `--policy cache_aware`, as its releases before the model gateway ran it (sgl-router's
cache_aware.rs: a miss goes to the instance with the smallest approximate tree, not the fewest requests in
flight); launcher defaults cache_threshold 0.3, balance_abs_threshold 64, balance_rel_threshold 1.5. Kept to
show what `crucible validate --target serving --against sglang-router` tells apart: sglang-router 0.3.2
does not route so."""


def route(s, p):
    spread = s.max_outstanding - s.min_outstanding
    if spread > 64 and s.max_outstanding > 1.5 * s.min_outstanding:
        return -s.outstanding
    if s.best_routed_match > 0.3:
        return s.routed_match
    return -s.tree_blocks


def priority(r, p):
    return r.waiting


def evict(b, p):
    return b.last_access
