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

import numpy as np
from numba import njit, types

from targets.compiled_helpers import out_of_line
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
from targets.kv.queue_policies import new_queues, queue_access, queue_evict, queue_insert, queue_shares
from verifiers.compiler import FUNCTION_TYPE

from .features import N_TIER_COLUMNS, TIER_COLUMN

GPU, HOST, DISK = np.int64(0), np.int64(1), np.int64(2)  # see out_of_line
# What the replay's helpers share, one tuple `ctx` (numba passes it whole; a global int indexes it
# statically): the keys (the modes below, then priority, keep and below), the PARAMS,
# the scoring row, the single-tier block state, the trace's tree, its blocks, the deployment's costs
# (prefill per request and reuse, then per block recompute, host load, disk load), the GPU tier's flags (in
# GPU memory, pinned, children there), the tiers below, the counters, and the capacities (GPU, host, disk)
# followed by each one's use.
_KEYS, _PARAMS, _ROW, _STATE, _TREE, _BLOCKS, _COSTS, _FLAGS, _LOWER, _COUNTERS, _CAPACITIES = range(11)
_MODES, _PRIORITY, _KEEP, _BELOW = range(4)
STATIC_BELOW, BELOW_READS_PARENT, PRIORITY_READS_PARENT = 1, 2, 4
"""Bits of `keys[_MODES]`: below's key reads no time-varying feature (one heap across requests); below's or
priority's reads a parent's feature, which a sibling's request changes at any moment. A time-varying key
that reads none scores its tier's evictable set anew when the clock has moved since it last did, else only
the blocks touched since (as the single-tier cache does); one that reads one, at every request."""
_PREFILL, _RECOMPUTE, _HOST_MS, _DISK_MS = range(4)
# The tiers below, per block (the tier of its copy, its children cached anywhere and with a copy in host
# memory, when it entered GPU memory and the tier below, the evictable set it is in and its place there),
# per tier (membership, the set's blocks and size, its heap and entries, the epoch a time-varying key last
# scored it at: GPU memory's at 0), scratch for the pinned blocks a pop passes over, and the epochs of now
# (GPU memory's and the tiers below's: the time, or the request where the key reads a parent's feature).
(_LOW, _KIDS, _KHOST, _GPU_SINCE, _LOW_SINCE, _WHERE, _LIST_POS) = range(7)
(_MEMBER, _LISTS, _N_LIST, _HEAPS, _N_HEAP, _SCORED, _HELD, _HELD_S, _EPOCH) = range(7, 16)
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
    lower = ctx[_LOWER]
    state = (lower[_LOW], lower[_GPU_SINCE], lower[_LOW_SINCE])
    return _scored(f, ctx[_PARAMS], ctx[_ROW], ctx[_STATE], ctx[_TREE], ctx[_COSTS], state, b, tier, now, r)


@out_of_line
def _scored(f, params, X, S, tree, costs, lower, b, tier, now, r):
    """The score itself, out of line (many places call it): the single-tier features, where the block is and
    since when, and what bringing it back from below costs against computing it again."""
    low, gpu_since, low_since = lower
    fill_block_row(X, b, now, r + 1.0, S, tree, 0)
    X[0, TIER_COLUMN] = tier
    X[0, TIER_COLUMN + 1] = 1.0 if tier == GPU and low[b] > 0 else 0.0
    X[0, TIER_COLUMN + 2] = now - (gpu_since[b] if tier == GPU else low_since[b])
    from_host = tier == GPU or (tier == HOST and low[b] == HOST)  # a block leaving host memory goes to disk
    X[0, TIER_COLUMN + 3] = costs[_HOST_MS][b] if from_host else costs[_DISK_MS][b]
    X[0, TIER_COLUMN + 4] = costs[_RECOMPUTE][b]
    s = f(X, 0, params)
    return s if s == s else -np.inf


@njit(cache=True, inline="always")
def _push(H, pn, s, b, S, blocks, member, children):
    """Push (s, b's last access) on a heap, first dropping its stale entries if it is full."""
    if pn == H.size // 2:
        pn = compact(H, pn, member, children, S, blocks)
    return heap_push(H, pn, s, S[b, SEQ])


