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

S3-FIFO and SIEVE are queue mechanisms rather than keys; they are built in here and skip blocks that
are not evictable (pinned or with cached children) as if those were recently used. On a flat stream they
give the same hits as libCacheSim 0.3.5 (S3FIFO.c, Sieve.c), as test_libcachesim_differential.py checks.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable

import numpy as np
from numba import njit, types

from verifiers.compiler import FUNCTION_TYPE
from verifiers.program import Program

from .features import N_COLUMNS

POLICY_KEY, POLICY_SIEVE, POLICY_S3FIFO, POLICY_STATIC_KEY = 0, 1, 2, 3
POP_HITS, POP_AGE, READS_EWMA, READS_PARENT = 1, 2, 4, 8
ALL_POPULATION = POP_HITS | POP_AGE | READS_EWMA | READS_PARENT
"""Bits of the replay's `population` argument, what a time-varying key reads that changes between two
evictions at one time: the population statistics of hits and of age (each computed only if read), the
moving averages, the parent's features. With all of them every evictable leaf is scored at each eviction."""
SKIP_TOKENS, SKIP_DEPTH, SKIP_REUSE, SKIP_EVICTIONS, SKIP_PARENT = 16, 32, 64, 128, 256
_UNREAD = {
    SKIP_TOKENS: frozenset({"tokens", "prefix_tokens"}),
    SKIP_DEPTH: frozenset({"depth"}),
    SKIP_REUSE: frozenset({"reuse_mean", "last_interval"}),
    SKIP_EVICTIONS: frozenset({"evictions", "since_evicted"}),
    SKIP_PARENT: frozenset({"parent_age", "parent_requests"}),
}
"""More bits of `population`: features a time-varying key does not read, which scoring it then leaves out of
the scratch row (each group costs a scored block a read elsewhere in memory or a branch); none set, all are
written."""

TIME_VARYING = frozenset(
    {"now", "age", "lifetime", "reuse_mean", "last_interval", "since_evicted"}
    | {"pop_hits_p50", "pop_hits_p90", "pop_age_p50", "pop_age_p90"}
    | {"parent_age", "parent_requests"}
    | {"ewma_hit_age", "ewma_evict_age"}
)
"""Features that change while a block sits untouched (reuse_mean and last_interval do while it was used
once; the parent's features when a sibling's request passes the parent); a key reading none of them scores
a block alike until the block is touched again."""

COUNTERS = ("requests", "accesses", "hits", "tokens", "hit_tokens", "evictions", "uncached")
"""Names of the entries of the counters array that `replay` returns, in order (the recorded evictions are
those counted)."""

_NEVER_S = 1.0e6
_NO_NEXT_USE = 1.0e12
_EWMA_WEIGHT = 0.01
_HIT_COUNTS = 256
"""Hits counted one by one for their percentiles; a block with more sends them back to selection."""
"""Weight of the newest value in the population's moving averages (about the last hundred hits, evictions)."""

# Per-block state columns.
(
    _LAST,
    _INSERTED,
    _FIRST,
    _PREV,
    _HITS,
    _ACCESSES,
    _EVICTIONS,
    _EVICTED_AT,
    _FANOUT,
    _NEXT_USE,
    _SEQ,
    _FRONTIER,
    _REQUEST,
    _TURNS,
    _TURN_GAP,
) = range(15)
_N_STATE = 16  # 15 columns and one unused: 128-byte rows, which cache lines hold evenly (faster than 120)

# Queue ids for the built-in FIFO mechanisms; each block sits in at most one queue (a ghost is not cached).
_Q_NONE, _Q_SMALL, _Q_MAIN, _Q_GHOST = 0, 1, 2, 3

# S3-FIFO as libCacheSim 0.3.5 runs it with its defaults (S3FIFO.c): a small FIFO of int(0.1 * capacity)
# blocks, a main FIFO of the rest with a 2-bit clock, and a ghost FIFO of int(0.9 * capacity) evicted ids.
# A miss found in the ghost goes to main, any other to small, except that until the first eviction a full
# small sends it to main. Each eviction picks its queue once: main while main is over its share or small is
# empty, else small. Small moves a block with at least 2 hits to main and evicts the rest into the ghost;
# main reinserts a hit block with its count less one. Unlike libCacheSim, small holds at least one block,
# so caches under 20 blocks still admit.
_S3_SMALL_SHARE = 0.1
_S3_GHOST_SHARE = 0.9
_S3_MOVE_TO_MAIN = 2


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


