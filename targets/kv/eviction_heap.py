"""The eviction heap of a prefix cache: scored leaves, the lowest score (then the oldest access) first.

A flat array of (score, seq) entries, four children an entry; `seq` is the block's access number when it was
pushed (the block is `blocks[seq - 1]`), so an entry of a block touched, evicted or grown a child since is
stale and skipped when popped. Every replay of targets/kv and targets/kv_tiered keeps its keys' scores here.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from targets.compiled_helpers import out_of_line

from .block_tree import SEQ


@out_of_line
def heap_push(H, n, s, q):
    """Add the entry (score s, seq q) to the heap of n entries in H: four children an entry (half the levels
    of a binary heap), entry i at H[2i] and H[2i + 1] (a flat array: its index is a shift, where a row of
    two would be a multiplication by a stride)."""
    i = n
    while i > 0 and before(s, q, H[(i - 1) // 4 * 2], H[(i - 1) // 4 * 2 + 1]):
        up = (i - 1) // 4
        H[2 * i], H[2 * i + 1] = H[2 * up], H[2 * up + 1]
        i = up
    H[2 * i], H[2 * i + 1] = s, q
    return n + 1


@out_of_line
def heap_pop(H, n):
    """Take the top entry out; returns the entries left."""
    n -= 1
    _sift_down(H, n, 0, H[2 * n], H[2 * n + 1])
    return n


@out_of_line
def heapify(H, n):
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
        a = c + before(H[2 * c + 2], H[2 * c + 3], H[2 * c], H[2 * c + 1])
        d = c + 2 + before(H[2 * c + 6], H[2 * c + 7], H[2 * c + 4], H[2 * c + 5])
        m = a + (d - a) * before(H[2 * d], H[2 * d + 1], H[2 * a], H[2 * a + 1])
        H[2 * i], H[2 * i + 1] = H[2 * m], H[2 * m + 1]
        i, c = m, 4 * m + 1
    if c < n:  # one to three children, at the bottom
        m = c
        for k in range(c + 1, min(c + 4, n)):
            if before(H[2 * k], H[2 * k + 1], H[2 * m], H[2 * m + 1]):
                m = k
        H[2 * i], H[2 * i + 1] = H[2 * m], H[2 * m + 1]
        i = m
    while i > top and before(s, q, H[(i - 1) // 4 * 2], H[(i - 1) // 4 * 2 + 1]):
        up = (i - 1) // 4
        H[2 * i], H[2 * i + 1] = H[2 * up], H[2 * up + 1]
        i = up
    H[2 * i], H[2 * i + 1] = s, q


@njit(cache=True, inline="always")
def before(s, q, s2, q2):
    """Whether entry (s, q) is evicted before (s2, q2): the lower score, then the older access (bitwise, so
    it compiles without branches)."""
    return (s < s2) | ((s == s2) & (q < q2))


@out_of_line
def compact(H, pn, cached, nchild, S, blocks):
    """Drop the stale entries of the static heap and restore its order; returns the entries kept."""
    kept = np.int64(0)  # see out_of_line
    for i in range(pn):
        b = blocks[int(H[2 * i + 1]) - 1]
        if cached[b] and nchild[b] == 0 and H[2 * i + 1] == S[b, SEQ]:
            H[2 * kept], H[2 * kept + 1] = H[2 * i], H[2 * i + 1]
            kept += 1
    heapify(H, kept)
    return kept


@njit(cache=True, inline="always")
def pop_leaf(H, pn, blocks, member, children, pinned, S, held, held_s, n_held):
    """Pop a key's heap down to its first entry still valid (the block a `member` with no `children`, not
    touched since it was pushed); pinned ones popped on the way wait in `held`. Returns the block (-1 if the
    heap ran out), the entries left and how many are held."""
    while pn > 0:
        score, pushed_seq = H[0], H[1]
        b = blocks[int(pushed_seq) - 1]  # seq counts the accesses from 1
        pn = heap_pop(H, pn)
        if not (member[b] and children[b] == 0 and pushed_seq == S[b, SEQ]):
            continue  # stale: evicted, grown a child, or touched (and pushed again) since
        if pinned[b]:
            held[n_held], held_s[n_held] = b, score
            n_held += 1
            continue
        return b, pn, n_held
    return -1, pn, n_held
