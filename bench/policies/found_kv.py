# Found by `crucible search --target kv --budget 40 --seed 0` on the shipped workload (run 6aa795c625,
# candidate #45, block hit rate 0.0999 against LRU 0.0479); written by `crucible runs best`.
"""Parent #10 + guard: if b.tokens > p.t_1 then - p.w_3."""

PARAMS = {
    "w_1": (10.0, 100000.0, "log", 1540.127319261754),
    "w_2": (0.01, 100.0, "log", 15.545191810637657),
    "t_1": (0.1, 1000.0, "log", 191.25267560096117),
    "w_3": (0.01, 100.0, "log", 0.030775099612190264),
}


def priority(b, p):
    if b.tokens > p.t_1:
        return b.hits - p.w_1 * sqrt(b.since_evicted) - p.w_2 * (b.last_access / 3600.0) - p.w_3
    return b.hits - p.w_1 * sqrt(b.since_evicted) - p.w_2 * (b.last_access / 3600.0)
