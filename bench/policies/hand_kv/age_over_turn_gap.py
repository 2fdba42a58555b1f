"""By hand: reuse so far, less the age in units of the conversation's turn gap; last blocks first."""

PARAMS = {
    "w_1": (0.01, 100.0, "log", 1.0),
    "w_2": (0.01, 100.0, "log", 1.0),
}


def priority(b, p):
    return b.accesses - p.w_1 * b.age / (1.0 + b.turn_gap) - p.w_2 * b.frontier
