"""The block tree every prefix-cache replay keeps: each block's access record, the evictable leaf set and a
request's arrival, shared by the single-tier cache (prefix_cache.py) and the tiered one (targets/kv_tiered).

A trace's blocks are dense ids whose parents come first. Per block, a row of `S` holds its access record
(the columns below); `cached` says which blocks the tier holds, `nchild` its cached children, and the leaves
(cached with no cached child, the only blocks a prefix cache may evict) are listed in `leaves` with each
one's place in `leaf_pos`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .features import NEVER_S

POLICY_KEY, POLICY_SIEVE, POLICY_S3FIFO, POLICY_STATIC_KEY = 0, 1, 2, 3
"""How a replay evicts: by a key scored at eviction time, by a built-in queue (SIEVE, S3-FIFO), or by a key
that reads nothing time-varying, kept on one heap across requests."""
COUNTERS = ("requests", "accesses", "hits", "tokens", "hit_tokens", "evictions", "uncached")
"""Names of the entries of a replay's counters array, in order (the recorded evictions are those counted)."""
NO_NEXT_USE = 1.0e12
"""The next-use position of an access never followed by another of its block (the Belady bound reads it)."""
_EWMA_WEIGHT = 0.01
"""Weight of the newest value in the population's moving averages (about the last hundred hits, evictions)."""

# Per-block state columns.
(
    LAST,
    INSERTED,
    FIRST,
    PREV,
    HITS,
    ACCESSES,
    EVICTIONS,
    EVICTED_AT,
    FANOUT,
    NEXT_USE,
    SEQ,
    FRONTIER,
    REQUEST,
    TURNS,
    TURN_GAP,
) = range(15)
N_STATE = 16  # 15 columns and one unused: 128-byte rows, which cache lines hold evenly (faster than 120)
SKIP_TOKENS, SKIP_DEPTH, SKIP_REUSE, SKIP_EVICTIONS, SKIP_PARENT = 16, 32, 64, 128, 256
"""Bits of fill_row's `skip`: feature groups a key does not read, left unwritten in the scoring row."""


def trace_tables(blocks: np.ndarray, parent: np.ndarray, block_tokens: np.ndarray) -> tuple[np.ndarray, ...]:
    """What the replay derives from the trace: the position of each access's next use (offline knowledge,
    for the Belady bound; NO_NEXT_USE if none) and each block's prefix tokens."""
    next_pos = np.empty(blocks.size, np.float64)
    prefix_tokens = np.empty(parent.size, np.float64)
    last_pos = np.full(parent.size, NO_NEXT_USE)
    _fill_trace_tables(blocks, parent, block_tokens, last_pos, next_pos, prefix_tokens)
    return next_pos, prefix_tokens


@njit(cache=True)
def _fill_trace_tables(blocks, parent, block_tokens, last_pos, next_pos, prefix_tokens):
    """trace_tables' loops, over the arrays it allocates (code that allocates nothing compiles faster)."""
    for a in range(blocks.size - 1, -1, -1):
        next_pos[a] = last_pos[blocks[a]]
        last_pos[blocks[a]] = a
    for b in range(parent.size):  # dense ids are in first-seen order, so a parent precedes its children
        prefix_tokens[b] = block_tokens[b] + (prefix_tokens[parent[b]] if parent[b] >= 0 else 0.0)


def longest_request(offsets: np.ndarray) -> int:
    """The most blocks one request of the trace holds (what a request may pin at once)."""
    return int(np.diff(offsets).max(initial=0))


@njit(cache=True, inline="always")
def arrival(r, counted_from, counters, times, offsets, blocks, cached):
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
def turn(r, now, a0, n, times, offsets, blocks, S, req_turns, req_gaps):
    """Whether request r is the next turn of an earlier one, and if so count it in that conversation; returns
    the mean gap between the conversation's turns so far (0 for a first turn).

    r continues request j when the longest prefix of r that earlier requests used is more than a first
    block and covers all of j, the latest request through its deepest block, but j's last block (which a
    next turn replaces when it was partial). Prefixes, not cache contents: a conversation is in the trace.
    """
    seen = 0
    while seen < n and S[blocks[a0 + seen], ACCESSES] > 0.0:
        seen += 1
    if seen >= 2:
        j = int(S[blocks[a0 + seen - 1], REQUEST])
        if seen >= offsets[j + 1] - offsets[j] - 1:
            req_turns[r] = req_turns[j] + 1.0
            req_gaps[r] = req_gaps[j] + (now - times[j])
    return req_gaps[r] / (req_turns[r] - 1.0) if req_turns[r] > 1.0 else 0.0


@njit(cache=True, inline="always")
def access(r, a0, i, n, now, seq, turns, turn_gap, walk, S, seen, pinned, counters):
    """Request r (its blocks from a0 on) accesses its i-th block of n, the trace's access number `seq`: touch
    the block, pin it until the request is done, and count the access and its tokens; `walk` holds the
    trace's blocks, next uses, parents and block tokens. Returns the block."""
    blocks, next_pos, parent, block_tokens = walk
    b = blocks[a0 + i]
    touch(b, i == n - 1, r, now, seq, turns, turn_gap, next_pos[a0 + i], S, seen, parent)
    pinned[b] = True
    counters[1] += 1
    counters[3] += block_tokens[b]
    return b