@out_of_line  # not inlined: its many call sites each inlining it (and what it inlines) doubled the
def _relist(b, now, r, ctx):  # kernel's compile time, for a few per cent of its speed
    """Put block b in the evictable set of the tier below that holds it, or in none. A block in GPU memory is
    evictable in neither; a host block while no child has a copy in host memory (a child on disk keeps it
    cached there); a disk block while it has no child cached anywhere. A key that keeps its heap across
    requests, or has scored this request's set already, scores the block as it joins."""
    lower = ctx[_LOWER]
    low, kids, khost, where, list_pos = (
        lower[_LOW],
        lower[_KIDS],
        lower[_KHOST],
        lower[_WHERE],
        lower[_LIST_POS],
    )
    member, lists, n_list = lower[_MEMBER], lower[_LISTS], lower[_N_LIST]
    t = 0 if ctx[_FLAGS][0][b] else low[b]
    want = t if (t == HOST and khost[b] == 0) or (t == DISK and kids[b] == 0) else 0
    cur = where[b]
    if cur == want:
        return
    if cur > 0:
        last = lists[cur, n_list[cur] - 1]
        lists[cur, list_pos[b]] = last
        list_pos[last] = list_pos[b]
        n_list[cur] -= 1
        member[cur, b] = False
    where[b] = want
    if want > 0:
        list_pos[b] = n_list[want]
        lists[want, n_list[want]] = b
        n_list[want] += 1
        member[want, b] = True
        if ctx[_KEYS][_MODES] & STATIC_BELOW or lower[_SCORED][want] == lower[_EPOCH][1]:
            _push_below(b, want, now, r, ctx)


@njit(cache=True, inline="always")
def _push_below(b, t, now, r, ctx):
    """Score block b, evictable in tier t below, onto that tier's heap."""
    lower = ctx[_LOWER]
    s = _tier_score(ctx[_KEYS][_BELOW], b, t, now, r, ctx)
    children = lower[_KHOST] if t == HOST else lower[_KIDS]
    H = lower[_HEAPS][t]
    lower[_N_HEAP][t] = _push(
        H, lower[_N_HEAP][t], s, b, ctx[_STATE], ctx[_BLOCKS], lower[_MEMBER][t], children
    )


@njit(cache=True, inline="always")
def _family(b, counts, step, now, r, ctx):
    """Block b's parent has one child more (step 1) or fewer (-1) among `counts` (children cached in any
    tier, or with a copy in host memory), which decides whether the parent is evictable below."""
    p = ctx[_TREE][0][b]
    if p >= 0:
        counts[p] += step
        _relist(p, now, r, ctx)


@out_of_line
def _free(t, now, r, ctx):
    """Take the lowest-scored evictable block out of tier t (below GPU memory) and return it, or -1 when
    none can go; the caller says where it goes."""
    S, blocks, pinned, lower = ctx[_STATE], ctx[_BLOCKS], ctx[_FLAGS][1], ctx[_LOWER]
    H, n_heap, scored = lower[_HEAPS][t], lower[_N_HEAP], lower[_SCORED]
    epoch = lower[_EPOCH][1]
    if not ctx[_KEYS][_MODES] & STATIC_BELOW and scored[t] != epoch:  # scores from another moment: anew
        pn = np.int64(0)  # see out_of_line
        for i in range(lower[_N_LIST][t]):
            b = lower[_LISTS][t, i]
            if not pinned[b]:
                H[2 * pn], H[2 * pn + 1] = _tier_score(ctx[_KEYS][_BELOW], b, t, now, r, ctx), S[b, SEQ]
                pn += 1
        heapify(H, pn)
        n_heap[t] = pn
        scored[t] = epoch
    children = lower[_KHOST] if t == HOST else lower[_KIDS]
    held, held_s = lower[_HELD], lower[_HELD_S]
    b, pn, n_held = pop_leaf(H, n_heap[t], blocks, lower[_MEMBER][t], children, pinned, S, held, held_s, 0)
    for i in range(n_held):  # the request's own blocks stay below until it has them in GPU memory
        pn = heap_push(H, pn, held_s[i], S[held[i], SEQ])
    n_heap[t] = pn
    if b >= 0:
        lower[_LOW][b] = 0
        ctx[_CAPACITIES][3 + t] -= 1
        ctx[_COUNTERS][_HOST_EVICTIONS if t == HOST else _DISK_EVICTIONS] += 1
        _relist(b, now, r, ctx)
        if t == HOST:
            _family(b, lower[_KHOST], -1, now, r, ctx)
    return b


