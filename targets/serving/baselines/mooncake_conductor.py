"""Mooncake's Conductor: the instance with the least estimated time to first token, the prefill of what it
does not hold cached plus the prefill queued ahead of it (Qin et al., FAST'25, section 5, "KVCache-centric
scheduling"); FCFS and LRU per instance."""


def route(s, p):
    return -s.ttft_estimate_s


def priority(r, p):
    return r.waiting


def evict(b, p):
    return b.last_access
