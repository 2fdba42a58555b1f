"""Parent #0 - weighted log1p(r.prompt)."""

PARAMS = {
    "t_1": (0.01, 100.0, "log", 33.861683310389424),
    "w_1": (0.1, 1000.0, "log", 4.181242893098685),
    "w_2": (0.1, 1000.0, "log", 0.7077474040470477),
}


def route(s, p):
    return -s.ttft_estimate_s


def priority(r, p):
    return r.waiting - p.w_2 * log1p(r.prompt)


def evict(b, p):
    if b.depth < p.t_1:
        return b.last_access + p.w_1 * log1p(b.hits)
    return b.last_access
