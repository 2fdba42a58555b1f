"""LFU with dynamic aging in every tier: a block's uses plus an inflation clock, write-back.

LFU-DA (Arlitt et al., 2000) ranks by frequency plus a clock that grows as the cache runs, so blocks that
were popular long ago age out. The clock here is the time of the block's latest access over `clock_s`
seconds: one more use outweighs being touched up to clock_s seconds later. Its one constant is tuned on
the train part of the workload.
"""

PARAMS = {"clock_s": (1.0, 1.0e5, "log")}


def priority(b, p):
    return b.accesses + b.last_access / p.clock_s


def keep(b, p):
    return 1.0


def below(b, p):
    return b.accesses + b.last_access / p.clock_s