@njit(cache=True, inline="always")
def _write(b, t, now, r, ctx):
    """Put block b's copy in tier t, which has room."""
    lower = ctx[_LOWER]
    lower[_LOW][b] = t
    lower[_LOW_SINCE][b] = now
    ctx[_CAPACITIES][3 + t] += 1
    ctx[_COUNTERS][_HOST_WRITES if t == HOST else _DISK_WRITES] += 1
    _relist(b, now, r, ctx)
    if t == HOST:
        _family(b, lower[_KHOST], 1, now, r, ctx)


@out_of_line
def _room_on_disk(now, r, ctx):
    """Make room for one block on disk, dropping its lowest-scored evictable blocks; False if none can go."""
    while ctx[_CAPACITIES][3 + DISK] >= ctx[_CAPACITIES][DISK]:
        v = _free(DISK, now, r, ctx)
        if v < 0:
            return False
        _family(v, ctx[_LOWER][_KIDS], -1, now, r, ctx)
    return True


@out_of_line
def _room_in_host(now, r, ctx):
    """Make room for one block in host memory: a victim goes to disk when there is one with room to make and
    the victim has children cached there or `keep` scores it above 0, else it leaves the cache (a child
    left on disk waits for it to be computed again). False if no block can go."""
    kids, capacities = ctx[_LOWER][_KIDS], ctx[_CAPACITIES]
    while capacities[3 + HOST] >= capacities[HOST]:
        v = _free(HOST, now, r, ctx)
        if v < 0:
            return False
        keep = kids[v] > 0 or _tier_score(ctx[_KEYS][_KEEP], v, HOST, now, r, ctx) > 0.0
        if capacities[DISK] > 0 and keep and _room_on_disk(now, r, ctx):
            _write(v, DISK, now, r, ctx)
        else:
            _family(v, kids, -1, now, r, ctx)
    return True


@njit(cache=True, inline="always")
def _keep_below(b, forced, now, r, ctx):
    """Write block b, leaving GPU memory (or entering it, with write-through), to host memory if it must
    stay cached (`forced`) or `keep` scores it above 0, and room can be made; whether it is still cached."""
    if ctx[_CAPACITIES][HOST] > 0 and (forced or _tier_score(ctx[_KEYS][_KEEP], b, GPU, now, r, ctx) > 0.0):
        if _room_in_host(now, r, ctx):
            _write(b, HOST, now, r, ctx)
            return True
        ctx[_COUNTERS][_WRITE_FAILURES] += 1
    return False


@njit(cache=True, inline="always")
def _demoted(b, now, r, ctx):
    """Block b has just left GPU memory: a copy below stays (and may now be evicted there), else it is
    kept below if it must (children cached below need it) or `keep` says so and room is made, else it
    leaves the cache."""
    low, kids = ctx[_LOWER][_LOW], ctx[_LOWER][_KIDS]
    if low[b] > 0:
        _relist(b, now, r, ctx)
    elif not _keep_below(b, kids[b] > 0, now, r, ctx):
        _family(b, kids, -1, now, r, ctx)


@njit(cache=True, _nrt=False)
def _tiered_requests(ctx, gpu_policy, write_through, counted_from, trace, gpu_keyed, queues, out):
    """The requests in turn, over the arrays _replay_tiered made (without reference counting, as the
    single-tier replay, since it allocates nothing)."""
    S, blocks, counters, capacities = ctx[_STATE], ctx[_BLOCKS], ctx[_COUNTERS], ctx[_CAPACITIES]
    modes, f_gpu = ctx[_KEYS][_MODES], ctx[_KEYS][_PRIORITY]
    times, offsets, next_pos = trace
    parent, block_tokens = ctx[_TREE][0], ctx[_TREE][2]
    prefill, host_ms, disk_ms = ctx[_COSTS][_PREFILL], ctx[_COSTS][_HOST_MS], ctx[_COSTS][_DISK_MS]
    gpu, pinned, nchild = ctx[_FLAGS]
    lower = ctx[_LOWER]
    low, kids, gpu_since, where = lower[_LOW], lower[_KIDS], lower[_GPU_SINCE], lower[_WHERE]
    scored, epoch = lower[_SCORED], lower[_EPOCH]
    seen, leaves, leaf_pos, H, held, held_s, ewma = gpu_keyed
    ttft, req_turns, req_gaps = out
    ghost_hit = queues[7]
    n_req = offsets.size - 1
    capacity = capacities[GPU]
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
        epoch[0] = r if modes & PRIORITY_READS_PARENT else now
        epoch[1] = r if modes & BELOW_READS_PARENT else now
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
            if not static and scored[0] != epoch[0]:  # scores from another moment: all leaves anew
                pn = zero
                for i in range(n_leaves):
                    b = leaves[i]
                    if not pinned[b]:
                        H[2 * pn], H[2 * pn + 1] = _tier_score(f_gpu, b, GPU, now, r, ctx), S[b, SEQ]
                        pn += 1
                heapify(H, pn)
                scored[0] = epoch[0]
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
                _family(b, kids, 1, now, r, ctx)
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
            if gpu[b] and nchild[b] == 0 and (static or scored[0] == epoch[0]):  # touched: scored anew
                pn = _push(H, pn, _tier_score(f_gpu, b, GPU, now, r, ctx), b, S, blocks, gpu, nchild)
            elif not gpu[b] and where[b] > 0 and (modes & STATIC_BELOW or scored[where[b]] == epoch[1]):
                _push_below(b, where[b], now, r, ctx)  # found below, not taken in, touched: scored anew


