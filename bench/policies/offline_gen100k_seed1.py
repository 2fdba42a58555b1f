"""Parent fcfs_tuned - weighted p.w_1 * min(r.prompt, p.c_1) from #40."""

PARAMS = {
    "token_budget": (512.0, 32768.0, "log", 7581.954068147883),
    "max_seqs": (16.0, 2048.0, "log", 367.02810221434095),
    "c_1": (10.0, 100000.0, "log", 2211.0395159845953),
    "w_1": (0.1, 1000.0, "log", 1.525998687335352),
    "w_2": (0.1, 1000.0, "log", 0.3091867003896139),
}


def priority(r, p):
    return -r.order - p.w_2 * (p.w_1 * min(r.prompt, p.c_1))
