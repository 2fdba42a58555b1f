"""A fleet of serving instances behind a router, on one clock; the policies are three keys.

Mechanism, as a router in front of N vLLM or SGLang engines runs:
- each instance is the batching scheduler (targets/batching/scheduler.py: chunked prefill, token budget,
  paged pool, preemption by recompute), ordering its requests by the `priority` key, over a prefix cache
  of the trace's blocks: a request admitted computes from the first block of its prompt the instance
  lacks, and each full prompt block it computes enters the cache, pinned while it runs;
- a block no running request holds and no cached child extends is evictable: scored by the `evict` key
  when it becomes so (its features do not change until a request touches it again), the lowest evicted
  first when the pool needs room, in the eviction heap of targets/kv (ties: the earlier pushed);
- the router sees each request as it arrives and every instance's state then, scores each instance with
  the `route` key, and sends the request to the highest (ties: the first instance); built-in routers
  (round-robin, random, power of two choices, hashing the prompt's first blocks) are mechanism variants;
- one clock interleaves the instances: the next event is the earliest of the next arrival and the end of
  an instance's iteration (an end first on a tie, so an arrival sees what that iteration finished); an
  idle instance plans as soon as a request reaches it. Each iteration is priced by the deployment's cost
  model exactly as the batching simulator prices it.

Memory is counted as the batching scheduler counts it: a running request's blocks whole against its
instance's pool, shared or not; what no running request holds is the cache, evicted to make room.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit, types

from targets.batching.compiled_scheduler import Pricing, price
from targets.batching.features import N_COLUMNS
from targets.batching.scheduler import (
    DONE,
    RUNNING,
    CompiledKey,
    Limits,
    Served,
    cached_prefix,
    commit,
    drop_done,
    initial_state,
    plan_cached,
    request_first_token,
    request_progress,
    request_status,
    unfinished,
)
from targets.batching.trace import Requests
from targets.kv.eviction_heap import heap_pop, heap_push, heapify
from verifiers.compiler import FUNCTION_TYPE

from .features import EVICT_FEATURES, ROUTE_FEATURES

BY_KEY, ROUND_ROBIN, POWER_OF_TWO, PREFIX_HASH, RANDOM = 0, 1, 2, 3, 4
"""How the router picks: the route key, or a built-in router."""
SAMPLES = 48
"""Points of the per-instance time series (queue length, hit rate) over the trace's span."""
HIT_WINDOW = 32.0
"""Admissions a hit rate's moving average spans (its weight is 1/32)."""
_STUCK, _GAVE_UP = -1, -2


@dataclass(frozen=True)
class Fleet:
    """N instances alike: each one's limits, and how its prefill is estimated for a request's TTFT."""

    instances: int
    limits: Limits
    prefill_s_per_token: float
    """The deployment's prefill time per token at a full token budget: the TTFT estimate's rate."""


@dataclass(frozen=True)
class Prefixes:
    """Each request's prompt as the trace's blocks: request r's are blocks[offsets[r]:offsets[r + 1]],
    dense ids whose parents are `parent` (-1 for a first block) at `depth` (1 first); `first_hash` is what a
    hashing router hashes of each request (workload.AFFINITY_BLOCKS)."""

    offsets: np.ndarray
    blocks: np.ndarray
    parent: np.ndarray
    depth: np.ndarray
    first_hash: np.ndarray


@dataclass(frozen=True)
class Policies:
    """The three keys and their PARAMS vectors; `router` picks by the route key or a built-in router."""

    route: Callable[..., float]
    route_params: np.ndarray
    schedule: Callable[..., float]
    schedule_params: np.ndarray
    evict: Callable[..., float]
    evict_params: np.ndarray
    router: int = BY_KEY
    seed: int = 0


@dataclass(frozen=True)
class Replayed:
    """What the fleet did: every request's scheduler state, where it went, the instances its router scored
    best when it arrived (a bit each, instance 0 the lowest; ties set several), the prompt tokens it found
    cached when first admitted, and each instance's queue and hit rate over time (SAMPLES points from the
    first arrival, `sample_s` apart)."""

    served: Served
    routed: np.ndarray
    best: np.ndarray
    held: np.ndarray
    """Each instance's KV blocks held by running requests when the replay stopped."""
    hit_tokens: np.ndarray
    queue_series: np.ndarray
    hit_series: np.ndarray
    sample_s: float
    gave_up: bool


