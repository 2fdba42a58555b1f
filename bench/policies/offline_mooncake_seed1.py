"""Parent #46 + weighted r.prefix_rank from #4."""

PARAMS = {
    "token_budget": (512.0, 32768.0, "log", 5542.573399269201),
    "max_seqs": (16.0, 2048.0, "log", 47.679272753176505),
    "w_1": (0.0001, 1.0, "log", 0.045249959959512746),
    "w_2": (1.0, 10000.0, "log", 877.2876381205889),
}


def priority(r, p):
    return -r.shared + p.w_1 * sqrt(r.preemptions) + p.w_2 * r.prefix_rank
