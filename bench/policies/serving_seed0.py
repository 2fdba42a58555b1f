"""Parent #118 - weighted 1 / (1 + b.hits)."""

PARAMS = {
    "t_1": (0.0001, 1.0, "log", 0.055641292767491184),
    "w_1": (0.01, 100.0, "log", 1.0723530217390507),
    "w_2": (0.1, 1000.0, "log", 0.13028799058778853),
    "t_2": (1.0, 1000.0, "log", 59.345061213236654),
    "w_3": (0.1, 1000.0, "log", 73.18118392637692),
}


def route(s, p):
    if s.prompt_blocks > p.t_2:
        return 1 / (1 + s.decode_batch)
    return -s.ttft_estimate_s


def priority(r, p):
    return r.waiting


def evict(b, p):
    if b.hits > p.t_1:
        return b.last_access + p.w_1
    return b.last_access - p.w_2 * log1p(b.last_access) - p.w_3 * (1 / (1 + b.hits))