@njit(cache=True, inline="always")
def _full_blocks(r, S, offsets, block_tokens):
    """The blocks of request r's prompt that are full, so can be cached."""
    prompt = request_progress(S, r)[0]
    return min(offsets[r + 1] - offsets[r], int(prompt // block_tokens))


@njit(cache=True)
def _score_block(evict, PE, XE, s, last, inserted, hits, depth):
    XE[0, 0], XE[0, 1], XE[0, 2], XE[0, 3] = last[s], inserted[s], hits[s], depth
    return evict(XE, 0, PE)


def _fleet(
    route,
    PR,
    schedule,
    PS,
    evict,
    PE,
    router,
    seed,
    S,
    arrival,
    offsets,
    blocks,
    parent,
    depth,
    first_hash,
    n_instances,
    pool,
    setting0,
    prefill_rate,
    horizon,
    stop_arrival,
    give_up_after,
    sample_s,
    linear,
    head,
    prefill,
    decode,
    shape,
    routed,
    best_set,
    held_out,
    hit_tokens,
    queue_series,
    hit_series,
):
    """The fleet's event loop; returns (iterations, end time, status: 0, _STUCK or _GAVE_UP). A request
    whose `routed` entry is already an instance goes there whatever the router scores (a recorded
    router's decisions replayed); the router's own best instances are in `best_set` either way."""
    n = arrival.size
    N = n_instances
    block_tokens = setting0[2]
    budget = int(setting0[1])
    layers, width, weights_ms, key_ms = shape[0], shape[1], shape[2], shape[3]
    np.random.seed(seed)
    # Instances: live requests, the iteration in flight, the planner's free blocks.
    live = np.zeros((N, n), dtype=np.int64)
    count = np.zeros(N, dtype=np.int64)
    rows_out = np.zeros((N, 3, budget), dtype=np.int64)
    n_rows = np.zeros(N, dtype=np.int64)
    busy = np.full(N, np.inf)
    setting = np.zeros((N, setting0.size))
    for i in range(N):
        setting[i] = setting0
    free = np.full(N, pool, dtype=np.int64)
    X = np.zeros((n, N_COLUMNS))
    preempted = np.zeros(n, dtype=np.int64)
    chunk_ms = np.zeros(budget)
    cache = _new_caches(N, min(pool, parent.size), parent.size)  # no more blocks to hold than the trace's
    slot, s_block, refs, kids, hits, last, inserted, queued_at, spare, n_spare, resident, H, n_heap, _ = cache
    pinned_sum = np.zeros(N, dtype=np.int64)
    hit_rate = np.zeros(N)
    pinned = np.zeros(n, dtype=np.int64)  # leading prompt blocks each request pins
    admitted = np.zeros(n, dtype=np.bool_)
    XE = np.zeros((1, 4))
    XR = np.zeros((N, 25))
    sent = np.zeros((N, parent.size), dtype=np.bool_)  # blocks routed to each instance so far
    tree = np.zeros(N)
    # Requests in the order they arrive; the loop.
    a, iterations, now, status, rr = 0, 0, 0.0, 0, 0
    late, checked = 0, 0
    t0 = arrival[0] if n > 0 else 0.0
    next_sample = 0
    n_samples = queue_series.shape[1]
    while True:
        i_end, t_end = -1, np.inf
        for i in range(N):
            if busy[i] < t_end:
                i_end, t_end = i, busy[i]
        t_arr = arrival[a] if a < n else np.inf
        if i_end < 0 and a >= n:
            break
        now = min(t_end, t_arr)
        if now > horizon or (t_end > t_arr and a >= stop_arrival):
            break
        while next_sample < n_samples and t0 + next_sample * sample_s <= now:
            for i in range(N):
                queued = 0
                for k in range(count[i]):
                    if request_status(S, live[i, k]) != RUNNING:
                        queued += 1
                queue_series[i, next_sample] = queued
                hit_series[i, next_sample] = hit_rate[i]
            next_sample += 1
        if t_end <= t_arr:  # an iteration ends: commit it, cache what it computed, plan the next
            i = i_end
            busy[i] = np.inf
            rows = n_rows[i]
            ids = rows_out[i, 0]
            free[i] = commit(S, ids, rows_out[i, 2], rows, now, free[i])
            for k in range(rows):
                r = ids[k]
                first = offsets[r]
                upto = min(
                    int(request_progress(S, r)[2] // block_tokens), _full_blocks(r, S, offsets, block_tokens)
                )
                for j in range(pinned[r], upto):
                    b = blocks[first + j]
                    s = slot[i, b]
                    if s < 0:  # a new block: it takes the slot of the copy the request computed
                        n_spare[i] -= 1
                        s = spare[i, n_spare[i]]
                        slot[i, b] = s
                        s_block[i, s], refs[i, s], kids[i, s] = b, 1, 0
                        hits[i, s], last[i, s], inserted[i, s] = 0.0, now, now
                        resident[i] += 1
                        if parent[b] >= 0:
                            kids[i, slot[i, parent[b]]] += 1
                    else:  # computed alongside another request: share the cached one
                        if refs[i, s] == 0:
                            queued_at[i, s] = -1.0
                        refs[i, s] += 1
                        last[i, s] = now
                if upto > pinned[r]:
                    pinned_sum[i] += upto - pinned[r]
                    pinned[r] = upto
                if request_status(S, r) == DONE:
                    if request_first_token(S, r) - arrival[r] > setting0[4]:
                        late += 1
                    _unpin(cache, i, r, now, pinned, pinned_sum, offsets, blocks, depth, evict, PE, XE)
            count[i] = drop_done(S, live[i], count[i])
        else:  # a request arrives: route it
            r = a
            a += 1
            if router == ROUND_ROBIN:
                i = rr % N
                rr += 1
            elif router == POWER_OF_TWO:  # two distinct instances at random: the one with fewer requests
                i = np.random.randint(0, N)
                j = np.random.randint(0, N - 1) if N > 1 else i
                j = j + 1 if N > 1 and j >= i else j
                i = i if count[i] <= count[j] else j
            elif router == RANDOM:
                i = np.random.randint(0, N)
            elif router == PREFIX_HASH:
                h = np.uint64(first_hash[r]) * np.uint64(0x9E3779B97F4A7C15)
                h ^= h >> np.uint64(31)
                i = np.int64(h % np.uint64(N))
            else:
                i = -1
            if i >= 0:
                best_set[r] = 1 << i
            else:
                i, best_set[r] = _route(
                    route,
                    PR,
                    XR,
                    r,
                    now,
                    S,
                    live,
                    count,
                    free,
                    pool,
                    tree,
                    hit_rate,
                    slot,
                    sent,
                    offsets,
                    blocks,
                    block_tokens,
                    prefill_rate,
                    N,
                )
            if routed[r] >= 0:
                i = routed[r]
            routed[r] = i
            for k in range(offsets[r], offsets[r + 1]):
                if not sent[i, blocks[k]]:
                    sent[i, blocks[k]] = True
                    tree[i] += 1.0
            live[i, count[i]] = r
            count[i] += 1
            if busy[i] < np.inf:
                continue
        # Plan instance i's next iteration at `now`, if it is idle and has requests.
        if count[i] == 0:
            continue
        while True:
            setting[i, 0] = free[i]
            rows, lost, free[i] = plan_cached(
                schedule,
                PS,
                S,
                live[i, : count[i]],
                now,
                setting[i],
                X,
                rows_out[i],
                preempted,
                offsets,
                blocks,
                slot[i],
            )
            for k in range(lost):
                _unpin(cache, i, preempted[k], now, pinned, pinned_sum, offsets, blocks, depth, evict, PE, XE)
            if rows > 0 or lost == 0:
                break
        if rows == 0:
            status = _STUCK
            break
        for k in range(rows):  # pin the cached prefix a request was admitted on
            r = rows_out[i, 0, k]
            upto = min(rows_out[i, 1, k] // int(block_tokens), _full_blocks(r, S, offsets, block_tokens))
            for j in range(pinned[r], upto):
                s = slot[i, blocks[offsets[r] + j]]
                if refs[i, s] == 0:
                    queued_at[i, s] = -1.0
                refs[i, s] += 1
                hits[i, s] += 1.0
                last[i, s] = now
            if upto > pinned[r]:
                pinned_sum[i] += upto - pinned[r]
                pinned[r] = upto
            if not admitted[r]:
                admitted[r] = True
                hit_tokens[r] = rows_out[i, 1, k]
                share = rows_out[i, 1, k] / request_progress(S, r)[0]
                hit_rate[i] += (share - hit_rate[i]) / HIT_WINDOW
        held = pool - free[i]
        while resident[i] + held - pinned_sum[i] > pool:  # make room: evict the lowest-scored blocks
            if n_heap[i] == 0:
                status = _STUCK
                break
            q = H[i, 1]
            n_heap[i] = heap_pop(H[i], n_heap[i])
            s = int(q % queued_at.shape[1])
            if queued_at[i, s] != q:
                continue
            _evict(cache, i, s, parent, depth, evict, PE, XE)
        if status != 0:
            break
        rows_out_i = rows_out[i]
        ms = price(
            rows_out_i[1],
            rows_out_i[2],
            rows,
            linear,
            head,
            prefill,
            decode,
            layers,
            width,
            weights_ms,
            key_ms,
            chunk_ms,
        )
        n_rows[i] = rows
        busy[i] = now + ms / 1e3
        iterations += 1
        checked += 1
        if give_up_after >= 0 and checked >= 64:  # a capacity sweep: stop once the goal is surely missed
            checked = 0
            waiting_late = 0
            for j in range(N):
                for k in range(count[j]):
                    r = live[j, k]
                    if (
                        request_first_token(S, r) != request_first_token(S, r)
                        and now - arrival[r] > setting0[4]
                    ):
                        waiting_late += 1
            if late + waiting_late > give_up_after:
                status = _GAVE_UP
                break
    for i in range(N):
        held_out[i] = pool - free[i]
    while next_sample < n_samples:
        for i in range(N):
            queue_series[i, next_sample] = queue_series[i, next_sample - 1] if next_sample > 0 else 0.0
            hit_series[i, next_sample] = hit_rate[i]
        next_sample += 1
    return float(iterations), now, float(status)


@njit(cache=True)
def _route(
    route,
    PR,
    XR,
    r,
    now,
    S,
    live,
    count,
    free,
    pool,
    tree,
    hit_rate,
    slot,
    sent,
    offsets,
    blocks,
    block_tokens,
    prefill_rate,
    N,
):
    """Score every instance for request r with the route key: the first highest wins; and the bits of
    every instance that scored the highest."""
    prompt = request_progress(S, r)[0]
    prompt_blocks = max(offsets[r + 1] - offsets[r], 1)
    best_match, best_routed = 0.0, 0.0
    low_out, high_out, low_q, high_q = np.inf, 0.0, np.inf, 0.0
    for i in range(N):
        running, decoding, prefill_left = 0, 0, 0.0
        for k in range(count[i]):
            q = live[i, k]
            p, generated, computed = request_progress(S, q)
            if request_status(S, q) == RUNNING:
                running += 1
                if generated > 0:
                    decoding += 1
            if generated == 0:
                prefill_left += p - computed
        cached = cached_prefix(r, S, offsets, blocks, slot[i], block_tokens)
        match = cached / prompt_blocks
        best_match = max(best_match, match)
        seen = 0
        while offsets[r] + seen < offsets[r + 1] and sent[i, blocks[offsets[r] + seen]]:
            seen += 1
        best_routed = max(best_routed, seen / prompt_blocks)
        queued = count[i] - running
        low_out, high_out = min(low_out, count[i]), max(high_out, count[i])
        low_q, high_q = min(low_q, queued), max(high_q, queued)
        uncached = prompt - cached * block_tokens
        x = XR[i]
        x[0], x[1], x[2], x[3], x[4] = prompt, prompt_blocks, cached, uncached, match
        x[6], x[7], x[8], x[9], x[10], x[11] = i, count[i], running, queued, prefill_left, decoding
        x[12], x[13], x[14] = pool - free[i], free[i], (pool - free[i]) / pool
        x[15], x[16], x[17] = tree[i], hit_rate[i], (prefill_left + uncached) * prefill_rate
        x[22], x[23] = seen, seen / prompt_blocks
    best, choice, tied = -np.inf, 0, 0
    for i in range(N):
        x = XR[i]
        x[5], x[18], x[19], x[20], x[21], x[24] = best_match, low_out, high_out, low_q, high_q, best_routed
        score = route(XR, i, PR)
        if score > best:
            best, choice, tied = score, i, 0
        if score == best:
            tied |= 1 << i
    return choice, tied


@njit(cache=True)
def _new_caches(N, pool, n_blocks):
    """Empty prefix caches of `pool` slots for N instances, as one tuple the helpers below share:
    (slot of each trace block, -1 if absent; each slot's block, running requests holding it (refs), cached
    children (kids), hits, last access, insertion time, the heap entry that stands for it while evictable
    (queued_at, -1 if none); free slots and their count; blocks held; the eviction heap and its size;
    pushes so far, which make each entry unique)."""
    spare = np.zeros((N, pool), dtype=np.int64)
    for i in range(N):
        for k in range(pool):
            spare[i, k] = pool - 1 - k
    return (
        np.full((N, n_blocks), -1, dtype=np.int32),
        np.zeros((N, pool), dtype=np.int64),
        np.zeros((N, pool), dtype=np.int64),
        np.zeros((N, pool), dtype=np.int64),
        np.zeros((N, pool)),
        np.zeros((N, pool)),
        np.zeros((N, pool)),
        np.full((N, pool), -1.0),
        spare,
        np.full(N, pool, dtype=np.int64),
        np.zeros(N, dtype=np.int64),
        np.zeros((N, 2 * (4 * pool + 16))),
        np.zeros(N, dtype=np.int64),
        np.zeros(1, dtype=np.int64),
    )


@njit(cache=True)
def _push(cache, i, s, depth_b, evict, PE, XE):
    """Score evictable slot s of instance i and queue it. A full heap is rebuilt first from the entries
    still standing (there are at most as many as slots)."""
    _, _, _, _, hits, last, inserted, queued_at, _, _, _, H, n_heap, pushes = cache
    pool = queued_at.shape[1]
    if 2 * n_heap[i] >= H.shape[1]:
        kept = 0
        for k in range(n_heap[i]):
            q = H[i, 2 * k + 1]
            if queued_at[i, int(q % pool)] == q:
                H[i, 2 * kept], H[i, 2 * kept + 1] = H[i, 2 * k], q
                kept += 1
        heapify(H[i], kept)
        n_heap[i] = kept
    score = _score_block(evict, PE, XE, s, last[i], inserted[i], hits[i], depth_b)
    q = float(pushes[0] * pool + s)
    pushes[0] += 1
    queued_at[i, s] = q
    n_heap[i] = heap_push(H[i], n_heap[i], score, q)


@njit(cache=True)
def _unpin(cache, i, r, now, pinned, pinned_sum, offsets, blocks, depth, evict, PE, XE):
    """Request r lets go of the blocks it pinned on instance i (it finished, or was preempted)."""
    slot, _, refs, kids, _, last, _, _, _, _, _, _, _, _ = cache
    for j in range(pinned[r] - 1, -1, -1):
        b = blocks[offsets[r] + j]
        s = slot[i, b]
        refs[i, s] -= 1
        last[i, s] = now
        if refs[i, s] == 0 and kids[i, s] == 0:
            _push(cache, i, s, depth[b], evict, PE, XE)
    pinned_sum[i] -= pinned[r]
    pinned[r] = 0


@njit(cache=True)
def _evict(cache, i, s, parent, depth, evict, PE, XE):
    """Drop slot s's block from instance i's cache; its parent may become evictable."""
    slot, s_block, refs, kids, _, _, _, queued_at, spare, n_spare, resident, _, _, _ = cache
    b = s_block[i, s]
    slot[i, b] = -1
    queued_at[i, s] = -1.0
    spare[i, n_spare[i]] = s
    n_spare[i] += 1
    resident[i] -= 1
    p = parent[b]
    if p >= 0:
        ps = slot[i, p]
        kids[i, ps] -= 1
        if kids[i, ps] == 0 and refs[i, ps] == 0:
            _push(cache, i, ps, depth[p], evict, PE, XE)


_F64, _I64 = types.float64[::1], types.int64[::1]
_F2 = types.float64[:, ::1]
_FLEET_SIGNATURE = types.UniTuple(types.float64, 3)(
    FUNCTION_TYPE,
    _F64,
    FUNCTION_TYPE,
    _F64,
    FUNCTION_TYPE,
    _F64,
    types.int64,
    types.int64,
    _F2,
    _F64,
    _I64,
    _I64,
    _I64,
    _I64,
    _I64,
    types.int64,
    types.int64,
    _F64,
    types.float64,
    types.float64,
    types.int64,
    types.int64,
    types.float64,
    _F64,
    _F64,
    _F64,
    _F64,
    _F64,
    _I64,
    _I64,
    _F64,
    _F64,
    _F2,
    _F2,
)


@functools.cache
def compiled_fleet() -> Callable[..., tuple[float, float, float]]:
    """The loop compiled once per process for any three keys (first-class function arguments)."""
    return njit(_FLEET_SIGNATURE, cache=True)(_fleet)


class FleetStuck(RuntimeError):
    """The policies left live requests that nothing could schedule."""


def replay(
    requests: Requests,
    prefixes: Prefixes,
    fleet: Fleet,
    policies: Policies,
    pricing: Pricing,
    slo_s: tuple[float, float],
    horizon_s: float,
    give_up_after: int = -1,
    follow: np.ndarray | None = None,
    stop_before: int = -1,
) -> Replayed:
    """The requests through the fleet; with `give_up_after` >= 0 it stops once more requests than that
    have surely missed the TTFT SLO (a capacity sweep needs no more). `follow`, an instance per request,
    sends each where another router sent it (its record), the policies' router still scoring every one.
    `stop_before` >= 0 stops the replay just before that request arrives: the fleet as that request meets
    it."""
    limits = fleet.limits
    limits.check(requests)
    S = initial_state(requests)
    n = requests.n
    routed = np.full(n, -1, dtype=np.int64)
    if follow is not None:
        routed[:] = follow
    best = np.zeros(n, dtype=np.int64)
    held = np.zeros(fleet.instances)
    hit_tokens = np.zeros(n)
    span = float(requests.arrival_s[-1] - requests.arrival_s[0]) if n else 0.0
    sample_s = max(span, 1e-3) / (SAMPLES - 1)
    queue_series = np.zeros((fleet.instances, SAMPLES))
    hit_series = np.zeros((fleet.instances, SAMPLES))
    iterations, end, status = compiled_fleet()(
        CompiledKey(policies.route),
        _vector(policies.route_params),
        CompiledKey(policies.schedule),
        _vector(policies.schedule_params),
        CompiledKey(policies.evict),
        _vector(policies.evict_params),
        int(policies.router),
        int(policies.seed),
        S,
        np.ascontiguousarray(requests.arrival_s, dtype=np.float64),
        prefixes.offsets,
        prefixes.blocks,
        prefixes.parent,
        prefixes.depth,
        prefixes.first_hash,
        int(fleet.instances),
        int(limits.kv_blocks),
        limits.setting(slo_s),
        float(fleet.prefill_s_per_token),
        float(horizon_s),
        int(stop_before) if stop_before >= 0 else n + 1,
        int(give_up_after),
        float(sample_s),
        pricing.linear,
        pricing.head,
        pricing.prefill,
        pricing.decode,
        pricing.shape(),
        routed,
        best,
        held,
        hit_tokens,
        queue_series,
        hit_series,
    )
    if status == _STUCK:
        raise FleetStuck("the fleet is stuck: live requests, none schedulable")
    served = Served(S, int(iterations), float(end), unfinished(S))
    return Replayed(
        served, routed, best, held, hit_tokens, queue_series, hit_series, sample_s, status == _GAVE_UP
    )


def _vector(params: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(params, dtype=np.float64)


assert len(ROUTE_FEATURES) == 25 and len(EVICT_FEATURES) == 4, "the loop fills these columns by position"
