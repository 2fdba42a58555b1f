"""Admit on second sighting, then LRU: blocks used by one request only are evicted before any reused one.

A prefix cache must hold the blocks of the request in flight, so a block seen once is cached while its
request runs; afterwards it is the first to go, as if never admitted. LRU orders each group.
"""


def priority(b, p):
    seen_twice = 1.0 if b.accesses >= 2 else 0.0
    return seen_twice * 1.0e9 + b.last_access
