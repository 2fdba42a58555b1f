"""An offline batch through continuous batching over a paged pool with a prefix cache; the policy is one key.

Mechanism, as vLLM's offline `LLM` class runs a batch (V1 scheduler, prefix caching on):
- every sequence is present at time zero, in a waiting queue ordered by priority(r, p), the highest first
  (ties by position in the batch). A sequence is scored when it joins the queue, at zero and after each
  preemption: scoring all of a 100,000-sequence queue every iteration would cost more than the iteration;
- every iteration is one forward pass over at most `token_budget` tokens. Running sequences come first,
  the highest-scored first: one token each while decoding, a prefill chunk otherwise. One that needs
  a block when none is free first evicts cached prefix blocks no one holds (least recently used first),
  then preempts the lowest-scored running sequence not yet served this iteration (itself, if there is none),
  which frees its blocks and later recomputes its prompt and output so far;
- then, if no one was preempted, waiting sequences are admitted from the top of the queue while the budget,
  `max_seqs` and the blocks allow (with `admit_whole_prompt`, vLLM's scheduler_reserve_full_isl, the blocks
  of its whole prompt must be free or evictable); the first that does not fit stops admission;
- prompts are prefix blocks of `unit_tokens` tokens (the batch's own block ids, as Mooncake's hash ids).
  A block a running sequence has computed in full enters the cache, pinned while it runs (one already
  cached is shared and its copy freed); a sequence admitted computes from the first block of its prompt
  the cache lacks. A shared block counts once against the pool, as vLLM counts it.

Each iteration is priced exactly as the batching simulator prices it (compiled_scheduler.price).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit, types

from targets.batching.compiled_scheduler import Pricing, price
from targets.batching.scheduler import CompiledKey
from targets.kv.eviction_heap import heap_pop, heap_push, heapify
from verifiers.compiler import FUNCTION_TYPE

from .features import PREEMPTIONS_COLUMN

WAITING, RUNNING, DONE = 0, 1, 2
(_ITERATIONS, _END, _PREEMPTIONS, _RECOMPUTED, _PEAK_BLOCKS, _HIT_TOKENS, _UNFINISHED, _STUCK, _LOGGED) = (
    range(9)
)
_N_TOTALS = 9
DECISION_COLUMNS = ("iteration", "sequence", "start", "tokens")
"""A decision log row: a sequence computes `tokens` tokens from `start` in an iteration; a row with start -1
and tokens 0 says it was preempted there (after the iteration's rows)."""


@dataclass(frozen=True)
class Machine:
    """What the engine allows: the pool, the block and prefix-block sizes, the budget and the batch cap."""

    kv_blocks: int
    block_tokens: int
    token_budget: int
    max_seqs: int
    admit_whole_prompt: bool = True
    unit_tokens: int = 0
    """Tokens per prefix block (a multiple of block_tokens); 0 where the batch states no prefixes."""


@dataclass(frozen=True)
class Ran:
    """What the batch did: each sequence's first-token and finish times, and the run's counters."""

    first_token: np.ndarray
    finish: np.ndarray
    iterations: int
    end_s: float
    preemptions: int
    recomputed_tokens: int
    peak_blocks: int
    hit_tokens: int
    unfinished: int
    decisions: np.ndarray
    """Rows of DECISION_COLUMNS where the run was recorded; else none."""


@njit(cache=True, inline="always")
def _score(key, X, r, P):
    """Sequence r's priority; NaN ranks lowest. The waiting heap is a min-heap, so it holds the negation."""
    s = key(X, r, P)
    return -np.inf if s != s else s


@njit(cache=True)
def _release(r, now, pinned, offsets, units, refs, cached, stamp, E, ne, pushes, n_units):
    """Sequence r lets go of its pinned prefix blocks, the deepest first (so evicted first on a tie); a
    block no one holds any more becomes evictable. Returns the eviction heap's size and evictable count."""
    freed = 0
    for j in range(pinned[r] - 1, -1, -1):
        u = units[offsets[r] + j]
        refs[u] -= 1
        if refs[u] == 0 and cached[u]:
            if 2 * ne + 2 > E.shape[0]:  # full of stale entries: keep the standing ones
                kept = 0
                for k in range(ne):
                    q = E[2 * k + 1]
                    v = int(q % n_units)
                    if cached[v] and refs[v] == 0 and stamp[v] == q:
                        E[2 * kept], E[2 * kept + 1] = E[2 * k], q
                        kept += 1
                heapify(E, kept)
                ne = kept
            q = float(pushes[0] * n_units + u)
            pushes[0] += 1
            stamp[u] = q
            ne = heap_push(E, ne, now, q)
            freed += 1
    pinned[r] = 0
    return ne, freed


@njit(cache=True)
def _evict(E, ne, refs, cached, stamp, n_units):
    """Drop the least recently used evictable prefix block; returns the heap's size and 1 (0 if none)."""
    while ne > 0:
        q = E[1]
        ne = heap_pop(E, ne)
        u = int(q % n_units)
        if cached[u] and refs[u] == 0 and stamp[u] == q:
            cached[u] = False
            stamp[u] = -1.0
            return ne, 1
    return ne, 0


@njit(cache=True, inline="always")
def _still_running(running, nr, status):
    """Keep, in order and in place, the sequences of the running list still running; returns how many."""
    kept = 0
    for i in range(nr):
        if status[running[i]] == RUNNING:
            running[kept] = running[i]
            kept += 1
    return kept


@njit(cache=True, inline="always")
def _hits(r, prompt, offsets, units, cached, unit_tokens):
    """The leading full prompt blocks of r the cache holds, leaving at least one token to compute."""
    if unit_tokens == 0:
        return 0
    limit = min(offsets[r + 1] - offsets[r], (prompt[r] - 1) // unit_tokens)
    hit = 0
    while hit < limit and cached[units[offsets[r] + hit]]:
        hit += 1
    return hit


def _run(
    key, P, X, prompt, output, offsets, units, n_units, machine, horizon,
    linear, head, prefill, decode, shape, first, finish, totals, log,
):  # fmt: skip
    """The batch to the end (or the horizon); fills `first`, `finish`, `totals` (the _N_TOTALS) and the
    decisions `log` has room for."""
    n = prompt.size
    kv_blocks, block_tokens, budget, max_seqs = machine[0], machine[1], machine[2], machine[3]
    whole_prompt, unit_tokens = machine[4] != 0, machine[5]
    unit_blocks = unit_tokens // block_tokens
    layers, width, weights_ms, key_ms = shape[0], shape[1], shape[2], shape[3]
    computed = np.zeros(n, dtype=np.int64)
    generated = np.zeros(n, dtype=np.int64)
    private = np.zeros(n, dtype=np.int64)  # blocks a sequence holds beyond its pinned prefix blocks
    pinned = np.zeros(n, dtype=np.int64)  # its leading prefix blocks it holds in the cache
    status = np.zeros(n, dtype=np.int64)
    score = np.zeros(n)
    refs = np.zeros(max(n_units, 1), dtype=np.int64)
    cached = np.zeros(max(n_units, 1), dtype=np.bool_)
    stamp = np.full(max(n_units, 1), -1.0)
    E = np.zeros(2 * (2 * max(n_units, 1) + 16))
    ne, evictable = 0, 0
    pushes = np.zeros(1, dtype=np.int64)
    H = np.zeros(2 * n)
    nh = 0
    for r in range(n):
        score[r] = _score(key, X, r, P)
        nh = heap_push(H, nh, -score[r], float(r))
    running = np.zeros(max_seqs, dtype=np.int64)
    nr = 0
    ids = np.zeros(budget, dtype=np.int64)
    starts = np.zeros(budget, dtype=np.int64)
    tokens = np.zeros(budget, dtype=np.int64)
    chunk_ms = np.zeros(budget)
    victims = np.zeros(n, dtype=np.int64)
    logged = 0
    now, free, done = 0.0, kv_blocks, 0
    iterations, preemptions, recomputed, peak, hit_tokens, stuck = 0, 0, 0, 0, 0, 0
    while done < n and now < horizon:
        left, rows, lost = budget, 0, 0
        for i in range(nr):  # running sequences, the highest-scored first
            r = running[i]
            if status[r] != RUNNING:
                continue
            if left == 0:
                break
            take = min(prompt[r] + generated[r] - computed[r], left)
            need = -(-(computed[r] + take - pinned[r] * unit_tokens) // block_tokens) - private[r]
            while need > free:
                if evictable > 0:
                    ne, gone = _evict(E, ne, refs, cached, stamp, n_units)
                    evictable = evictable - 1 if gone else 0
                    free += gone * unit_blocks
                    continue
                victim = r
                for j in range(nr - 1, i, -1):  # the lowest-scored running sequence not yet served
                    if status[running[j]] == RUNNING:
                        victim = running[j]
                        break
                ne, freed = _release(
                    victim, now, pinned, offsets, units, refs, cached, stamp, E, ne, pushes, n_units
                )
                evictable += freed
                free += private[victim]
                private[victim] = 0
                recomputed += computed[victim]
                computed[victim] = 0
                status[victim] = WAITING
                X[victim, PREEMPTIONS_COLUMN] += 1.0
                score[victim] = _score(key, X, victim, P)
                nh = heap_push(H, nh, -score[victim], float(victim))
                victims[lost] = victim
                lost += 1
                if victim == r:
                    break
            if status[r] != RUNNING:
                continue
            free -= need
            private[r] += need
            ids[rows], starts[rows], tokens[rows] = r, computed[r], take
            rows += 1
            left -= take
        nr = _still_running(running, nr, status)
        while lost == 0 and nh > 0 and left > 0 and nr < max_seqs:  # then the queue, highest first
            r = int(H[1])
            hit = _hits(r, prompt, offsets, units, cached, unit_tokens)
            start = hit * unit_tokens
            total = prompt[r] + generated[r]
            take = min(total - start, left)
            need = -(-take // block_tokens)
            whole = -(-(total - start) // block_tokens) if whole_prompt else need
            revived = 0
            for j in range(hit):
                revived += refs[units[offsets[r] + j]] == 0
            if whole > free + (evictable - revived) * unit_blocks:
                break
            nh = heap_pop(H, nh)
            for j in range(hit):
                u = units[offsets[r] + j]
                if refs[u] == 0:
                    stamp[u] = -1.0
                    evictable -= 1
                refs[u] += 1
            while need > free and evictable > 0:
                ne, gone = _evict(E, ne, refs, cached, stamp, n_units)
                evictable = evictable - 1 if gone else 0
                free += gone * unit_blocks
            free -= need
            private[r], pinned[r], computed[r], status[r] = need, hit, start, RUNNING
            hit_tokens += start
            j = nr
            while j > 0 and (
                score[running[j - 1]] < score[r] or (score[running[j - 1]] == score[r] and running[j - 1] > r)
            ):
                running[j] = running[j - 1]
                j -= 1
            running[j] = r
            nr += 1
            ids[rows], starts[rows], tokens[rows] = r, start, take
            rows += 1
            left -= take
        preemptions += lost
        if logged + rows + lost <= log.shape[0]:
            for k in range(rows):
                log[logged + k, 0], log[logged + k, 1] = iterations, ids[k]
                log[logged + k, 2], log[logged + k, 3] = starts[k], tokens[k]
            for k in range(lost):
                log[logged + rows + k, 0], log[logged + rows + k, 1] = iterations, victims[k]
                log[logged + rows + k, 2], log[logged + rows + k, 3] = -1, 0
        logged += rows + lost
        if rows == 0:
            if lost > 0:  # a sequence that preempted itself: plan the iteration again, with room to admit
                continue
            stuck = 1
            break
        peak = max(peak, kv_blocks - free - evictable * unit_blocks)
        ms = price(
            starts, tokens, rows, linear, head, prefill, decode, layers, width, weights_ms, key_ms, chunk_ms
        )
        now += ms / 1e3
        for k in range(rows):  # commit: computed blocks enter the cache; a pass's last token emits one
            r = ids[k]
            computed[r] += tokens[k]
            upto = (
                min(offsets[r + 1] - offsets[r], min(computed[r], prompt[r]) // unit_tokens)
                if unit_tokens
                else 0
            )
            while pinned[r] < upto:
                u = units[offsets[r] + pinned[r]]
                if cached[u]:  # computed alongside another: share theirs, free this copy
                    if refs[u] == 0:
                        stamp[u] = -1.0
                        evictable -= 1
                    free += unit_blocks
                else:
                    cached[u] = True
                refs[u] += 1
                private[r] -= unit_blocks
                pinned[r] += 1
            if computed[r] == prompt[r] + generated[r]:
                generated[r] += 1
                if first[r] != first[r]:
                    first[r] = now
                if generated[r] == output[r]:
                    finish[r] = now
                    status[r] = DONE
                    done += 1
                    ne, freed = _release(
                        r, now, pinned, offsets, units, refs, cached, stamp, E, ne, pushes, n_units
                    )
                    evictable += freed
                    free += private[r]
                    private[r] = 0
        iterations += 1
        nr = _still_running(running, nr, status)
    totals[_ITERATIONS], totals[_END], totals[_PREEMPTIONS] = iterations, now, preemptions
    totals[_RECOMPUTED], totals[_PEAK_BLOCKS], totals[_HIT_TOKENS] = recomputed, peak, hit_tokens
    totals[_UNFINISHED], totals[_STUCK], totals[_LOGGED] = n - done, stuck, logged


_F64, _I64 = types.float64[::1], types.int64[::1]
_RUN_SIGNATURE = types.void(
    FUNCTION_TYPE, _F64, types.float64[:, ::1], _I64, _I64, _I64, _I64, types.int64, _I64, types.float64,
    _F64, _F64, _F64, _F64, _F64, _F64, _F64, _F64, types.int64[:, ::1],
)  # fmt: skip


@functools.cache
def compiled_run() -> Callable[..., None]:
    """The loop compiled once per process for any candidate key (a first-class function argument)."""
    return njit(_RUN_SIGNATURE, cache=True)(_run)


class BatchStuck(RuntimeError):
    """Sequences left that nothing could schedule (one larger than the pool)."""


def run_batch(
    key: Callable[..., float],
    params: np.ndarray,
    features: np.ndarray,
    prompt: np.ndarray,
    output: np.ndarray,
    offsets: np.ndarray,
    units: np.ndarray,
    machine: Machine,
    pricing: Pricing,
    horizon_s: float = np.inf,
    record: bool = False,
) -> Ran:
    """The batch through the mechanism with the key; `features` (a row per sequence, SEQUENCE_FEATURES'
    columns) is copied, since the loop counts preemptions in it. With `record`, every decision is kept
    (rows of DECISION_COLUMNS), for comparing schedulers."""
    n = int(prompt.size)
    if pricing.linear.size <= machine.token_budget or pricing.head.size <= min(machine.max_seqs, n):
        raise ValueError("the pricing tables are smaller than the machine's token budget or batch cap")
    settings = np.array(
        [machine.kv_blocks, machine.block_tokens, machine.token_budget, machine.max_seqs,
         int(machine.admit_whole_prompt), machine.unit_tokens],
        dtype=np.int64,
    )  # fmt: skip
    fixed = (
        CompiledKey(key),
        np.ascontiguousarray(params, dtype=np.float64),
        np.ascontiguousarray(prompt, dtype=np.int64),
        np.ascontiguousarray(output, dtype=np.int64),
        np.ascontiguousarray(offsets, dtype=np.int64),
        np.ascontiguousarray(units, dtype=np.int64),
        int(units.max()) + 1 if units.size else 0,
        settings,
        float(horizon_s),
        pricing.linear,
        pricing.head,
        pricing.prefill,
        pricing.decode,
        pricing.shape(),
    )
    room = 4 * n + 1024 if record else 0
    while True:
        first, finish = np.full(n, np.nan), np.full(n, np.nan)
        totals = np.zeros(_N_TOTALS)
        log = np.zeros((room, len(DECISION_COLUMNS)), dtype=np.int64)
        X = np.array(features, dtype=np.float64, order="C")  # a copy: the loop counts preemptions in it
        compiled_run()(*fixed[:2], X, *fixed[2:], first, finish, totals, log)
        if totals[_STUCK]:
            raise BatchStuck("the batch is stuck: sequences left, none schedulable")
        needed = int(totals[_LOGGED])
        if not record or needed <= room:
            return Ran(
                first, finish, int(totals[_ITERATIONS]), float(totals[_END]), int(totals[_PREEMPTIONS]),
                int(totals[_RECOMPUTED]), int(totals[_PEAK_BLOCKS]), int(totals[_HIT_TOKENS]),
                int(totals[_UNFINISHED]), log[:needed],
            )  # fmt: skip
        room = needed  # the run is deterministic: again, with room for every row
