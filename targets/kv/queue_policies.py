"""SIEVE and S3-FIFO, the queue mechanisms a prefix cache runs built in (they are not keys).

They skip blocks that are not evictable (pinned, or with cached children) as if those were recently used. On a
flat stream they give the same hits as libCacheSim 0.3.5 (S3FIFO.c, Sieve.c), as
tests/targets/kv/test_libcachesim_differential.py checks.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from targets.compiled_helpers import FLAGS, I64, out_of_line

from .block_tree import POLICY_S3FIFO, POLICY_SIEVE, evict_leaf

# Queue ids; each block sits in at most one queue (a ghost is not cached).
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
_NO_QUEUE = -2
"""What _queue_victim returns when the queue it would evict from is empty."""


def new_queues(blocks: int, policy: int) -> tuple[np.ndarray, ...]:
    """The queues' arrays for a trace of `blocks` blocks: per block (queue id, next toward the tail, previous
    toward the head, frequency, found in the ghost) and per queue (head, tail, size); a key's replay, which
    runs no queue, gets empty per-block arrays."""
    n = blocks if policy in (POLICY_SIEVE, POLICY_S3FIFO) else 0
    return (
        np.zeros(n, np.int64),
        np.full(n, -1, np.int64),
        np.full(n, -1, np.int64),
        np.full(4, -1, np.int64),
        np.full(4, -1, np.int64),
        np.zeros(4, np.int64),
        np.zeros(n, np.int64),
        np.zeros(n, np.bool_),
    )


QUEUES = types.Tuple((I64, I64, I64, I64, I64, I64, I64, FLAGS))
"""The type of new_queues' arrays in a kernel's signature."""


@njit(cache=True, inline="always")
def queue_shares(capacity):
    """S3-FIFO's small, main and ghost queue sizes for a cache of `capacity` blocks."""
    small = max(1, int(_S3_SMALL_SHARE * capacity))
    return small, capacity - small, int(_S3_GHOST_SHARE * capacity)


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


@out_of_line
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


@out_of_line
def queue_access(b, hit, queues):
    """A queue policy sees request access b: a hit counts toward its frequency (at most 3, as both keep
    it); a miss found in S3-FIFO's ghost leaves it, marked to go to main when inserted."""
    qid, nxt, prv, head, tail, size, freq, ghost_hit = queues
    if hit:
        freq[b] = min(freq[b] + 1, 3)
    elif qid[b] == _Q_GHOST:  # seen at the miss, before evictions can push it out
        _q_remove(b, qid, nxt, prv, head, tail, size)
        ghost_hit[b] = True


@out_of_line
def queue_insert(b, policy, has_evicted, small_cap, queues):
    """A block entering the cache joins SIEVE's queue, or S3-FIFO's main (back from its ghost, or while small
    is full before the first eviction) or small FIFO."""
    qid, nxt, prv, head, tail, size, freq, ghost_hit = queues
    freq[b] = 0
    if policy == POLICY_SIEVE:
        _q_push_head(_Q_MAIN, b, qid, nxt, prv, head, tail, size)
    elif policy == POLICY_S3FIFO:
        to_main = ghost_hit[b] or (not has_evicted and size[_Q_SMALL] >= small_cap)
        _q_push_head(_Q_MAIN if to_main else _Q_SMALL, b, qid, nxt, prv, head, tail, size)


@out_of_line
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


@out_of_line
def queue_next(policy, hand, steps, limit, has_evicted, pinned, nchild, queues, main_cap, ghost_cap):
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


@out_of_line
def queue_evict(policy, hand, steps, limit, has_evicted, pinned, shares, queues, now, tree, n_leaves):
    """The next block a queue policy evicts, taken out of its queue and out of the cache (into its ghost
    history, counted; `tree` holds evict_leaf's arrays), or -1 if it gives none within `limit` steps.
    Returns the block, the leaf count, the hand, the steps taken and whether S3-FIFO has evicted yet."""
    nchild = tree[2]
    o, hand, steps, has_evicted = queue_next(
        policy, hand, steps, limit, has_evicted, pinned, nchild, queues, shares[1], shares[2]
    )
    if o >= 0:
        n_leaves, _ = evict_leaf(o, now, tree, n_leaves)
    return o, n_leaves, hand, steps, has_evicted
