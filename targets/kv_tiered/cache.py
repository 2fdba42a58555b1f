"""A tiered prefix KV cache: a GPU tier over host memory and an optional disk, replayed over a trace.

Mechanism, as SGLang's HiCache (HiRadixCache), vLLM's KV offloading and LMCache keep it:
- the GPU tier is the single-tier cache of targets/kv/prefix_cache.py: prefix-closed, its `capacity`
  blocks, the request in flight pinned, only unpinned leaves (no child in GPU memory) evicted, lowest
  `priority` first;
- below it, host memory and disk hold copies of blocks, each block in one of them at most; a block and its
  copy below are one cache entry (a hit in GPU memory leaves the copy where it is, HiCache's host value);
- a request reuses the longest prefix of its blocks found in any tier: those in GPU memory as they are,
  those below either loaded back or computed again, at the cut the deployment's costs make fastest
  (every loaded block's transfer plus the prefill of the rest); what it loads or computes enters GPU memory;
- a block leaving GPU memory without a copy below is written to host memory if `keep` scores it above 0
  (write-back) and dropped otherwise; with write-through every block is written when it enters GPU memory;
- a tier below that needs room evicts its lowest `below` among its blocks not in GPU memory that no cached
  descendant needs there: in host memory, a block no child has a copy of in host memory (one whose children
  are on disk moves down with them); on disk, a block with no child cached anywhere. A host block leaving
  goes to disk if there is one and it has children there or `keep` scores it above 0, else it is dropped;
- a block with children cached below is always kept when it leaves GPU memory (its descendants need it),
  and one whose tier has no room to make is dropped (a failed write): a hit still needs its whole prefix, so
  descendants it leaves behind wait until a request computes it again.

Scores are taken as the single-tier cache takes them, at the arrival time of the request that needs room:
a key that reads no time-varying feature keeps one heap per tier across requests (pushed when a block is
touched or joins a tier's evictable set); a time-varying key scores its tier's whole evictable set anew
when the clock has moved since it last did (at every request if it reads a parent's feature) and otherwise
only the blocks touched since. With no room below, this is the single-tier mechanism exactly (tests).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit, types

from targets.compiled_helpers import F64, F64_2D, FLAGS, FLAGS_2D, I64, I64_2D, out_of_line
from targets.kv.block_tree import (
    COUNTERS,
    HITS,
    N_STATE,
    POLICY_KEY,
    POLICY_S3FIFO,
    POLICY_SIEVE,
    POLICY_STATIC_KEY,
    SEQ,
    access,
    admitted,
    arrival,
    evict_leaf,
    leaf_add,
    longest_request,
    new_residency,
    trace_tables,
    turn,
)
from targets.kv.block_tree import fill_row as fill_block_row
from targets.kv.eviction_heap import compact, heap_push, heapify, pop_leaf
from targets.kv.queue_policies import (
    QUEUES,
    new_queues,
    queue_access,
    queue_evict,
    queue_insert,
    queue_shares,
)
from verifiers.compiler import FUNCTION_TYPE

from .features import N_TIER_COLUMNS, TIER_COLUMN

GPU, HOST, DISK = np.int64(0), np.int64(1), np.int64(2)  # see out_of_line
# What the replay's helpers share, one tuple `ctx`: the keys (the modes below, then priority, keep and
# below), the PARAMS, the scoring row, the single-tier block state, the trace's blocks, the prefill table (per
# request and reuse), the per-block arrays `ints`, `floats` and `flags`, the evictable sets of the tiers
# below and their heaps, the per-tier counts (`tiers`) and epochs (`moments`), scratch for the pinned blocks
# a pop passes over, and the counters. Few arrays of many rows, not one array per row: numba passes a tuple
# to a helper that is not inlined as every word of every array in it, so the fewer arrays, the cheaper each
# call and the smaller the kernel to compile (with 33 arrays a replay of the Mooncake train trace took 45 to
# 75 % longer).
(
    _KEYS,
    _PARAMS,
    _ROW,
    _STATE,
    _BLOCKS,
    _PREFILL,
    _INTS,
    _FLOATS,
    _FLAGS,
    _LISTS,
    _HEAPS,
    _TIERS,
    _MOMENTS,
    _HELD,
    _HELD_S,
    _COUNTERS,
) = range(16)
_MODES, _PRIORITY, _KEEP, _BELOW = range(4)
STATIC_BELOW, BELOW_READS_PARENT, PRIORITY_READS_PARENT = 1, 2, 4
"""Bits of `keys[_MODES]`: below's key reads no time-varying feature (one heap across requests); below's or
priority's reads a parent's feature, which a sibling's request changes at any moment. A time-varying key
that reads none scores its tier's evictable set anew when the clock has moved since it last did, else only
the blocks touched since (as the single-tier cache does); one that reads one, at every request."""
# Rows of ints, per block: the trace's tree (parent, depth, tokens), children in GPU memory, the tier of its
# copy below, its children cached anywhere and with a copy in host memory, the evictable set it is in and
# its place there.
(_PARENT, _DEPTH, _TOKENS, _NCHILD, _LOW, _KIDS, _KHOST, _WHERE, _LIST_POS) = range(9)
# Rows of floats, per block: its prefix tokens, when it entered GPU memory and the tier below, and the
# deployment's costs of computing it again, loading it from host memory and from disk.
(_PREFIX, _GPU_SINCE, _LOW_SINCE, _RECOMPUTE, _HOST_MS, _DISK_MS) = range(6)
# Rows of flags, per block: in GPU memory, pinned, and a member of tier t's evictable set (row _IN_SET + t).
_IN_GPU, _PINNED, _IN_SET = 0, 1, 1
# Rows of `tiers`, per tier (GPU memory's column unused where it has no such thing): the size of its
# evictable set and of its heap, its capacity and its use. Rows of `moments`, per tier: the epoch its key
# last scored its set at, and the epoch of now (the time, or the request where the key reads a parent's
# feature).
_N_LIST, _N_HEAP, _CAPACITY, _USED = range(4)
_SCORED, _EPOCH = range(2)
TIER_COUNTERS = (
    *COUNTERS,
    "host_hits",
    "disk_hits",
    "host_hit_tokens",
    "disk_hit_tokens",
    "recomputed",
    "host_writes",
    "disk_writes",
    "host_evictions",
    "disk_evictions",
    "write_failures",
)
"""The replay's counters in order: the single-tier ones (hits and evictions of the GPU tier), then blocks
loaded from each tier below, blocks found below but computed again because that was faster, blocks
written to each tier, blocks leaving each tier, and writes that found no room to make."""
(
    _HOST_HITS,
    _DISK_HITS,
    _HOST_TOKENS,
    _DISK_TOKENS,
    _RECOMPUTED,
    _HOST_WRITES,
    _DISK_WRITES,
    _HOST_EVICTIONS,
    _DISK_EVICTIONS,
    _WRITE_FAILURES,
) = range(len(COUNTERS), len(TIER_COUNTERS))


@njit(cache=True, inline="always")
def _tier_score(f, b, tier, now, r, ctx):
    """Block b's score under key f as it sits in (or, for `keep`, leaves) `tier`."""
    return _scored(f, ctx[_PARAMS], ctx[_ROW], ctx[_STATE], ctx[_INTS], ctx[_FLOATS], b, tier, now, r)


