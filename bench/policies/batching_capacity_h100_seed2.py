"""Parent #6 + weighted r.arrival * r.now."""

PARAMS = {
    "w_1": (0.01, 100.0, "log", 11.760305403403608),
}


def priority(r, p):
    return 1000000.0 * r.decoding + -r.prompt + p.w_1 * (r.arrival * r.now)
