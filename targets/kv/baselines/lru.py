"""LRU, the vLLM and SGLang default: evict the least recently used leaf (the tail first on ties)."""


def priority(b, p):
    return b.last_access
