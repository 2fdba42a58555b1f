"""By hand: reuse so far, less log age, more for conversations that come back slowly; last blocks first."""

PARAMS = {
    "w_1": (0.01, 100.0, "log", 1.0),
    "w_2": (0.01, 100.0, "log", 1.0),
    "w_3": (0.01, 100.0, "log", 1.0),
}


def priority(b, p):
    return b.accesses - p.w_1 * log1p(b.age) + p.w_2 * log1p(b.turn_gap) - p.w_3 * b.frontier
