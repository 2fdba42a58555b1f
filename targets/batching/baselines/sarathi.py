"""Sarathi-Serve: decodes first (stall-free batching), then prefills in arrival order; 512-token chunks."""

PARAMS = {"token_budget": (64.0, 4096.0, "log", 512.0)}


def priority(r, p):
    return 1.0e6 * r.decoding + r.waiting
