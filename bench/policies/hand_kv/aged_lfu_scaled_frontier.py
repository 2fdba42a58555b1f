"""By hand: aged_lfu_scaled, and a request's last block d eviction ages older."""

PARAMS = {"w": (0.01, 100.0, "log", 1.0), "d": (0.01, 100.0, "log", 1.0)}


def priority(b, p):
    return b.last_access + (p.w * b.accesses - p.d * b.frontier) * b.ewma_evict_age
