"""Perfect LFU: evict the leaf used by the fewest requests over all its residencies; recency breaks ties.

In-cache LFU (`lfu`) forgets a block's count when it is evicted; Perfect LFU keeps it (Breslau et al.,
1999), so a block that comes back after an eviction returns with its history.
"""


def priority(b, p):
    return b.accesses
