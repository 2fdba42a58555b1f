"""Earliest deadline first, each request on the fastest plan the free GPUs allow."""


def score(o, p):
    return 1.0e9 - o.deadline - 1.0e-3 * o.predicted_s
