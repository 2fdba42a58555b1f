"""SGLang's router, `--policy cache_aware`, as sglang-router 0.3.2 (the model gateway) runs it with the
defaults of its launcher (RouterArgs: cache_threshold 0.3, balance_abs_threshold 64, balance_rel_threshold
1.5). Imbalanced (both thresholds exceeded): the instance with the fewest requests in flight; else, if the
longest prefix of the prompt any instance was sent exceeds the threshold: an instance that was sent it (the
router takes one in the order of its tree's hash map, the simulator the first); else the fewest requests in
flight, the first on a tie (earlier releases sent a miss to the smallest tree; `crucible validate --target
serving --against sglang-router` checks this file against the real router). SGLang's engine default per
instance: FCFS, LRU eviction of its radix cache."""


def route(s, p):
    spread = s.max_outstanding - s.min_outstanding
    if spread > 64 and s.max_outstanding > 1.5 * s.min_outstanding:
        return -s.outstanding
    if s.best_routed_match > 0.3:
        return s.routed_match
    return -s.outstanding


def priority(r, p):
    return r.waiting


def evict(b, p):
    return b.last_access