@njit(cache=True, inline="always")
def admitted(n, short, counters):
    """Where a request's blocks that enter the tier end: all n but the last `short` (the room its evictions
    could not make, every block left being pinned), which are counted uncached."""
    short = max(short, 0)
    counters[6] += short
    return n - short


@njit(cache=True, inline="always")
def new_residency(b, now, S):
    """Block b enters the tier computed anew: its residency starts now, with no hits."""
    S[b, INSERTED] = now
    S[b, HITS] = 0.0


@njit(cache=True, inline="always")
def touch(b, last, r, now, seq, turns, turn_gap, next_use, S, seen, parent):
    """Record request r's access of block b at `now`, access number `seq` (`last`: the request ends at b): the
    block's first, previous and latest access and their count, where the request left it, its conversation
    (turns, mean gap) and, for the Belady bound, the position of its next use; its parent's fanout if new."""
    if not seen[b]:
        seen[b] = True
        if parent[b] >= 0:
            S[parent[b], FANOUT] += 1.0
    if S[b, ACCESSES] == 0.0:
        S[b, FIRST] = now
        S[b, PREV] = now
    else:
        S[b, PREV] = S[b, LAST]
    S[b, LAST] = now
    S[b, ACCESSES] += 1.0
    S[b, SEQ] = seq
    S[b, FRONTIER] = 1.0 if last else 0.0
    S[b, REQUEST] = r
    S[b, TURNS] = turns
    S[b, TURN_GAP] = turn_gap
    S[b, NEXT_USE] = next_use


@njit(cache=True, inline="always")
def fill_row(X, b, now, requests, S, tree, skip):
    """Write the registry features of block b at time `now`, after `requests` requests, into X's one row
    (column order of BLOCK_FEATURES; the population columns 15 to 18, 24 and 25 are the caller's), but those
    of the groups in `skip` (SKIP_* bits), which the key does not read; `tree` holds the trace's per-block
    parent, depth, tokens and prefix tokens."""
    parent, depth, block_tokens, prefix_tokens = tree
    accesses = S[b, ACCESSES]
    X[0, 0] = now
    X[0, 1] = S[b, LAST]
    X[0, 2] = S[b, INSERTED]
    X[0, 3] = now - S[b, LAST]
    X[0, 4] = now - S[b, INSERTED]
    X[0, 5] = S[b, HITS]
    X[0, 6] = accesses
    if not skip & SKIP_DEPTH:
        X[0, 7] = depth[b]
    if not skip & SKIP_TOKENS:
        X[0, 8] = block_tokens[b]
        X[0, 9] = prefix_tokens[b]
    X[0, 10] = S[b, FANOUT]
    if not skip & SKIP_REUSE:
        if accesses >= 2.0:
            X[0, 11] = (S[b, LAST] - S[b, FIRST]) / (accesses - 1.0)
            X[0, 12] = S[b, LAST] - S[b, PREV]
        else:
            X[0, 11] = now - S[b, FIRST]
            X[0, 12] = now - S[b, FIRST]
    if not skip & SKIP_EVICTIONS:
        X[0, 13] = S[b, EVICTIONS]
        X[0, 14] = NEVER_S if S[b, EVICTIONS] == 0.0 else min(now - S[b, EVICTED_AT], NEVER_S)
    X[0, 19] = S[b, FRONTIER]
    if not skip & SKIP_PARENT:  # the root is passed by every request, this one too
        p = parent[b]
        X[0, 20] = now - S[p, LAST] if p >= 0 else 0.0
        X[0, 21] = S[p, ACCESSES] if p >= 0 else requests
    X[0, 22] = S[b, TURNS]
    X[0, 23] = S[b, TURN_GAP]
    X[0, 26] = S[b, NEXT_USE]


@njit(cache=True, inline="always")
def leaf_add(b, parent, nchild, leaves, leaf_pos, n_leaves):
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
def _leaf_remove(b, leaves, leaf_pos, n_leaves):
    last = leaves[n_leaves - 1]
    leaves[leaf_pos[b]] = last
    leaf_pos[last] = leaf_pos[b]
    leaf_pos[b] = -1
    return n_leaves - 1


@njit(cache=True, inline="always")
def evict_leaf(b, now, tree, n_leaves):
    """Evict leaf b into its ghost history and count the eviction; `tree` holds the arrays an eviction changes
    (block state, membership, cached children, parents, the leaf set, the moving averages, the counters).
    Returns the new leaf count and the parent if it became a leaf."""
    S, cached, nchild, parent, leaves, leaf_pos, ewma, counters = tree
    counters[5] += 1
    fold_ewma(ewma, 2, now - S[b, LAST])
    n_leaves = _leaf_remove(b, leaves, leaf_pos, n_leaves)
    cached[b] = False
    S[b, EVICTIONS] += 1.0
    S[b, EVICTED_AT] = now
    p = parent[b]
    if p < 0:
        return n_leaves, -1
    nchild[p] -= 1
    if nchild[p] > 0:
        return n_leaves, -1
    leaf_pos[p] = n_leaves
    leaves[n_leaves] = p
    return n_leaves + 1, p


@njit(cache=True, inline="always")
def fold_ewma(ewma, i, value):
    """Fold a value into the moving average at ewma[i] (its count at ewma[i + 1]); the first one sets it."""
    ewma[i] = value if ewma[i + 1] == 0.0 else ewma[i] + _EWMA_WEIGHT * (value - ewma[i])
    ewma[i + 1] += 1.0