@out_of_line
def _scored(f, params, X, S, ints, floats, b, tier, now, r):
    """The score, out of line where many places call it."""
    return _score(f, params, X, S, ints, floats, b, tier, now, r)


@njit(cache=True, inline="always")
def _score(f, params, X, S, ints, floats, b, tier, now, r):
    """The score itself: the single-tier features, where the block is and since when, and what bringing it
    back from below costs against computing it again. Inlined only where a tier's whole set is scored anew."""
    fill_block_row(X, b, now, r + 1.0, S, (ints[_PARENT], ints[_DEPTH], ints[_TOKENS], floats[_PREFIX]), 0)
    low = ints[_LOW, b]
    X[0, TIER_COLUMN] = tier
    X[0, TIER_COLUMN + 1] = 1.0 if tier == GPU and low > 0 else 0.0
    X[0, TIER_COLUMN + 2] = now - (floats[_GPU_SINCE, b] if tier == GPU else floats[_LOW_SINCE, b])
    from_host = tier == GPU or (tier == HOST and low == HOST)  # a block leaving host memory goes to disk
    X[0, TIER_COLUMN + 3] = floats[_HOST_MS, b] if from_host else floats[_DISK_MS, b]
    X[0, TIER_COLUMN + 4] = floats[_RECOMPUTE, b]
    s = f(X, 0, params)
    return s if s == s else -np.inf


