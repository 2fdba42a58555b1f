"""llm-d's inference scheduler, its default scorers and weights: prefix-cache 3 (the share of the prompt's
blocks cached there), queue 2 (the waiting queue scaled between the fleet's shortest, 1, and longest, 0)
and KV-cache utilization 2 (1 - the share of KV blocks in use); the highest weighted sum wins. FCFS and LRU
per instance (vLLM's defaults, the engine llm-d runs)."""


def route(s, p):
    queue = 1.0
    if s.max_queued > s.min_queued:
        queue = (s.max_queued - s.queued) / (s.max_queued - s.min_queued)
    return 3 * s.match + 2 * queue + 2 * (1 - s.kv_used)


def priority(r, p):
    return r.waiting


def evict(b, p):
    return b.last_access
