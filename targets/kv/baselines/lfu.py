"""LFU: evict the leaf with the fewest hits while cached; recency breaks ties."""


def priority(b, p):
    return b.hits
