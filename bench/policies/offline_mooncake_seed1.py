"""Parent #42 with prompt -> output."""

PARAMS = {
    "w_1": (0.01, 100.0, "log", 59.40045045252959),
    "w_2": (0.1, 1000.0, "log", 3.878421067979099),
    "w_3": (1.0, 10000.0, "log", 1.3524471764436885),
}


def priority(r, p):
    return -r.output + p.w_1 * r.prefix_rank + p.w_2 * r.output + p.w_3 * (1 / (1 + r.output))
