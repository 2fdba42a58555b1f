"""By hand: Perfect LFU aged by recency (a GDSF-style clock), each request through the block worth w s."""

PARAMS = {"w": (1.0, 10000.0, "log", 100.0)}


def priority(b, p):
    return b.last_access + p.w * b.accesses
