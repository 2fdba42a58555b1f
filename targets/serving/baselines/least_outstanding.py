"""Least outstanding requests: the instance with the fewest requests in flight (Envoy's LEAST_REQUEST, the
`least_request` of vLLM's production-stack router); FCFS and LRU on every instance (vLLM's defaults)."""


def route(s, p):
    return -s.outstanding


def priority(r, p):
    return r.waiting


def evict(b, p):
    return b.last_access
