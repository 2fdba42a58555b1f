"""Grouped by shared prefix: the batch sorted by prompt prefix, so sequences that share one run together
while it is cached (the order SGLang's offline engine benefits from with its radix cache)."""


def priority(r, p):
    return -r.prefix_rank