@njit(cache=True, inline="always")
def _push(H, pn, s, b, S, blocks, member, children):
    """Push (s, b's last access) on a heap, first dropping its stale entries if it is full."""
    if pn == H.size // 2:
        pn = compact(H, pn, member, children, S, blocks)
    return heap_push(H, pn, s, S[b, SEQ])


@out_of_line
def _relist(b, now, r, ctx):
    """Put block b in the evictable set of the tier below that holds it, or in none. A block in GPU memory is
    evictable in neither; a host block while no child has a copy in host memory (a child on disk keeps it
    cached there); a disk block while it has no child cached anywhere. Most calls change nothing: small, this
    check is inlined by LLVM where numba leaves it out of line, and only a change leaves the caller's code."""
    ints = ctx[_INTS]
    t = 0 if ctx[_FLAGS][_IN_GPU, b] else ints[_LOW, b]
    want = t if (t == HOST and ints[_KHOST, b] == 0) or (t == DISK and ints[_KIDS, b] == 0) else 0
    if ints[_WHERE, b] != want:
        _move(b, want, now, r, ctx)


@out_of_line  # not inlined: its many call sites each inlining it (and what it inlines) doubled the
def _move(b, want, now, r, ctx):  # kernel's compile time, for a few per cent of its speed
    """Move block b from the evictable set it is in (0: none) to tier `want`'s (0: none). A key that keeps
    its heap across requests, or has scored this request's set already, scores the block as it joins."""
    ints, flags, lists, n_list = ctx[_INTS], ctx[_FLAGS], ctx[_LISTS], ctx[_TIERS][_N_LIST]
    cur = ints[_WHERE, b]
    if cur > 0:
        last = lists[cur, n_list[cur] - 1]
        lists[cur, ints[_LIST_POS, b]] = last
        ints[_LIST_POS, last] = ints[_LIST_POS, b]
        n_list[cur] -= 1
        flags[_IN_SET + cur, b] = False
    ints[_WHERE, b] = want
    if want > 0:
        ints[_LIST_POS, b] = n_list[want]
        lists[want, n_list[want]] = b
        n_list[want] += 1
        flags[_IN_SET + want, b] = True
        moments = ctx[_MOMENTS]
        if ctx[_KEYS][_MODES] & STATIC_BELOW or moments[_SCORED, want] == moments[_EPOCH, want]:
            _push_below(b, want, now, r, ctx)


@njit(cache=True, inline="always")
def _children_below(t, ctx):
    """The children that keep a block of tier t (below GPU memory) cached there: those with a copy in host
    memory for a host block, those cached anywhere for a disk block."""
    return ctx[_INTS][_KHOST if t == HOST else _KIDS]


@njit(cache=True, inline="always")
def _push_below(b, t, now, r, ctx):
    """Score block b, evictable in tier t below, onto that tier's heap."""
    s = _tier_score(ctx[_KEYS][_BELOW], b, t, now, r, ctx)
    n_heap = ctx[_TIERS][_N_HEAP]
    member = ctx[_FLAGS][_IN_SET + t]
    children = _children_below(t, ctx)
    n_heap[t] = _push(ctx[_HEAPS][t], n_heap[t], s, b, ctx[_STATE], ctx[_BLOCKS], member, children)


@njit(cache=True, inline="always")
def _family(b, counts, step, now, r, ctx):
    """Block b's parent has one child more (step 1) or fewer (-1) among the row `counts` of `ints`
    (children cached in any tier, or with a copy in host memory): whether the parent is evictable below."""
    ints = ctx[_INTS]
    p = ints[_PARENT, b]
    if p >= 0:
        ints[counts, p] += step
        _relist(p, now, r, ctx)


