"""By hand: aged_lfu, and a request's last block (a next turn never shares it) d seconds older."""

PARAMS = {"w": (1.0, 10000.0, "log", 100.0), "d": (1.0, 100000.0, "log", 1000.0)}


def priority(b, p):
    return b.last_access + p.w * b.accesses - p.d * b.frontier
