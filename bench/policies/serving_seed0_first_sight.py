"""Parent #274 with waiting -> decoding."""

PARAMS = {
    "t_1": (0.0001, 1.0, "log", 0.2914523380395436),
    "w_1": (0.01, 100.0, "log", 5.309957965100539),
    "w_2": (0.1, 1000.0, "log", 5.744452693225167),
    "t_2": (0.001, 10.0, "log", 0.017617139021893446),
}


def route(s, p):
    if s.best_routed_match < p.t_2:
        return -s.routed_match
    return -s.ttft_estimate_s


def priority(r, p):
    return r.decoding


def evict(b, p):
    if b.hits > p.t_1:
        return b.last_access + p.w_1
    return b.last_access - p.w_2 * log1p(b.last_access)
