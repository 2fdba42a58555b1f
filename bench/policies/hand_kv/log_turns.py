"""By hand: age_over_turn_gap on log scales, longer conversations kept."""

PARAMS = {
    "w_1": (0.01, 100.0, "log", 1.0),
    "w_2": (0.01, 100.0, "log", 1.0),
    "w_3": (0.01, 100.0, "log", 1.0),
}


def priority(b, p):
    recency = p.w_1 * b.age / (1.0 + b.turn_gap)
    return log1p(b.accesses) + p.w_3 * log1p(b.turns) - recency - p.w_2 * b.frontier
