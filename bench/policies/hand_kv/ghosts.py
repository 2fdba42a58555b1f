"""By hand: age_over_turn_gap, and a block evicted before and asked for again is worth keeping."""

PARAMS = {
    "w_1": (0.01, 100.0, "log", 1.0),
    "w_2": (0.01, 100.0, "log", 1.0),
    "w_3": (0.01, 100.0, "log", 1.0),
}


def priority(b, p):
    return b.accesses - p.w_1 * b.age / (1.0 + b.turn_gap) - p.w_2 * b.frontier + p.w_3 * b.evictions
