"""A prefix (radix) KV cache of fixed-size blocks replayed over a trace; the eviction policy is one key.

Mechanism, as in vLLM automatic prefix caching and SGLang RadixAttention:
- the cache holds at most `capacity` blocks; a block is cached only while its parent is (prefix-closed);
- a request hits only on the contiguous cached prefix of its blocks;
- the blocks of the request in flight are pinned; only unpinned leaves (no cached child) are evictable;
- requests are replayed one after another in timestamp order; the counters count from `counted_from`
  on, so the requests before it warm the cache and every feature's history as they would in service.

Scoring happens at eviction time (as in Redis or LHD, not when a block is inserted or hit as in GDSF):
when a request needs room, every evictable leaf is scored with the policy at the request's arrival time,
and the lowest scores are evicted first; a parent that becomes a leaf is scored and joins the queue. So
time features such as `age` are never stale. Ties go to the least recently accessed block.

Scoring again what would score the same is skipped, so the evictions are exactly those of scoring every
leaf at every eviction (`ALL_POPULATION`; tests compare the two on the shipped head, generated traces and
random trees). At one arrival time (Mooncake traces count whole seconds, and most requests share one with
the request before) an untouched block's score changes only through a population statistic, a moving
average or its parent's features; when the key reads none that changed (`population_reads`) since the last
eviction that scored every leaf, an eviction scores only the blocks touched since, and every other score
still holds. The hits of the leaves are kept counted for a key that reads their percentiles (and no age
percentile), so such an eviction visits no leaf unless it scores them all.

A key that reads no feature that changes while a block sits untouched (no time since something, no `now`,
no population statistic, nothing of its parent's) scores a block the same whenever it is scored, so scoring
it again at every eviction is wasted: with POLICY_STATIC_KEY the cache keeps one heap across requests, a
block pushed when it is touched or becomes a leaf, stale entries skipped when popped. It evicts exactly
what POLICY_KEY evicts (tests/targets/kv check both on every baseline); `key_policy` picks it from the
features a key reads.

S3-FIFO and SIEVE are queue mechanisms rather than keys; they are built in (queue_policies.py). The parts
this replay shares with the tiered cache (targets/kv_tiered) are public: the block tree and its access
record (block_tree.py), the eviction heap (eviction_heap.py) and the queues.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit, types

from targets.compiled_helpers import F64, F64_2D, FLAGS, I64, out_of_line
from verifiers.compiler import FUNCTION_TYPE
from verifiers.program import Program

from .block_tree import (
    ACCESSES,
    COUNTERS,
    EVICTIONS,
    FANOUT,
    FRONTIER,
    HITS,
    INSERTED,
    LAST,
    N_STATE,
    NEXT_USE,
    POLICY_KEY,
    POLICY_S3FIFO,
    POLICY_SIEVE,
    POLICY_STATIC_KEY,
    PREV,
    SEQ,
    SKIP_DEPTH,
    SKIP_EVICTIONS,
    SKIP_PARENT,
    SKIP_REUSE,
    SKIP_TOKENS,
    TURN_GAP,
    TURNS,
    access,
    admitted,
    arrival,
    evict_leaf,
    fill_row,
    fold_ewma,
    leaf_add,
    longest_request,
    new_residency,
    trace_tables,
    turn,
)
from .eviction_heap import before, compact, heap_push, heapify, pop_leaf
from .features import N_COLUMNS
from .queue_policies import QUEUES, new_queues, queue_access, queue_evict, queue_insert, queue_shares

POP_HITS, POP_AGE, READS_EWMA, READS_PARENT = 1, 2, 4, 8
ALL_POPULATION = POP_HITS | POP_AGE | READS_EWMA | READS_PARENT
"""Bits of the replay's `population` argument, what a time-varying key reads that changes between two
evictions at one time: the population statistics of hits and of age (each computed only if read), the
moving averages, the parent's features. With all of them every evictable leaf is scored at each eviction."""
_UNREAD = {
    SKIP_TOKENS: frozenset({"tokens", "prefix_tokens"}),
    SKIP_DEPTH: frozenset({"depth"}),
    SKIP_REUSE: frozenset({"reuse_mean", "last_interval"}),
    SKIP_EVICTIONS: frozenset({"evictions", "since_evicted"}),
    SKIP_PARENT: frozenset({"parent_age", "parent_requests"}),
}
"""More bits of `population` (block_tree.SKIP_*): features a time-varying key does not read, which scoring it
then leaves out of the scratch row (each group costs a scored block a read elsewhere in memory or a branch);
none set, all are written."""

