"""Parent #196 + regime switch: if b.depth < p.t_3 then b.hits / (1 + b.last_access)."""

PARAMS = {
    "w_1": (10.0, 100000.0, "log", 98689.45845301414),
    "c_2": (1.0, 10000.0, "log", 8365.161373835921),
    "w_2": (0.001, 10.0, "log", 0.015173887971014556),
    "t_1": (0.001, 10.0, "log", 0.019180626823872938),
    "t_2": (0.1, 1000.0, "log", 4.890030494331598),
    "w_3": (0.01, 100.0, "log", 0.0859460635927954),
    "t_3": (1.0, 100.0, "log", 34.11409003770496),
}


def route(s, p):
    if s.best_routed_match < p.t_1:
        return 1 / (1 + s.routed_match)
    if s.routed_match < p.t_2:
        return -s.ttft_estimate_s - p.w_2 * min(s.decode_batch, p.c_2) + p.w_3
    return -s.ttft_estimate_s - p.w_2 * min(s.decode_batch, p.c_2)


def priority(r, p):
    return r.waiting + p.w_1 * r.cached_prefix


def evict(b, p):
    if b.depth < p.t_3:
        return b.hits / (1 + b.last_access)
    return b.depth
