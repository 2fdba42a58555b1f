"""By hand: aged_lfu with each request worth w times how long the cache now keeps what it drops."""

PARAMS = {"w": (0.01, 100.0, "log", 1.0)}


def priority(b, p):
    return b.last_access + p.w * b.accesses * b.ewma_evict_age