TIME_VARYING = frozenset(
    {"now", "age", "lifetime", "reuse_mean", "last_interval", "since_evicted"}
    | {"pop_hits_p50", "pop_hits_p90", "pop_age_p50", "pop_age_p90"}
    | {"parent_age", "parent_requests"}
    | {"ewma_hit_age", "ewma_evict_age"}
)
"""Features that change while a block sits untouched (reuse_mean and last_interval do while it was used
once; the parent's features when a sibling's request passes the parent); a key reading none of them scores
a block alike until the block is touched again."""

_HIT_COUNTS = 256
"""Hits counted one by one for their percentiles; a block with more sends them back to selection."""


def key_reads(program: Program, name: str) -> frozenset[str]:
    """The features a key reads (attributes of its state argument): what the replay must compute for it."""
    fn = program.functions[name]
    state = fn.args.args[0].arg
    return frozenset(
        node.attr
        for node in ast.walk(fn)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == state
    )


def key_policy(program: Program, name: str) -> int:
    """The replay policy for a program's key: the same evictions either way, the cheapest that is exact."""
    return POLICY_KEY if key_reads(program, name) & TIME_VARYING else POLICY_STATIC_KEY


def population_reads(features: frozenset[str]) -> int:
    """The `population` bits of a key's features: the statistics POLICY_KEY computes at each eviction (each
    is a selection over every evictable leaf, and an unread one changes no score) and what else it read
    that can change a score between two evictions at one time (else the scores of the first still hold)."""
    hits = POP_HITS if features & {"pop_hits_p50", "pop_hits_p90"} else 0
    age = POP_AGE if features & {"pop_age_p50", "pop_age_p90"} else 0
    ewma = READS_EWMA if features & {"ewma_hit_age", "ewma_evict_age"} else 0
    parent = READS_PARENT if features & {"parent_age", "parent_requests"} else 0
    return hits | age | ewma | parent | sum(bit for bit, names in _UNREAD.items() if not features & names)


@out_of_line
def _percentiles(values, n):
    """The 50th and 90th percentiles (ranks int(q * (n - 1))) of values[:n], which this reorders.

    Selection rather than a sort: every eviction reads them over all evictable blocks, so this is O(n).
    """
    if n == 0:
        return 0.0, 0.0
    k90 = int(0.9 * (n - 1))
    p90 = _select(values, n, k90)
    return _select(values, k90 + 1, int(0.5 * (n - 1))), p90  # the ranks up to k90 now sit in [0, k90]


@out_of_line
def _count_percentiles(values, n, counts):
    """_percentiles of whole numbers from 0 (hits), by counting them in one pass without reordering; a value
    past the last count but one falls back to selection."""
    counts[:] = 0
    for i in range(n):
        if values[i] >= _HIT_COUNTS:
            return _percentiles(values, n)
        counts[int(values[i])] += 1
    return _ranked(counts, n)


@out_of_line
def _ranked(counts, n):
    """_percentiles of n whole numbers below _HIT_COUNTS given by how many times each occurs."""
    if n == 0:
        return 0.0, 0.0
    k50, k90 = int(0.5 * (n - 1)), int(0.9 * (n - 1))
    seen, p50 = 0, -1.0
    for v in range(_HIT_COUNTS):
        seen += counts[v]
        if p50 < 0.0 and seen > k50:
            p50 = float(v)
        if seen > k90:
            break
    return p50, float(v)


@njit(cache=True, inline="always")
def _count_leaf(leaf_hits, hits, step):
    """Add step to the leaves counted with `hits` hits; the last count holds every leaf with more."""
    leaf_hits[min(int(hits), _HIT_COUNTS)] += step