@njit(cache=True, inline="always")
def _heap_push(H, n, s, q):
    """Add the entry (score s, seq q) to the heap of n entries in H: four children an entry (half the levels
    of a binary heap), entry i at H[2i] and H[2i + 1] (a flat array: its index is a shift, where a row of
    two would be a multiplication by a stride)."""
    i = n
    while i > 0 and _before(s, q, H[(i - 1) // 4 * 2], H[(i - 1) // 4 * 2 + 1]):
        up = (i - 1) // 4
        H[2 * i], H[2 * i + 1] = H[2 * up], H[2 * up + 1]
        i = up
    H[2 * i], H[2 * i + 1] = s, q
    return n + 1


@njit(cache=True, inline="always")
def _heap_pop(H, n):
    """Take the top entry out; returns the entries left."""
    n -= 1
    _sift_down(H, n, 0, H[2 * n], H[2 * n + 1])
    return n


@njit(cache=True)
def _heapify(H, n):
    """Order n unordered entries into a heap in O(n), cheaper than n pushes when a whole cache is scored."""
    for i in range((n - 2) // 4, -1, -1):
        _sift_down(H, n, i, H[2 * i], H[2 * i + 1])


@njit(cache=True, inline="always")
def _sift_down(H, n, i, s, q):
    """Put the entry (s, q) in the hole at i of the heap's n entries bottom-up (Floyd): the hole goes down
    the first children to the bottom and the entry climbs back, as an entry taken from the bottom mostly
    belongs low. The first of four children is found by adding comparisons: no branch to mispredict."""
    top, c = i, 4 * i + 1
    while c + 3 < n:
        a = c + _before(H[2 * c + 2], H[2 * c + 3], H[2 * c], H[2 * c + 1])
        d = c + 2 + _before(H[2 * c + 6], H[2 * c + 7], H[2 * c + 4], H[2 * c + 5])
        m = a + (d - a) * _before(H[2 * d], H[2 * d + 1], H[2 * a], H[2 * a + 1])
        H[2 * i], H[2 * i + 1] = H[2 * m], H[2 * m + 1]
        i, c = m, 4 * m + 1
    if c < n:  # one to three children, at the bottom
        m = c
        for k in range(c + 1, min(c + 4, n)):
            if _before(H[2 * k], H[2 * k + 1], H[2 * m], H[2 * m + 1]):
                m = k
        H[2 * i], H[2 * i + 1] = H[2 * m], H[2 * m + 1]
        i = m
    while i > top and _before(s, q, H[(i - 1) // 4 * 2], H[(i - 1) // 4 * 2 + 1]):
        up = (i - 1) // 4
        H[2 * i], H[2 * i + 1] = H[2 * up], H[2 * up + 1]
        i = up
    H[2 * i], H[2 * i + 1] = s, q


@njit(cache=True, inline="always")
def _fill_row(X, b, now, requests, S, tree, skip):
    """Write the registry features of block b at time `now`, after `requests` requests, into X's one row
    (column order of BLOCK_FEATURES; the population columns 15 to 18, 24 and 25 are the caller's), but those
    of the groups in `skip` (SKIP_* bits), which the key does not read; `tree` holds the trace's per-block
    parent, depth, tokens and prefix tokens."""
    parent, depth, block_tokens, prefix_tokens = tree
    accesses = S[b, _ACCESSES]
    X[0, 0] = now
    X[0, 1] = S[b, _LAST]
    X[0, 2] = S[b, _INSERTED]
    X[0, 3] = now - S[b, _LAST]
    X[0, 4] = now - S[b, _INSERTED]
    X[0, 5] = S[b, _HITS]
    X[0, 6] = accesses
    if not skip & SKIP_DEPTH:
        X[0, 7] = depth[b]
    if not skip & SKIP_TOKENS:
        X[0, 8] = block_tokens[b]
        X[0, 9] = prefix_tokens[b]
    X[0, 10] = S[b, _FANOUT]
    if not skip & SKIP_REUSE:
        if accesses >= 2.0:
            X[0, 11] = (S[b, _LAST] - S[b, _FIRST]) / (accesses - 1.0)
            X[0, 12] = S[b, _LAST] - S[b, _PREV]
        else:
            X[0, 11] = now - S[b, _FIRST]
            X[0, 12] = now - S[b, _FIRST]
    if not skip & SKIP_EVICTIONS:
        X[0, 13] = S[b, _EVICTIONS]
        X[0, 14] = _NEVER_S if S[b, _EVICTIONS] == 0.0 else min(now - S[b, _EVICTED_AT], _NEVER_S)
    X[0, 19] = S[b, _FRONTIER]
    if not skip & SKIP_PARENT:  # the root is passed by every request, this one too
        p = parent[b]
        X[0, 20] = now - S[p, _LAST] if p >= 0 else 0.0
        X[0, 21] = S[p, _ACCESSES] if p >= 0 else requests
    X[0, 22] = S[b, _TURNS]
    X[0, 23] = S[b, _TURN_GAP]
    X[0, 26] = S[b, _NEXT_USE]


@njit(cache=True, inline="always")
def _touch(b, last, r, now, seq, turns, turn_gap, next_use, S, seen, parent):
    """Record request r's access of block b at `now`, access number `seq` (`last`: the request ends at b): the
    block's first, previous and latest access and their count, where the request left it, its conversation
    (turns, mean gap) and, for the Belady bound, the position of its next use; its parent's fanout if new."""
    if not seen[b]:
        seen[b] = True
        if parent[b] >= 0:
            S[parent[b], _FANOUT] += 1.0
    if S[b, _ACCESSES] == 0.0:
        S[b, _FIRST] = now
        S[b, _PREV] = now
    else:
        S[b, _PREV] = S[b, _LAST]
    S[b, _LAST] = now
    S[b, _ACCESSES] += 1.0
    S[b, _SEQ] = seq
    S[b, _FRONTIER] = 1.0 if last else 0.0
    S[b, _REQUEST] = r
    S[b, _TURNS] = turns
    S[b, _TURN_GAP] = turn_gap
    S[b, _NEXT_USE] = next_use


@njit(cache=True, inline="always")
def _pop_leaf(H, pn, blocks, member, children, pinned, S, held, held_s, n_held):
    """Pop a key's heap down to its first entry still valid (the block a `member` with no `children`, not
    touched since it was pushed); pinned ones popped on the way wait in `held`. Returns the block (-1 if the
    heap ran out), the entries left and how many are held."""
    while pn > 0:
        score, pushed_seq = H[0], H[1]
        b = blocks[int(pushed_seq) - 1]  # seq counts the accesses from 1
        pn = _heap_pop(H, pn)
        if not (member[b] and children[b] == 0 and pushed_seq == S[b, _SEQ]):
            continue  # stale: evicted, grown a child, or touched (and pushed again) since
        if pinned[b]:
            held[n_held], held_s[n_held] = b, score
            n_held += 1
            continue
        return b, pn, n_held
    return -1, pn, n_held


@njit(cache=True, inline="always")
def _turn(r, now, a0, n, times, offsets, blocks, S, req_turns, req_gaps):
    """Whether request r is the next turn of an earlier one, and if so count it in that conversation.

    r continues request j when the longest prefix of r that earlier requests used is more than a first
    block and covers all of j, the latest request through its deepest block, but j's last block (which a
    next turn replaces when it was partial). Prefixes, not cache contents: a conversation is in the trace.
    """
    seen = 0
    while seen < n and S[blocks[a0 + seen], _ACCESSES] > 0.0:
        seen += 1
    if seen < 2:
        return
    j = int(S[blocks[a0 + seen - 1], _REQUEST])
    if seen >= offsets[j + 1] - offsets[j] - 1:
        req_turns[r] = req_turns[j] + 1.0
        req_gaps[r] = req_gaps[j] + (now - times[j])


@njit(cache=True, inline="always")
def _ewma(ewma, i, value):
    """Fold a value into the moving average at ewma[i] (its count at ewma[i + 1]); the first one sets it."""
    ewma[i] = value if ewma[i + 1] == 0.0 else ewma[i] + _EWMA_WEIGHT * (value - ewma[i])
    ewma[i + 1] += 1.0


@njit(cache=True)
def _percentiles(values, n):
    """The 50th and 90th percentiles (ranks int(q * (n - 1))) of values[:n], which this reorders.

    Selection rather than a sort: every eviction reads them over all evictable blocks, so this is O(n).
    """
    if n == 0:
        return 0.0, 0.0
    k90 = int(0.9 * (n - 1))
    p90 = _select(values, n, k90)
    return _select(values, k90 + 1, int(0.5 * (n - 1))), p90  # the ranks up to k90 now sit in [0, k90]


@njit(cache=True)
def _count_percentiles(values, n, counts):
    """_percentiles of whole numbers from 0 (hits), by counting them in one pass without reordering; a value
    past the last count but one falls back to selection."""
    counts[:] = 0
    for i in range(n):
        if values[i] >= _HIT_COUNTS:
            return _percentiles(values, n)
        counts[int(values[i])] += 1
    return _ranked(counts, n)


@njit(cache=True)
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
    m = 0
    for li in range(n_leaves):
        b = leaves[li]
        if not pinned[b]:
            row_block[m] = b
            tmp_hits[m] = S[b, _HITS]
            tmp_age[m] = now - S[b, _LAST]
            m += 1
    return m


@njit(cache=True)
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


@njit(cache=True, inline="always")
def _q_push_head(q, b, qid, nxt, prv, head, tail, size):
    """Insert b at the head (newest end) of queue q; nxt points toward the tail, prv toward the head."""
    qid[b] = q
    prv[b] = -1
    nxt[b] = head[q]
    if head[q] >= 0:
        prv[head[q]] = b
    head[q] = b
    if tail[q] < 0:
        tail[q] = b
    size[q] += 1


@njit(cache=True, inline="always")
def _q_remove(b, qid, nxt, prv, head, tail, size):
    q = qid[b]
    if prv[b] >= 0:
        nxt[prv[b]] = nxt[b]
    else:
        head[q] = nxt[b]
    if nxt[b] >= 0:
        prv[nxt[b]] = prv[b]
    else:
        tail[q] = prv[b]
    qid[b] = _Q_NONE
    size[q] -= 1


@njit(cache=True, inline="always")
def _queue_access(b, hit, queues):
    """A queue policy sees request access b: a hit counts toward its frequency (at most 3, as both keep
    it); a miss found in S3-FIFO's ghost leaves it, marked to go to main when inserted."""
    qid, nxt, prv, head, tail, size, freq, ghost_hit = queues
    if hit:
        freq[b] = min(freq[b] + 1, 3)
    elif qid[b] == _Q_GHOST:  # seen at the miss, before evictions can push it out
        _q_remove(b, qid, nxt, prv, head, tail, size)
        ghost_hit[b] = True


@njit(cache=True, inline="always")
def _queue_insert(b, policy, has_evicted, small_cap, queues):
    """A block entering the cache joins SIEVE's queue, or S3-FIFO's main (back from its ghost, or while small
    is full before the first eviction) or small FIFO."""
    qid, nxt, prv, head, tail, size, freq, ghost_hit = queues
    freq[b] = 0
    if policy == POLICY_SIEVE:
        _q_push_head(_Q_MAIN, b, qid, nxt, prv, head, tail, size)
    elif policy == POLICY_S3FIFO:
        to_main = ghost_hit[b] or (not has_evicted and size[_Q_SMALL] >= small_cap)
        _q_push_head(_Q_MAIN if to_main else _Q_SMALL, b, qid, nxt, prv, head, tail, size)


_NO_QUEUE = -2
"""What _queue_victim returns when the queue it would evict from is empty."""


@njit(cache=True, inline="always")
def _queue_victim(policy, hand, steps, limit, pinned, nchild, queues, main_cap, ghost_cap):
    """One round of a queue policy: SIEVE moves its hand one block, S3-FIFO picks small or main once and
    pops it until a block leaves (moved blocks as each policy moves them; pinned blocks and blocks with cached
    children go back as if recently used). Returns the block to evict, taken out of its queue (-1 if none
    this round, _NO_QUEUE if the queue is empty), the hand and the steps taken so far (at most `limit`)."""
    qid, nxt, prv, head, tail, size, freq, _ = queues
    if policy == POLICY_SIEVE:
        steps += 1
        o = hand if hand >= 0 else tail[_Q_MAIN]
        if o < 0:
            return _NO_QUEUE, hand, steps
        hand = prv[o] if prv[o] >= 0 else tail[_Q_MAIN]
        if freq[o] > 0:
            freq[o] = 0
            return -1, hand, steps
        if pinned[o] or nchild[o] > 0:
            return -1, hand, steps
        if hand == o:
            hand = -1
        _q_remove(o, qid, nxt, prv, head, tail, size)
        return o, hand, steps
    q = _Q_MAIN if size[_Q_MAIN] > main_cap or size[_Q_SMALL] == 0 else _Q_SMALL
    if size[q] == 0:
        return _NO_QUEUE, hand, steps
    o = -1
    while o < 0 and size[q] > 0 and steps < limit:
        steps += 1
        c = tail[q]
        _q_remove(c, qid, nxt, prv, head, tail, size)
        if pinned[c] or nchild[c] > 0:
            _q_push_head(q, c, qid, nxt, prv, head, tail, size)
        elif q == _Q_SMALL and freq[c] >= _S3_MOVE_TO_MAIN:
            freq[c] = 0
            _q_push_head(_Q_MAIN, c, qid, nxt, prv, head, tail, size)
        elif q == _Q_MAIN and freq[c] >= 1:
            freq[c] -= 1
            _q_push_head(_Q_MAIN, c, qid, nxt, prv, head, tail, size)
        else:
            o = c
    if o >= 0 and q == _Q_SMALL and ghost_cap > 0:
        if size[_Q_GHOST] >= ghost_cap:
            _q_remove(tail[_Q_GHOST], qid, nxt, prv, head, tail, size)
        _q_push_head(_Q_GHOST, o, qid, nxt, prv, head, tail, size)
    return o, hand, steps


@njit(cache=True, inline="always")
def _queue_next(policy, hand, steps, limit, has_evicted, pinned, nchild, queues, main_cap, ghost_cap):
    """The next block a queue policy evicts, taken out of its queue, or -1 if it gives none within `limit`
    steps; with the hand, the steps taken and whether S3-FIFO has evicted yet."""
    while steps < limit:
        has_evicted = has_evicted or policy == POLICY_S3FIFO
        o, hand, steps = _queue_victim(
            policy, hand, steps, limit, pinned, nchild, queues, main_cap, ghost_cap
        )
        if o == _NO_QUEUE:
            break
        if o >= 0:
            return o, hand, steps, has_evicted
    return -1, hand, steps, has_evicted


@njit(cache=True)
def _trace_tables(blocks, parent, block_tokens):
    """What the replay derives from the trace: the position of each access's next use (offline knowledge,
    for the Belady bound; _NO_NEXT_USE if none) and each block's prefix tokens."""
    next_pos = np.empty(blocks.size, np.float64)
    last_pos = np.full(parent.size, _NO_NEXT_USE)
    for a in range(blocks.size - 1, -1, -1):
        next_pos[a] = last_pos[blocks[a]]
        last_pos[blocks[a]] = a
    prefix_tokens = np.zeros(parent.size, np.float64)
    for b in range(parent.size):  # dense ids are in first-seen order, so a parent precedes its children
        prefix_tokens[b] = block_tokens[b] + (prefix_tokens[parent[b]] if parent[b] >= 0 else 0.0)
    return next_pos, prefix_tokens


def _replay(
    f,
    params,
    policy,
    population,
    capacity,
    times,
    offsets,
    blocks,
    parent,
    depth,
    block_tokens,
    record,
    counted_from,
):
    n_req = offsets.size - 1
    nb = parent.size
    n_acc = blocks.size
    next_pos, prefix_tokens = _trace_tables(blocks, parent, block_tokens)

    S = np.zeros((nb, _N_STATE), np.float64)  # zeros, so only the rows of blocks in use are ever paged in
    cached = np.zeros(nb, np.bool_)
    pinned = np.zeros(nb, np.bool_)
    seen = np.zeros(nb, np.bool_)
    nchild = np.zeros(nb, np.int64)
    leaves = np.empty(nb, np.int64)
    leaf_pos = np.full(nb, -1, np.int64)

    max_len = 0
    for r in range(n_req):
        max_len = max(max_len, offsets[r + 1] - offsets[r])
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

    # Queues for SIEVE (one queue) and S3-FIFO (small, main and a FIFO ghost of evicted ids); a key's
    # replay allocates none of their per-block arrays.
    queued = policy in (POLICY_SIEVE, POLICY_S3FIFO)
    nq = nb if queued else 0
    qid = np.zeros(nq, np.int64)
    nxt = np.full(nq, -1, np.int64)
    prv = np.full(nq, -1, np.int64)
    head = np.full(4, -1, np.int64)
    tail = np.full(4, -1, np.int64)
    size = np.zeros(4, np.int64)
    freq = np.zeros(nq, np.int64)
    ghost_hit = np.zeros(nq, np.bool_)

    counters = np.zeros(len(COUNTERS), np.int64)
    req_hits = np.zeros(n_req, np.int64)
    req_turns = np.ones(n_req, np.float64)
    req_gaps = np.zeros(n_req, np.float64)  # sum of the intervals between a conversation's turns so far
    ewma = np.zeros(4, np.float64)  # age at a hit and its count, age at an eviction and its count
    ev_req = np.empty(n_acc if record else 0, np.int64)
    ev_block = np.empty(n_acc if record else 0, np.int64)

    _requests(
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
        (qid, nxt, prv, head, tail, size, freq, ghost_hit),
        (counters, req_hits, req_turns, req_gaps, ewma, ev_req, ev_block),
    )
    n_ev = counters[5] if record else 0
    return counters, req_hits, ev_req[:n_ev], ev_block[:n_ev]


@njit(cache=True, _nrt=False)
def _requests(
    f, params, policy, population, capacity, record, counted_from, trace, state, scratch, heap, queues, out
):
    """The requests in turn, over the arrays _replay made; compiled without reference counting, which inlined
    helpers taking arrays would otherwise pay for with atomic increments at every eviction (a quarter of a
    replay), and safe as it allocates nothing."""
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
    small_cap = max(1, int(_S3_SMALL_SHARE * capacity))
    main_cap = capacity - small_cap
    ghost_cap = int(_S3_GHOST_SHARE * capacity)
    n_leaves, used, seq, pn, n_dirty, hand, has_evicted = 0, 0, 0, 0, 0, -1, False

    for r in range(n_req):
        now, a0, n, k = _arrival(r, counted_from, counters, times, offsets, blocks, cached)
        req_hits[r] = k
        _turn(r, now, a0, n, times, offsets, blocks, S, req_turns, req_gaps)
        turn_gap = req_gaps[r] / (req_turns[r] - 1.0) if req_turns[r] > 1.0 else 0.0

        for i in range(n):
            b = blocks[a0 + i]
            seq += 1
            _touch(b, i == n - 1, r, now, seq, req_turns[r], turn_gap, next_pos[a0 + i], S, seen, parent)
            counters[1] += 1
            counters[3] += block_tokens[b]
            if i < k:
                counters[2] += 1
                counters[4] += block_tokens[b]
                S[b, _HITS] += 1.0
                if track and leaf_pos[b] >= 0:
                    _count_leaf(leaf_hits, S[b, _HITS] - 1.0, -1)
                    _count_leaf(leaf_hits, S[b, _HITS], 1)
                _ewma(ewma, 0, now - S[b, _PREV])  # its access before this one
                pinned[b] = True
            if queued:
                _queue_access(b, i < k, queues)

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
                        _count_leaf(hit_counts, S[blocks[a0 + i], _HITS], -1)
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
                    pn = _compact(H, pn, cached, nchild, S, blocks)
                for i in range(n_dirty):
                    b = dirty[i]
                    marked[b] = False
                    if cached[b] and nchild[b] == 0 and not pinned[b]:
                        s = _score_now(f, params, X, b, now, r + 1.0, S, tree, population)
                        pn = _heap_push(H, pn, s, S[b, _SEQ])
            else:
                for i in range(n_dirty):
                    marked[dirty[i]] = False
                # the leaves themselves where no statistic collected them, else those collected (unpinned)
                src, count = (leaves, n_leaves) if m < 0 else (row_block, m)
                pn = 0
                for j in range(count):
                    b = src[j]
                    if pinned[b]:
                        continue
                    s = _score_now(f, params, X, b, now, r + 1.0, S, tree, population)
                    H[2 * pn], H[2 * pn + 1] = s, S[b, _SEQ]
                    pn += 1
                _heapify(H, pn)
                basis[0], basis[1], basis[2], basis[3], basis[4] = now, h50, h90, a50, a90
                basis[5], basis[6] = ewma[0], ewma[2]
            n_dirty = 0
        if need > 0 and keyed:
            n_held, chained, chained_s = 0, -1, 0.0
            while need > 0 and (chained >= 0 or pn > 0):
                if chained >= 0:  # a parent just exposed and ranked before every entry: no heap round trip
                    b, chained = chained, -1
                else:
                    b, pn, n_held = _pop_leaf(H, pn, blocks, cached, nchild, pinned, S, held, held_s, n_held)
                    if b < 0:
                        break
                n_leaves, p = _drop(b, now, S, cached, nchild, parent, leaves, leaf_pos, n_leaves, ewma)
                if track:
                    _count_leaf(leaf_hits, S[b, _HITS], -1)
                    if p >= 0:
                        _count_leaf(leaf_hits, S[p, _HITS], 1)
                if p >= 0 and not pinned[p]:  # the parent just became an evictable leaf: score it now
                    if static:
                        chained_s = _score(f, params, X, p, now, S, depth, block_tokens, prefix_tokens)
                    else:
                        chained_s = _score_now(f, params, X, p, now, r + 1.0, S, tree, population)
                    if pn == 0 or _before(chained_s, S[p, _SEQ], H[0], H[1]):
                        chained = p
                    else:
                        pn = _heap_push(H, pn, chained_s, S[p, _SEQ])
                if record:
                    ev_req[counters[5]] = r
                    ev_block[counters[5]] = b
                counters[5] += 1
                used -= 1
                need -= 1
            if chained >= 0:
                pn = _heap_push(H, pn, chained_s, S[chained, _SEQ])
            for i in range(n_held):
                pn = _heap_push(H, pn, held_s[i], S[held[i], _SEQ])
        elif need > 0:
            steps, limit = 0, 4 * (used + 1)
            while need > 0:
                o, hand, steps, has_evicted = _queue_next(
                    policy, hand, steps, limit, has_evicted, pinned, nchild, queues, main_cap, ghost_cap
                )
                if o < 0:
                    break
                n_leaves, _ = _drop(o, now, S, cached, nchild, parent, leaves, leaf_pos, n_leaves, ewma)
                if record:
                    ev_req[counters[5]] = r
                    ev_block[counters[5]] = o
                counters[5] += 1
                used -= 1
                need -= 1

        for i in range(k, n):
            if used >= capacity:
                counters[6] += n - i
                break
            b = blocks[a0 + i]
            cached[b] = True
            pinned[b] = True
            used += 1
            S[b, _INSERTED] = now
            S[b, _HITS] = 0.0
            n_leaves, covered = _leaf_add(b, parent, nchild, leaves, leaf_pos, n_leaves)
            if track and covered >= 0:
                _count_leaf(leaf_hits, S[covered, _HITS], -1)
            if track:
                _count_leaf(leaf_hits, 0.0, 1)
            if queued:
                _queue_insert(b, policy, has_evicted, small_cap, queues)

        for i in range(n):
            pinned[blocks[a0 + i]] = False
            if queued:
                ghost_hit[blocks[a0 + i]] = False
        if static:  # the request's blocks were touched: each that is now an evictable leaf is scored anew
            if pn + n > room:
                pn = _compact(H, pn, cached, nchild, S, blocks)
            for i in range(n):
                b = blocks[a0 + i]
                if cached[b] and nchild[b] == 0:
                    s = _score(f, params, X, b, now, S, depth, block_tokens, prefix_tokens)
                    pn = _heap_push(H, pn, s, S[b, _SEQ])
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
    X[0, 1] = S[b, _LAST]
    X[0, 2] = S[b, _INSERTED]
    X[0, 5] = S[b, _HITS]
    X[0, 6] = S[b, _ACCESSES]
    X[0, 7] = depth[b]
    X[0, 8] = block_tokens[b]
    X[0, 9] = prefix_tokens[b]
    X[0, 10] = S[b, _FANOUT]
    X[0, 13] = S[b, _EVICTIONS]
    X[0, 19] = S[b, _FRONTIER]
    X[0, 22] = S[b, _TURNS]
    X[0, 23] = S[b, _TURN_GAP]
    X[0, 26] = S[b, _NEXT_USE]
    s = f(X, 0, params)
    return s if s == s else -np.inf


@njit(cache=True, inline="always")
def _score_now(f, params, X, b, now, requests, S, tree, skip):
    """Block b's score at `now` under any key (the population columns of X are the caller's); NaN ranks
    lowest."""
    _fill_row(X, b, now, requests, S, tree, skip)
    s = f(X, 0, params)
    return s if s == s else -np.inf


@njit(cache=True, inline="always")
def _before(s, q, s2, q2):
    """Whether entry (s, q) is evicted before (s2, q2): the lower score, then the older access (bitwise, so
    it compiles without branches)."""
    return (s < s2) | ((s == s2) & (q < q2))


@njit(cache=True)
def _compact(H, pn, cached, nchild, S, blocks):
    """Drop the stale entries of the static heap and restore its order; returns the entries kept."""
    kept = 0
    for i in range(pn):
        b = blocks[int(H[2 * i + 1]) - 1]
        if cached[b] and nchild[b] == 0 and H[2 * i + 1] == S[b, _SEQ]:
            H[2 * kept], H[2 * kept + 1] = H[2 * i], H[2 * i + 1]
            kept += 1
    _heapify(H, kept)
    return kept


@njit(cache=True, inline="always")
def _leaf_remove(b, leaves, leaf_pos, n_leaves):
    last = leaves[n_leaves - 1]
    leaves[leaf_pos[b]] = last
    leaf_pos[last] = leaf_pos[b]
    leaf_pos[b] = -1
    return n_leaves - 1


@njit(cache=True, inline="always")
def _arrival(r, counted_from, counters, times, offsets, blocks, cached):
    """Request r arrives: counted (from `counted_from` on: the requests before only warm the cache), its
    time, where its blocks start, how many, and how many of them from the first are cached."""
    if r == counted_from:
        for c in range(counters.size):
            counters[c] = 0
    a0 = offsets[r]
    n = offsets[r + 1] - a0
    counters[0] += 1
    k = 0
    while k < n and cached[blocks[a0 + k]]:
        k += 1
    return times[r], a0, n, k


@njit(cache=True, inline="always")
def _leaf_add(b, parent, nchild, leaves, leaf_pos, n_leaves):
    """Block b enters the cache as a leaf; returns the leaf count and the parent if it stopped being a leaf
    (-1 if not)."""
    p = parent[b]
    covered = -1
    if p >= 0:
        if nchild[p] == 0:
            n_leaves = _leaf_remove(p, leaves, leaf_pos, n_leaves)
            covered = p
        nchild[p] += 1
    leaf_pos[b] = n_leaves
    leaves[n_leaves] = b
    return n_leaves + 1, covered


@njit(cache=True, inline="always")
def _drop(b, now, S, cached, nchild, parent, leaves, leaf_pos, n_leaves, ewma):
    """Evict leaf b into its ghost history; returns the new leaf count and the parent if it became a leaf."""
    _ewma(ewma, 2, now - S[b, _LAST])
    n_leaves = _leaf_remove(b, leaves, leaf_pos, n_leaves)
    cached[b] = False
    S[b, _EVICTIONS] += 1.0
    S[b, _EVICTED_AT] = now
    p = parent[b]
    if p < 0:
        return n_leaves, -1
    nchild[p] -= 1
    if nchild[p] > 0:
        return n_leaves, -1
    leaf_pos[p] = n_leaves
    leaves[n_leaves] = p
    return n_leaves + 1, p


_I64 = types.int64[::1]
_F64 = types.float64[::1]
_SIGNATURE = types.Tuple((_I64, _I64, _I64, _I64))(
    FUNCTION_TYPE,
    _F64,
    types.int64,
    types.int64,
    types.int64,
    _F64,
    _I64,
    _I64,
    _I64,
    _I64,
    _I64,
    types.boolean,
    types.int64,
)


@functools.cache
def compiled_replay() -> Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """The replay kernel, compiled on first use and cached on disk by numba."""
    return njit(_SIGNATURE, cache=True)(_replay)
