"""Perfect LFU in GPU memory over an LRU host tier: the best single-tier classic, with offloading added.

The GPU leaf used by the fewest requests over all its residencies leaves first (recency breaks ties), every
block leaving GPU memory is written to host memory, and the least recently used block below goes first.
"""


def priority(b, p):
    return b.accesses


def keep(b, p):
    return 1.0


def below(b, p):
    return b.last_access
