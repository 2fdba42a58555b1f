"""LRU in every tier, writing to the tier below only blocks seen at least twice.

Admit on second sighting (as HiCache's write_through_selective backs a block up to host memory once it is
hit again): a block used by one request only is dropped as it leaves GPU memory, so the tiers below hold
blocks that have been reused.
"""


def priority(b, p):
    return b.last_access


def keep(b, p):
    return 1.0 if b.accesses >= 2 else -1.0


def below(b, p):
    return b.last_access
