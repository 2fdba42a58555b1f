"""FIFO: evict the leaf that entered the cache first."""


def priority(b, p):
    return b.inserted_at
