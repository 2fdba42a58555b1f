"""NVIDIA Dynamo's KV router: cost = overlap_score_weight x prefill blocks + active blocks, the lowest wins
(its KvRouterConfig defaults: overlap_score_weight 1.0, router_temperature 0, so no sampling). Prefill
blocks: the instance's queued prefill tokens plus this request's uncached ones, in blocks (512 tokens, the
trace's); active blocks: what its running requests hold. FCFS and LRU per instance (vLLM's defaults)."""


def route(s, p):
    return -((s.queued_prefill_tokens + s.uncached_tokens) / 512 + s.active_blocks)


def priority(r, p):
    return r.waiting


def evict(b, p):
    return b.last_access