def _replay_tiered(
    keys,
    params,
    gpu_policy,
    capacities,
    write_through,
    times,
    offsets,
    blocks,
    parent,
    depth,
    block_tokens,
    costs,
    counted_from,
):
    n_req = offsets.size - 1
    nb = parent.size
    capacities = np.minimum(
        capacities, nb
    )  # a tier that holds every block of the trace never evicts: sized so
    next_pos, prefix_tokens = trace_tables(blocks, parent, block_tokens)
    max_len = longest_request(offsets)

    S = np.zeros((nb, N_STATE), np.float64)
    X = np.zeros((1, N_TIER_COLUMNS), np.float64)
    flags = (np.zeros(nb, np.bool_), np.zeros(nb, np.bool_), np.zeros(nb, np.int64))
    room = max(min(capacities[HOST], nb), min(capacities[DISK], nb))
    room = 2 * room + 2 * max_len + 16 if room > 0 else 0  # a heap below holds its tier and stale entries
    lower = (
        np.zeros(nb, np.int64),  # low
        np.zeros(nb, np.int64),  # kids
        np.zeros(nb, np.int64),  # khost
        np.zeros(nb, np.float64),  # gpu_since
        np.zeros(nb, np.float64),  # low_since
        np.zeros(nb, np.int64),  # where
        np.zeros(nb, np.int64),  # list_pos
        np.zeros((3, nb if room else 0), np.bool_),  # member
        np.empty((3, nb if room else 0), np.int64),  # lists
        np.zeros(3, np.int64),  # n_list
        np.empty((3, 2 * room), np.float64),  # heaps
        np.zeros(3, np.int64),  # n_heap
        np.full(3, np.nan),  # scored
        np.empty(max_len + 1, np.int64),  # held
        np.empty(max_len + 1, np.float64),  # held_s
        np.zeros(2, np.float64),  # epoch
    )
    counters = np.zeros(len(TIER_COUNTERS), np.int64)
    used = np.zeros(6, np.int64)
    used[:3] = capacities
    tree = (parent, depth, block_tokens, prefix_tokens)
    ctx = (keys, params, X, S, tree, blocks, costs, flags, lower, counters, used)

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
    queues = new_queues(nb, gpu_policy)
    ttft = np.zeros(n_req, np.float64)
    out = (ttft, np.ones(n_req, np.float64), np.zeros(n_req, np.float64))
    _tiered_requests(
        ctx, gpu_policy, write_through, counted_from, (times, offsets, next_pos), gpu_keyed, queues, out
    )
    return counters, ttft


_I64 = types.int64[::1]
_F64 = types.float64[::1]
_SIGNATURE = types.Tuple((_I64, _F64))(
    types.Tuple((types.int64, FUNCTION_TYPE, FUNCTION_TYPE, FUNCTION_TYPE)),
    _F64,
    types.int64,
    _I64,
    types.boolean,
    _F64,
    _I64,
    _I64,
    _I64,
    _I64,
    _I64,
    types.UniTuple(_F64, 4),
    types.int64,
)


@functools.cache
def compiled_replay_tiered() -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    """The tiered replay kernel, compiled on first use and cached on disk by numba."""
    return njit(_SIGNATURE, cache=True)(_replay_tiered)