@njit(cache=True, inline="always")
def _collect(leaves, n_leaves, pinned, now, S, row_block, tmp_hits, tmp_age):
    """The evictable (unpinned) leaves into row_block, their hits and ages beside; returns how many."""
    m = np.int64(0)  # see out_of_line
    for li in range(n_leaves):
        b = leaves[li]
        if not pinned[b]:
            row_block[m] = b
            tmp_hits[m] = S[b, HITS]
            tmp_age[m] = now - S[b, LAST]
            m += 1
    return m


@out_of_line
def _select(a, n, k):
    """The k-th smallest of a[:n] by quickselect with a three-way split (hits repeat a lot); reorders a."""
    lo, hi = 0, n - 1
    while lo < hi:
        x, y, z = a[lo], a[(lo + hi) // 2], a[hi]
        pivot = max(min(x, y), min(max(x, y), z))
        lt, i, gt = lo, lo, hi
        while i <= gt:
            if a[i] < pivot:
                a[lt], a[i] = a[i], a[lt]
                lt += 1
                i += 1
            elif a[i] > pivot:
                a[gt], a[i] = a[i], a[gt]
                gt -= 1
            else:
                i += 1
        if k < lt:
            hi = lt - 1
        elif k > gt:
            lo = gt + 1
        else:
            return pivot
    return a[k]


_NO_QUEUE = -2
"""What _queue_victim returns when the queue it would evict from is empty."""


def replay_arrays(
    f: Any,
    params: np.ndarray,
    policy: int,
    population: int,
    capacity: int,
    times: np.ndarray,
    offsets: np.ndarray,
    blocks: np.ndarray,
    parent: np.ndarray,
    depth: np.ndarray,
    block_tokens: np.ndarray,
    record: bool,
    counted_from: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Replay a trace's requests through the cache under key f (or a built-in queue): its counters, each
    request's hit blocks and, with `record`, each counted eviction's request and block."""
    n_req = offsets.size - 1
    nb = parent.size
    n_acc = blocks.size
    capacity = min(capacity, nb)  # a cache that holds every block of the trace never evicts: sized so
    next_pos, prefix_tokens = trace_tables(blocks, parent, block_tokens)

    S = np.zeros((nb, N_STATE), np.float64)  # zeros, so only the rows of blocks in use are ever paged in
    cached = np.zeros(nb, np.bool_)
    pinned = np.zeros(nb, np.bool_)
    seen = np.zeros(nb, np.bool_)
    nchild = np.zeros(nb, np.int64)
    leaves = np.empty(nb, np.int64)
    leaf_pos = np.full(nb, -1, np.int64)

    max_len = longest_request(offsets)
    rows = capacity + 1 if policy == POLICY_KEY else 0  # evictable leaves at one eviction
    X = np.zeros((1, N_COLUMNS), np.float64)  # the features of the block being scored
    row_block = np.empty(rows, np.int64)
    tmp_hits = np.empty(rows, np.float64)
    tmp_age = np.empty(rows, np.float64)
    hit_counts = np.zeros(_HIT_COUNTS + 1, np.int64)
    leaf_hits = np.zeros(_HIT_COUNTS + 1, np.int64)

    # A key's heap, kept across requests: entries (score, seq), seq the block's last access when pushed
    # (the block is blocks[seq - 1]), valid while the block is a cached leaf last accessed at `seq`; pinned
    # ones popped wait in `held` until the eviction ends. A static key's entry is scored when its block is
    # touched or exposed. A time-varying key's entries hold while `basis` does (the time and the statistics
    # they were scored with): an eviction that finds the same basis scores only the blocks touched since
    # (`dirty`); one that finds another scores every leaf anew.
    keyed = policy in (POLICY_STATIC_KEY, POLICY_KEY)
    room = 2 * capacity + 2 * max_len + 16 if keyed else 0
    H = np.empty(2 * room, np.float64)
    held = np.empty(max_len + 1 if keyed else 0, np.int64)
    held_s = np.empty(max_len + 1 if keyed else 0, np.float64)
    basis = np.full(7, np.nan)  # now, hits p50 and p90, age p50 and p90, the two moving averages
    dirty = np.empty(capacity + max_len if policy == POLICY_KEY else 0, np.int64)
    marked = np.zeros(nb if policy == POLICY_KEY else 0, np.bool_)

    counters = np.zeros(len(COUNTERS), np.int64)
    req_hits = np.zeros(n_req, np.int64)
    req_turns = np.ones(n_req, np.float64)
    req_gaps = np.zeros(n_req, np.float64)  # sum of the intervals between a conversation's turns so far
    ewma = np.zeros(4, np.float64)  # age at a hit and its count, age at an eviction and its count
    ev_req = np.empty(n_acc if record else 0, np.int64)
    ev_block = np.empty(n_acc if record else 0, np.int64)

    _kernel()(
        f,
        params,
        policy,
        population,
        capacity,
        record,
        counted_from,
        (times, offsets, blocks, parent, depth, block_tokens, prefix_tokens, next_pos),
        (S, cached, pinned, seen, nchild, leaves, leaf_pos),
        (X, row_block, tmp_hits, tmp_age, hit_counts, leaf_hits, basis, dirty, marked),
        (H, held, held_s),
        new_queues(nb, policy),  # SIEVE's one queue, S3-FIFO's small, main and ghost; none for a key
        (counters, req_hits, req_turns, req_gaps, ewma, ev_req, ev_block),
    )
    n_ev = counters[5] if record else 0
    return counters, req_hits, ev_req[:n_ev], ev_block[:n_ev]


def _requests(
    f, params, policy, population, capacity, record, counted_from, trace, state, scratch, heap, queues, out
):
    """The requests in turn, over the arrays `replay_arrays` made (the kernel); compiled without reference
    counting, which inlined helpers taking arrays would otherwise pay for with atomic increments at every
    eviction (a quarter of a replay), and safe as it allocates nothing."""
    times, offsets, blocks, parent, depth, block_tokens, prefix_tokens, next_pos = trace
    tree = (parent, depth, block_tokens, prefix_tokens)  # what scoring reads of the trace
    S, cached, pinned, seen, nchild, leaves, leaf_pos = state
    X, row_block, tmp_hits, tmp_age, hit_counts, leaf_hits, basis, dirty, marked = scratch
    H, held, held_s = heap
    ghost_hit = queues[7]
    counters, req_hits, req_turns, req_gaps, ewma, ev_req, ev_block = out
    n_req = offsets.size - 1
    # A key reading the hit percentiles but no age one keeps every leaf's hits counted as leaves come and go
    # and hits grow, so an eviction reads them off without visiting the leaves.
    track = policy == POLICY_KEY and population & POP_HITS != 0 and population & POP_AGE == 0
    static = policy == POLICY_STATIC_KEY
    keyed = static or policy == POLICY_KEY
    queued = policy in (POLICY_SIEVE, POLICY_S3FIFO)
    room = H.size // 2
    shares = queue_shares(capacity)
    evicting = (S, cached, nchild, parent, leaves, leaf_pos, ewma, counters)  # what an eviction changes
    walk = (blocks, next_pos, parent, block_tokens)  # what an access reads of the trace
    zero = np.int64(0)  # see out_of_line
    n_leaves, used, seq, pn, n_dirty, hand = zero, zero, zero, zero, zero, zero - 1
    has_evicted = np.bool_(False)

    for r in range(n_req):
        now, a0, n, k = arrival(r, counted_from, counters, times, offsets, blocks, cached)
        req_hits[r] = k
        turn_gap = turn(r, now, a0, n, times, offsets, blocks, S, req_turns, req_gaps)
        for i in range(n):
            seq += 1
            b = access(r, a0, i, n, now, seq, req_turns[r], turn_gap, walk, S, seen, pinned, counters)
            if i < k:
                counters[2] += 1
                counters[4] += block_tokens[b]
                S[b, HITS] += 1.0
                if track and leaf_pos[b] >= 0:
                    _count_leaf(leaf_hits, S[b, HITS] - 1.0, -1)
                    _count_leaf(leaf_hits, S[b, HITS], 1)
                fold_ewma(ewma, 0, now - S[b, PREV])  # its access before this one
            if queued:
                queue_access(b, i < k, queues)

        need = used + (n - k) - capacity
        if need > 0 and policy == POLICY_KEY:
            m = -1  # the evictable leaves, once collected
            h50, h90, a50, a90 = 0.0, 0.0, 0.0, 0.0
            if track:  # the leaves' counts less the pinned ones
                for v in range(_HIT_COUNTS + 1):  # a copy by slice would need reference counting
                    hit_counts[v] = leaf_hits[v]
                free = n_leaves
                for i in range(k):
                    if nchild[blocks[a0 + i]] == 0:
                        _count_leaf(hit_counts, S[blocks[a0 + i], HITS], -1)
                        free -= 1
                if hit_counts[_HIT_COUNTS] == 0:
                    h50, h90 = _ranked(hit_counts, free)
                else:
                    m = _collect(leaves, n_leaves, pinned, now, S, row_block, tmp_hits, tmp_age)
                    h50, h90 = _percentiles(tmp_hits, m)
            elif population & (POP_HITS | POP_AGE):
                m = _collect(leaves, n_leaves, pinned, now, S, row_block, tmp_hits, tmp_age)
                if population & POP_HITS:
                    h50, h90 = _count_percentiles(tmp_hits, m, hit_counts)
                if population & POP_AGE:
                    a50, a90 = _percentiles(tmp_age, m)
            X[0, 15], X[0, 16], X[0, 17], X[0, 18] = h50, h90, a50, a90
            X[0, 24], X[0, 25] = ewma[0], ewma[2]  # as the request arrives, like the percentiles
            same = not population & READS_PARENT and now == basis[0]
            same = same and h50 == basis[1] and h90 == basis[2] and a50 == basis[3] and a90 == basis[4]
            if population & READS_EWMA:
                same = same and ewma[0] == basis[5] and ewma[2] == basis[6]
            if same:  # every entry's score is what scoring now gives: score only what was touched since
                if pn + n_dirty + need > room:
                    pn = compact(H, pn, cached, nchild, S, blocks)
                for i in range(n_dirty):
                    b = dirty[i]
                    marked[b] = False
                    if cached[b] and nchild[b] == 0 and not pinned[b]:
                        s = _score_now(f, params, X, b, now, r + 1.0, S, tree, population)
                        pn = heap_push(H, pn, s, S[b, SEQ])
            else:
                for i in range(n_dirty):
                    marked[dirty[i]] = False
                # the leaves themselves where no statistic collected them, else those collected (unpinned)
                src, count = (leaves, n_leaves) if m < 0 else (row_block, m)
                pn = zero
                for j in range(count):
                    b = src[j]
                    if pinned[b]:
                        continue
                    s = _score_now(f, params, X, b, now, r + 1.0, S, tree, population)
                    H[2 * pn], H[2 * pn + 1] = s, S[b, SEQ]
                    pn += 1
                heapify(H, pn)
                basis[0], basis[1], basis[2], basis[3], basis[4] = now, h50, h90, a50, a90
                basis[5], basis[6] = ewma[0], ewma[2]
            n_dirty = 0
        if need > 0 and keyed:
            n_held, chained, chained_s = 0, -1, 0.0
            while need > 0 and (chained >= 0 or pn > 0):
                if chained >= 0:  # a parent just exposed and ranked before every entry: no heap round trip
                    b, chained = chained, -1
                else:
                    b, pn, n_held = pop_leaf(H, pn, blocks, cached, nchild, pinned, S, held, held_s, n_held)
                    if b < 0:
                        break
                n_leaves, p = evict_leaf(b, now, evicting, n_leaves)
                if track:
                    _count_leaf(leaf_hits, S[b, HITS], -1)
                    if p >= 0:
                        _count_leaf(leaf_hits, S[p, HITS], 1)
                if p >= 0 and not pinned[p]:  # the parent just became an evictable leaf: score it now
                    if static:
                        chained_s = _score(f, params, X, p, now, S, depth, block_tokens, prefix_tokens)
                    else:
                        chained_s = _score_now(f, params, X, p, now, r + 1.0, S, tree, population)
                    if pn == 0 or before(chained_s, S[p, SEQ], H[0], H[1]):
                        chained = p
                    else:
                        pn = heap_push(H, pn, chained_s, S[p, SEQ])
                if record:  # the eviction just counted
                    ev_req[counters[5] - 1] = r
                    ev_block[counters[5] - 1] = b
                need -= 1
            if chained >= 0:
                pn = heap_push(H, pn, chained_s, S[chained, SEQ])
            for i in range(n_held):
                pn = heap_push(H, pn, held_s[i], S[held[i], SEQ])
        elif need > 0:
            steps, limit = zero, 4 * (used + 1)
            while need > 0:
                o, n_leaves, hand, steps, has_evicted = queue_evict(
                    policy, hand, steps, limit, has_evicted, pinned, shares, queues, now, evicting, n_leaves
                )
                if o < 0:
                    break
                if record:
                    ev_req[counters[5] - 1] = r
                    ev_block[counters[5] - 1] = o
                need -= 1

        stop = admitted(n, need, counters)
        for i in range(k, stop):
            b = blocks[a0 + i]
            cached[b] = True
            new_residency(b, now, S)
            n_leaves, covered = leaf_add(b, parent, nchild, leaves, leaf_pos, n_leaves)
            if track and covered >= 0:
                _count_leaf(leaf_hits, S[covered, HITS], -1)
            if track:
                _count_leaf(leaf_hits, 0.0, 1)
            if queued:
                queue_insert(b, policy, has_evicted, shares[0], queues)
        used = min(capacity, used + n - k)  # full, or all it held and the misses

        for i in range(n):
            pinned[blocks[a0 + i]] = False
            if queued:
                ghost_hit[blocks[a0 + i]] = False
        if static:  # the request's blocks were touched: each that is now an evictable leaf is scored anew
            if pn + n > room:
                pn = compact(H, pn, cached, nchild, S, blocks)
            for i in range(n):
                b = blocks[a0 + i]
                if cached[b] and nchild[b] == 0:
                    s = _score(f, params, X, b, now, S, depth, block_tokens, prefix_tokens)
                    pn = heap_push(H, pn, s, S[b, SEQ])
        elif policy == POLICY_KEY:  # scored at the next eviction if the scores there still hold
            for i in range(n):
                if now != basis[0] or n_dirty == dirty.size:
                    basis[0] = np.nan  # another time, or too many to track: the next one scores every leaf
                    break
                b = blocks[a0 + i]
                if not marked[b]:
                    dirty[n_dirty] = b
                    marked[b] = True
                    n_dirty += 1


@njit(cache=True, inline="always")
def _score(f, params, X, b, now, S, depth, block_tokens, prefix_tokens):
    """Block b's score under a key reading no TIME_VARYING feature (row 0 of X as scratch: only the other
    columns are written, the rest stay 0); NaN ranks lowest, as in POLICY_KEY."""
    X[0, 1] = S[b, LAST]
    X[0, 2] = S[b, INSERTED]
    X[0, 5] = S[b, HITS]
    X[0, 6] = S[b, ACCESSES]
    X[0, 7] = depth[b]
    X[0, 8] = block_tokens[b]
    X[0, 9] = prefix_tokens[b]
    X[0, 10] = S[b, FANOUT]
    X[0, 13] = S[b, EVICTIONS]
    X[0, 19] = S[b, FRONTIER]
    X[0, 22] = S[b, TURNS]
    X[0, 23] = S[b, TURN_GAP]
    X[0, 26] = S[b, NEXT_USE]
    s = f(X, 0, params)
    return s if s == s else -np.inf


@njit(cache=True, inline="always")
def _score_now(f, params, X, b, now, requests, S, tree, skip):
    """Block b's score at `now` under any key (the population columns of X are the caller's); NaN ranks
    lowest."""
    fill_row(X, b, now, requests, S, tree, skip)
    s = f(X, 0, params)
    return s if s == s else -np.inf


_SIGNATURE = types.void(
    FUNCTION_TYPE,
    F64,
    types.int64,
    types.int64,
    types.int64,
    types.boolean,
    types.int64,
    types.Tuple((F64, I64, I64, I64, I64, I64, F64, F64)),
    types.Tuple((F64_2D, FLAGS, FLAGS, FLAGS, I64, I64, I64)),
    types.Tuple((F64_2D, I64, F64, F64, I64, I64, F64, I64, FLAGS)),
    types.Tuple((F64, I64, F64)),
    QUEUES,
    types.Tuple((I64, I64, F64, F64, F64, I64, I64)),
)


@functools.cache
def _kernel() -> Callable[..., None]:
    """The replay's compiled loop, compiled on first use and cached on disk by numba."""
    return njit(_SIGNATURE, cache=True, _nrt=False)(_requests)