@out_of_line
def _free(t, now, r, ctx):
    """Take the lowest-scored evictable block out of tier t (below GPU memory) and return it, or -1 when
    none can go; the caller says where it goes."""
    S, blocks, pinned = ctx[_STATE], ctx[_BLOCKS], ctx[_FLAGS][_PINNED]
    ints, tiers, moments = ctx[_INTS], ctx[_TIERS], ctx[_MOMENTS]
    H, n_heap = ctx[_HEAPS][t], tiers[_N_HEAP]
    if not ctx[_KEYS][_MODES] & STATIC_BELOW and moments[_SCORED, t] != moments[_EPOCH, t]:  # scored earlier
        pn = np.int64(0)  # see out_of_line
        for i in range(tiers[_N_LIST, t]):
            b = ctx[_LISTS][t, i]
            if not pinned[b]:
                s = _score(ctx[_KEYS][_BELOW], ctx[_PARAMS], ctx[_ROW], S, ints, ctx[_FLOATS], b, t, now, r)
                H[2 * pn], H[2 * pn + 1] = s, S[b, SEQ]
                pn += 1
        heapify(H, pn)
        n_heap[t] = pn
        moments[_SCORED, t] = moments[_EPOCH, t]
    held, held_s = ctx[_HELD], ctx[_HELD_S]
    member, children = ctx[_FLAGS][_IN_SET + t], _children_below(t, ctx)
    b, pn, n_held = pop_leaf(H, n_heap[t], blocks, member, children, pinned, S, held, held_s, 0)
    for i in range(n_held):  # the request's own blocks stay below until it has them in GPU memory
        pn = heap_push(H, pn, held_s[i], S[held[i], SEQ])
    n_heap[t] = pn
    if b >= 0:
        ints[_LOW, b] = 0
        tiers[_USED, t] -= 1
        ctx[_COUNTERS][_HOST_EVICTIONS if t == HOST else _DISK_EVICTIONS] += 1
        _relist(b, now, r, ctx)
        if t == HOST:
            _family(b, _KHOST, -1, now, r, ctx)
    return b


@njit(cache=True, inline="always")
def _write(b, t, now, r, ctx):
    """Put block b's copy in tier t, which has room."""
    ctx[_INTS][_LOW, b] = t
    ctx[_FLOATS][_LOW_SINCE, b] = now
    ctx[_TIERS][_USED, t] += 1
    ctx[_COUNTERS][_HOST_WRITES if t == HOST else _DISK_WRITES] += 1
    _relist(b, now, r, ctx)
    if t == HOST:
        _family(b, _KHOST, 1, now, r, ctx)


@out_of_line
def _room_on_disk(now, r, ctx):
    """Make room for one block on disk, dropping its lowest-scored evictable blocks; False if none can go."""
    tiers = ctx[_TIERS]
    while tiers[_USED, DISK] >= tiers[_CAPACITY, DISK]:
        v = _free(DISK, now, r, ctx)
        if v < 0:
            return False
        _family(v, _KIDS, -1, now, r, ctx)
    return True


@out_of_line
def _room_in_host(now, r, ctx):
    """Make room for one block in host memory: a victim goes to disk when there is one with room to make and
    the victim has children cached there or `keep` scores it above 0, else it leaves the cache (a child
    left on disk waits for it to be computed again). False if no block can go."""
    ints, tiers = ctx[_INTS], ctx[_TIERS]
    while tiers[_USED, HOST] >= tiers[_CAPACITY, HOST]:
        v = _free(HOST, now, r, ctx)
        if v < 0:
            return False
        keep = ints[_KIDS, v] > 0 or _tier_score(ctx[_KEYS][_KEEP], v, HOST, now, r, ctx) > 0.0
        if tiers[_CAPACITY, DISK] > 0 and keep and _room_on_disk(now, r, ctx):
            _write(v, DISK, now, r, ctx)
        else:
            _family(v, _KIDS, -1, now, r, ctx)
    return True


