"""Parent #15 + weighted min(1000000.0 * r.decoding + r.slack, p.c_1) from #8."""

PARAMS = {
    "w_1": (0.01, 100.0, "log", 90.88469812099899),
    "c_1": (0.1, 1000.0, "log", 0.14629200593939962),
    "w_2": (1.0, 10000.0, "log", 9450.254801311557),
}


def priority(r, p):
    return -r.prompt - p.w_1 * r.deadline + p.w_2 * min(1000000.0 * r.decoding + r.slack, p.c_1)
