"""LRU: evict the key used longest ago."""


def priority(b, p):
    return -b.age