@njit(cache=True, inline="always")
def _keep_below(b, forced, now, r, ctx):
    """Write block b, leaving GPU memory (or entering it, with write-through), to host memory if it must
    stay cached (`forced`) or `keep` scores it above 0, and room can be made; whether it is still cached."""
    if ctx[_TIERS][_CAPACITY, HOST] == 0:
        return False
    if forced or _tier_score(ctx[_KEYS][_KEEP], b, GPU, now, r, ctx) > 0.0:
        if _room_in_host(now, r, ctx):
            _write(b, HOST, now, r, ctx)
            return True
        ctx[_COUNTERS][_WRITE_FAILURES] += 1
    return False


@out_of_line
def _demoted(b, now, r, ctx):
    """Block b has just left GPU memory: a copy below stays (and may now be evicted there), else it is
    kept below if it must (children cached below need it) or `keep` says so and room is made, else it
    leaves the cache."""
    ints = ctx[_INTS]
    if ints[_LOW, b] > 0:
        _relist(b, now, r, ctx)
    elif not _keep_below(b, ints[_KIDS, b] > 0, now, r, ctx):
        _family(b, _KIDS, -1, now, r, ctx)


def _tiered_requests(ctx, gpu_policy, write_through, counted_from, trace, gpu_keyed, queues, out):
    """The requests in turn, over the arrays replay_tiered_arrays made (the kernel; without reference
    counting, as the single-tier replay's, since it allocates nothing)."""
    S, blocks, counters = ctx[_STATE], ctx[_BLOCKS], ctx[_COUNTERS]
    ints, floats, moments = ctx[_INTS], ctx[_FLOATS], ctx[_MOMENTS]
    modes, f_gpu, prefill = ctx[_KEYS][_MODES], ctx[_KEYS][_PRIORITY], ctx[_PREFILL]
    times, offsets, next_pos = trace
    parent, block_tokens, nchild = ints[_PARENT], ints[_TOKENS], ints[_NCHILD]
    low, where = ints[_LOW], ints[_WHERE]
    host_ms, disk_ms, gpu_since = floats[_HOST_MS], floats[_DISK_MS], floats[_GPU_SINCE]
    gpu, pinned = ctx[_FLAGS][_IN_GPU], ctx[_FLAGS][_PINNED]
    scored, epoch = moments[_SCORED], moments[_EPOCH]
    seen, leaves, leaf_pos, H, held, held_s, ewma = gpu_keyed
    ttft, req_turns, req_gaps = out
    ghost_hit = queues[7]
    n_req = offsets.size - 1
    capacity = ctx[_TIERS][_CAPACITY, GPU]
    static = gpu_policy == POLICY_STATIC_KEY
    keyed = static or gpu_policy == POLICY_KEY
    queued = gpu_policy in (POLICY_SIEVE, POLICY_S3FIFO)
    shares = queue_shares(capacity)
    evicting = (S, gpu, nchild, parent, leaves, leaf_pos, ewma, counters)  # what a GPU eviction changes
    walk = (blocks, next_pos, parent, block_tokens)  # what an access reads of the trace
    zero = np.int64(0)  # see out_of_line
    n_leaves, used, seq, pn, hand, has_evicted = zero, zero, zero, zero, zero - 1, np.bool_(False)

    for r in range(n_req):
        # The longest prefix cached anywhere: in GPU memory first (it is prefix-closed), then below.
        now, a0, n, k = arrival(r, counted_from, counters, times, offsets, blocks, gpu)
        epoch[GPU] = r if modes & PRIORITY_READS_PARENT else now
        epoch[HOST] = epoch[DISK] = r if modes & BELOW_READS_PARENT else now
        found = k
        while found < n and low[blocks[a0 + found]] > 0:
            found += 1
        # Load blocks k..reused-1 back and compute the rest: the cut with the earliest first token.
        base = a0 + r  # request r's row of the prefill table
        reused, ttft[r], loads = k, prefill[base + k], 0.0
        for i in range(k, found):
            b = blocks[a0 + i]
            loads += host_ms[b] if low[b] == HOST else disk_ms[b]
            if prefill[base + i + 1] + loads < ttft[r]:
                reused, ttft[r] = i + 1, prefill[base + i + 1] + loads

        turn_gap = turn(r, now, a0, n, times, offsets, blocks, S, req_turns, req_gaps)
        for i in range(n):
            seq += 1
            b = access(r, a0, i, n, now, seq, req_turns[r], turn_gap, walk, S, seen, pinned, counters)
            if i < reused:
                S[b, HITS] += 1.0
                tier = GPU if i < k else low[b]
                counters[2 if tier == GPU else _HOST_HITS if tier == HOST else _DISK_HITS] += 1
                counters[4 if tier == GPU else _HOST_TOKENS if tier == HOST else _DISK_TOKENS] += (
                    block_tokens[b]
                )
            elif i < found:
                counters[_RECOMPUTED] += 1
            if queued:
                queue_access(b, i < k, queues)

        need = used + (n - k) - capacity
        if need > 0 and keyed:
            if not static and scored[GPU] != epoch[GPU]:  # scores from another moment: all leaves anew
                pn = zero
                for i in range(n_leaves):
                    b = leaves[i]
                    if not pinned[b]:
                        s = _score(f_gpu, ctx[_PARAMS], ctx[_ROW], S, ints, floats, b, GPU, now, r)
                        H[2 * pn], H[2 * pn + 1] = s, S[b, SEQ]
                        pn += 1
                heapify(H, pn)
                scored[GPU] = epoch[GPU]
            n_held = zero
            while need > 0:
                b, pn, n_held = pop_leaf(H, pn, blocks, gpu, nchild, pinned, S, held, held_s, n_held)
                if b < 0:
                    break
                n_leaves, p = evict_leaf(b, now, evicting, n_leaves)
                if p >= 0 and not pinned[p]:  # the parent just became an evictable leaf: score it now
                    pn = _push(H, pn, _tier_score(f_gpu, p, GPU, now, r, ctx), p, S, blocks, gpu, nchild)
                _demoted(b, now, r, ctx)
                need -= 1
            for i in range(n_held):
                pn = _push(H, pn, held_s[i], held[i], S, blocks, gpu, nchild)
        elif need > 0:
            steps, limit = zero, 4 * (used + 1)
            while need > 0:
                b, n_leaves, hand, steps, has_evicted = queue_evict(
                    gpu_policy,
                    hand,
                    steps,
                    limit,
                    has_evicted,
                    pinned,
                    shares,
                    queues,
                    now,
                    evicting,
                    n_leaves,
                )
                if b < 0:
                    break
                _demoted(b, now, r, ctx)
                need -= 1

        stop = admitted(n, need, counters)
        for i in range(k, stop):
            b = blocks[a0 + i]
            gpu[b] = True
            gpu_since[b] = now
            if low[b] == 0:  # computed anew: a new residency
                new_residency(b, now, S)
                _family(b, _KIDS, 1, now, r, ctx)
            else:
                _relist(b, now, r, ctx)  # in GPU memory again: no longer evictable below
            n_leaves, _ = leaf_add(b, parent, nchild, leaves, leaf_pos, n_leaves)
            if queued:
                queue_insert(b, gpu_policy, has_evicted, shares[0], queues)
            if write_through and low[b] == 0:
                _keep_below(b, True, now, r, ctx)
        used = min(capacity, used + n - k)  # full, or all it held and the misses

        for i in range(n):
            b = blocks[a0 + i]
            pinned[b] = False
            if queued:
                ghost_hit[b] = False
            if gpu[b] and nchild[b] == 0 and (static or scored[GPU] == epoch[GPU]):  # touched: scored anew
                pn = _push(H, pn, _tier_score(f_gpu, b, GPU, now, r, ctx), b, S, blocks, gpu, nchild)
            elif not gpu[b] and where[b] > 0 and (modes & STATIC_BELOW or scored[where[b]] == epoch[HOST]):
                _push_below(b, where[b], now, r, ctx)  # found below, not taken in, touched: scored anew


