"""By hand: reuse and ghost evictions, less the age in units of a weighted turn gap."""

PARAMS = {
    "w_1": (0.01, 100.0, "log", 1.0),
    "w_2": (0.01, 100.0, "log", 1.0),
    "w_3": (0.01, 100.0, "log", 1.0),
}


def priority(b, p):
    return b.accesses + p.w_3 * b.evictions - p.w_1 * b.age / (1.0 + p.w_2 * b.turn_gap)
