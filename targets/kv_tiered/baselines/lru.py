"""LRU in every tier, write-back: HiCache's write_back and vLLM's offloading (LRU) defaults.

The least recently used GPU leaf leaves first, every block leaving GPU memory is written to host memory
(and to disk, where there is one, as it leaves host memory), and the least recently used block below goes
first there.
"""


def priority(b, p):
    return b.last_access


def keep(b, p):
    return 1.0


def below(b, p):
    return b.last_access
