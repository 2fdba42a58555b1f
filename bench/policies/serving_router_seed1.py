"""Parent #32 + regime switch: if s.prompt_blocks > p.t_2 then min(s.min_queued, p.c_1)."""

PARAMS = {
    "t_1": (0.01, 100.0, "log", 0.12337233531936914),
    "w_1": (0.1, 1000.0, "log", 303.0623601914617),
    "w_2": (0.1, 1000.0, "log", 255.76947221485585),
    "t_2": (1.0, 10000.0, "log", 41.79044886034054),
    "c_1": (0.0001, 1.0, "log", 0.00015836529669354844),
}


def route(s, p):
    spread = p.w_2 * log1p(s.queued) - s.min_outstanding
    if spread > 64 and s.max_outstanding > 1.5 * s.min_outstanding:
        return -s.outstanding
    if s.best_routed_match > 0.3:
        return s.routed_match
    if s.prompt_blocks > p.t_2:
        return min(s.min_queued, p.c_1)
    return -s.outstanding


def priority(r, p):
    return r.cached_prefix


def evict(b, p):
    if b.depth < p.t_1:
        return b.last_access + p.w_1 * log1p(b.hits)
    return b.last_access
