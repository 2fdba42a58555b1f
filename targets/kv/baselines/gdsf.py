"""GDSF-like: frequency times recompute cost per block, inflated by recency so old values age out.

The cost of recomputing a block grows with the attention context before it, so a block's cost is taken
as its prefix length in blocks of 512 tokens; the clock term is the time of the last access in hours.
"""


def priority(b, p):
    cost = b.prefix_tokens / 512.0
    return b.last_access / 3600.0 + (1 + b.hits) * cost / 64.0