def replay_tiered_arrays(
    keys: tuple[Any, ...],
    params: np.ndarray,
    gpu_policy: int,
    capacities: np.ndarray,
    write_through: bool,
    times: np.ndarray,
    offsets: np.ndarray,
    blocks: np.ndarray,
    parent: np.ndarray,
    depth: np.ndarray,
    block_tokens: np.ndarray,
    costs: tuple[np.ndarray, ...],
    counted_from: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Replay a trace's requests through the tiers under `keys` (the modes, then priority, keep and below)
    with GPU memory run by `gpu_policy`: the counters (TIER_COUNTERS) and each request's time to first token
    (ms); `costs` are the deployment's (request_costs)."""
    n_req = offsets.size - 1
    nb = parent.size
    capacities = np.minimum(capacities, nb)  # a tier that holds every block of the trace never evicts
    next_pos, prefix_tokens = trace_tables(blocks, parent, block_tokens)
    max_len = longest_request(offsets)

    ints = np.zeros((_LIST_POS + 1, nb), np.int64)
    ints[_PARENT], ints[_DEPTH], ints[_TOKENS] = parent, depth, block_tokens
    floats = np.zeros((_DISK_MS + 1, nb), np.float64)
    floats[_PREFIX] = prefix_tokens
    floats[_RECOMPUTE], floats[_HOST_MS], floats[_DISK_MS] = costs[1], costs[2], costs[3]
    room = max(min(capacities[HOST], nb), min(capacities[DISK], nb))
    room = 2 * room + 2 * max_len + 16 if room > 0 else 0  # a heap below holds its tier and stale entries
    tiers = np.zeros((_USED + 1, 3), np.int64)
    tiers[_CAPACITY] = capacities
    counters = np.zeros(len(TIER_COUNTERS), np.int64)
    ctx = (
        keys,
        params,
        np.zeros((1, N_TIER_COLUMNS), np.float64),  # the scoring row
        np.zeros((nb, N_STATE), np.float64),  # the block state
        blocks,
        costs[0],
        ints,
        floats,
        np.zeros((_IN_SET + DISK + 1, nb), np.bool_),  # flags
        np.empty((3, nb if room else 0), np.int64),  # the evictable sets below
        np.empty((3, 2 * room), np.float64),  # their heaps
        tiers,
        np.full((_EPOCH + 1, 3), np.nan),  # moments
        np.empty(max_len + 1, np.int64),  # held
        np.empty(max_len + 1, np.float64),  # held_s
        counters,
    )

    keyed = gpu_policy in (POLICY_STATIC_KEY, POLICY_KEY)
    gpu_room = 2 * capacities[GPU] + 2 * max_len + 16 if keyed else 0
    gpu_keyed = (
        np.zeros(nb, np.bool_),  # seen
        np.empty(nb, np.int64),  # leaves
        np.full(nb, -1, np.int64),  # leaf_pos
        np.empty(2 * gpu_room, np.float64),  # H
        np.empty(max_len + 1, np.int64),  # held
        np.empty(max_len + 1, np.float64),  # held_s
        np.zeros(4, np.float64),  # ewma
    )
    ttft = np.zeros(n_req, np.float64)
    out = (ttft, np.ones(n_req, np.float64), np.zeros(n_req, np.float64))
    trace = (times, offsets, next_pos)
    _kernel()(ctx, gpu_policy, write_through, counted_from, trace, gpu_keyed, new_queues(nb, gpu_policy), out)
    return counters, ttft


_SIGNATURE = types.void(
    types.Tuple(
        (
            types.Tuple((types.int64, FUNCTION_TYPE, FUNCTION_TYPE, FUNCTION_TYPE)),
            F64,
            F64_2D,
            F64_2D,
            I64,
            F64,
            I64_2D,
            F64_2D,
            FLAGS_2D,
            I64_2D,
            F64_2D,
            I64_2D,
            F64_2D,
            I64,
            F64,
            I64,
        )
    ),
    types.int64,
    types.boolean,
    types.int64,
    types.Tuple((F64, I64, F64)),
    types.Tuple((FLAGS, I64, I64, F64, I64, F64, F64)),
    QUEUES,
    types.Tuple((F64, F64, F64)),
)


@functools.cache
def _kernel() -> Callable[..., None]:
    """The tiered replay's compiled loop, compiled on first use and cached on disk by numba."""
    return njit(_SIGNATURE, cache=True, _nrt=False)(_tiered_requests)
