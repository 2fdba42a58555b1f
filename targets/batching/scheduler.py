"""Iteration-level continuous batching under a paged KV block budget; the policy is one priority key.

Mechanism, as vLLM V1 and Sarathi-Serve schedule:
- every iteration is one forward pass over at most `token_budget` tokens: one token for each decoding
  request and a prefill chunk for the others (chunked prefill: a prompt longer than what is left of the
  budget is split over iterations, each chunk attending to the request's earlier ones);
- a request holds ceil(computed / block_tokens) blocks of a pool of `kv_blocks` for its keys and values;
- every live request is scored with priority(r, p) at the start of each iteration, so time features are
  fresh; the highest is served first (ties in arrival order). A waiting request is scored only when someone
  could be admitted: in a queue no one can join its order changes nothing (tests/targets/batching/
  test_plan_order.py pins these decisions to the rules read literally);
- running requests (holding blocks) are served first. One that needs a block when none is free preempts the
  lowest-priority running request not yet served this iteration (itself, if there is none): its blocks are
  freed and it later recomputes its prompt and its output so far (preemption by recompute);
- then, if no one was preempted in this iteration, waiting requests are admitted in priority order while the
  budget, `max_seqs` and the free blocks allow; the first that does not fit stops admission, so a long prompt
  is not overtaken forever by short ones behind it. A request fits if the blocks of its first chunk are
  free, or, with `admit_whole_prompt` (vLLM V1's default, scheduler_reserve_full_isl), those of its whole
  prompt (and output so far, after a preemption).

With a prefix cache (the serving fleet's instances), a request admitted finds the full blocks of its prompt
the cache holds (`cached_prefix`) and computes from the first one it lacks: a hit skips that prefill. The
blocks it then holds count whole against the pool, shared or not (vLLM counts a shared block once, so a
fleet is priced conservatively where running requests share a prefix). Without one, nothing changes.

The scheduler only decides. An executor prices the iteration (the simulator, with the kernel cost model) or
runs it (the engine, with real kernels) and returns its duration, which advances the clock; scheduling
time is not counted, as in Vidur. `serve` is the loop both share.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit, types
from numba.core.types import WrapperAddressProtocol
from numba.experimental.function_type import _get_wrapper_address

from verifiers.compiler import FUNCTION_TYPE, SIGNATURE

from .features import N_COLUMNS, PREFIX_COLUMN
from .trace import Requests

# Per-request state columns.
(_ARRIVAL, _PROMPT, _OUTPUT, _GENERATED, _COMPUTED, _BLOCKS, _PREEMPTIONS, _FIRST, _FINISH, _LAST_RUN,
 _STATUS, _RECOMPUTED) = range(12)  # fmt: skip
_N_STATE = 12
WAITING, RUNNING, DONE = 0.0, 1.0, 2.0


@njit(cache=True, inline="always")
def request_status(S, r):
    """WAITING, RUNNING or DONE: request r's status in a scheduler state."""
    return S[r, _STATUS]


@njit(cache=True, inline="always")
def request_progress(S, r):
    """(prompt tokens, output tokens so far, tokens whose keys and values it holds) of request r."""
    return S[r, _PROMPT], S[r, _GENERATED], S[r, _COMPUTED]


@njit(cache=True, inline="always")
def request_arrival(S, r):
    """When request r arrived."""
    return S[r, _ARRIVAL]


@njit(cache=True, inline="always")
def request_first_token(S, r):
    """When request r emitted its first token (NaN before)."""
    return S[r, _FIRST]


@dataclass(frozen=True)
class Limits:
    """What the machine allows per iteration and in memory; the policy works within them."""

    kv_blocks: int
    block_tokens: int
    token_budget: int
    max_seqs: int = 256
    admit_whole_prompt: bool = False
    """Admit a waiting request only if its whole prompt's blocks are free, not only its first chunk's."""

    def setting(self, slo_s: tuple[float, float]) -> np.ndarray:
        """The planner's `setting` array for these limits and SLOs."""
        machine = (self.kv_blocks, self.token_budget, self.block_tokens, self.max_seqs)
        return np.array([*machine, *slo_s, float(self.admit_whole_prompt)], dtype=np.float64)

    def check(self, requests: Requests) -> None:
        """ValueError unless every request fits the pool alone and a first chunk fits the pool."""
        if min(self.kv_blocks, self.block_tokens, self.token_budget, self.max_seqs) < 1:
            raise ValueError(f"every limit must be at least 1: {self}")
        longest = int((requests.prompt_tokens + requests.output_tokens).max())
        if -(-longest // self.block_tokens) > self.kv_blocks:
            raise ValueError(
                f"a request of {longest} tokens needs more than the pool's {self.kv_blocks} blocks "
                f"of {self.block_tokens} tokens"
            )


@dataclass(frozen=True)
class Batch:
    """One iteration: request `ids[i]` computes `tokens[i]` tokens from position `starts[i]` of its sequence
    (its prompt, then its output); a row of one token is a decode. `preempted` lost their blocks."""

    ids: np.ndarray
    starts: np.ndarray
    tokens: np.ndarray
    preempted: np.ndarray

    @property
    def prefill(self) -> np.ndarray:
        """Rows that are prefill chunks (more than one token)."""
        return self.tokens > 1


Executor = Callable[[Batch], float]
"""Runs or prices one iteration and returns its duration in ms."""


@njit(cache=True)
def _fill_row(X, j, r, now, S, free, queued, batch, ttft_slo, tpot_slo):
    """Write request r's features at `now` into row j (the column order of REQUEST_FEATURES)."""
    generated, computed = S[r, _GENERATED], S[r, _COMPUTED]
    pending = S[r, _PROMPT] + generated - computed
    first = S[r, _FIRST]
    deadline = S[r, _ARRIVAL] + ttft_slo if np.isnan(first) else first + generated * tpot_slo
    X[j, 0] = now
    X[j, 1] = S[r, _ARRIVAL]
    X[j, 2] = now - S[r, _ARRIVAL]
    X[j, 3] = now - S[r, _LAST_RUN]
    X[j, 4] = S[r, _PROMPT]
    X[j, 5] = generated
    X[j, 6] = computed
    X[j, 7] = pending
    X[j, 8] = 1.0 if pending == 1.0 and generated > 0.0 and computed > 0.0 else 0.0
    X[j, 9] = 1.0 if S[r, _STATUS] == RUNNING else 0.0
    X[j, 10] = S[r, _BLOCKS]
    X[j, 11] = S[r, _PREEMPTIONS]
    X[j, 12] = deadline
    X[j, 13] = deadline - now
    X[j, 14] = free
    X[j, 15] = queued
    X[j, 16] = batch
    X[j, 17] = S[r, _OUTPUT] - generated  # the oracle column


_NO_PREFIX = np.zeros(0, dtype=np.int64)
_NO_SLOTS = np.zeros(0, dtype=np.int32)


@njit(cache=True)
def plan(key, P, S, live, now, setting, X, rows_out, preempted):
    """Decide one iteration over the `live` requests (arrived, not done, in arrival order).

    `setting` is (free blocks, token budget, block tokens, max sequences, TTFT SLO, TPOT SLO, 1.0 to admit on
    the whole prompt's blocks). Fills
    rows_out with (id, start, tokens) columns and `preempted`; returns (rows, preemptions, free blocks after).
    """
    return plan_cached(
        key, P, S, live, now, setting, X, rows_out, preempted, _NO_PREFIX, _NO_PREFIX, _NO_SLOTS
    )


@njit(cache=True, inline="always")
def cached_prefix(r, S, offsets, blocks, slots, block_tokens):
    """The leading full prompt blocks of request r that the cache holds (`slots[b] >= 0`), leaving it at
    least one token to compute; 0 without a cache (`offsets` empty)."""
    if offsets.size == 0:
        return 0
    first = offsets[r]
    limit = min(offsets[r + 1] - first, int((S[r, _PROMPT] - 1.0) // block_tokens))
    hit = 0
    while hit < limit and slots[blocks[first + hit]] >= 0:
        hit += 1
    return hit


@njit(cache=True)
def _ranked(key, P, S, live, status, now, setting, X, offsets, blocks, slots):
    """The `live` requests of one status, highest priority first (ties in arrival order), each scored on its
    features at `now`. Requests of the two statuses are never compared: running ones are served before any
    waiting one is admitted, so each order is all a plan reads (and a queue no one can join goes unscored)."""
    free, block_tokens, ttft_slo, tpot_slo = setting[0], setting[2], setting[4], setting[5]
    n = live.size
    batch = 0
    for i in range(n):
        if S[live[i], _STATUS] == RUNNING:
            batch += 1
    ids = np.empty(n, dtype=np.int64)
    scores = np.empty(n)
    k = 0
    for i in range(n):
        r = live[i]
        if S[r, _STATUS] != status:
            continue
        _fill_row(X, i, r, now, S, free, n - batch, batch, ttft_slo, tpot_slo)
        waiting = status == WAITING
        X[i, PREFIX_COLUMN] = cached_prefix(r, S, offsets, blocks, slots, block_tokens) if waiting else 0.0
        ids[k], scores[k] = r, key(X, i, P)
        k += 1
    return ids[:k][np.argsort(-scores[:k], kind="mergesort")]


@njit(cache=True)
def _admission(r, S, budget, admission):
    """(blocks waiting request r holds once admitted, blocks that must be free to admit it, first position
    it computes, tokens it computes) with `budget` tokens left in the iteration; `admission` is the
    instance's (offsets, blocks, slots, block tokens, whether the whole prompt must fit)."""
    offsets, blocks, slots, block_tokens, whole_prompt = admission
    start = cached_prefix(r, S, offsets, blocks, slots, block_tokens) * block_tokens
    take = min(S[r, _PROMPT] + S[r, _GENERATED] - start, float(budget))
    need = int(np.ceil((start + take) / block_tokens))
    whole = int(np.ceil((S[r, _PROMPT] + S[r, _GENERATED]) / block_tokens)) if whole_prompt else need
    return need, whole, start, take


@njit(cache=True)
def _any_fits(S, live, free, budget, admission):
    """Whether some waiting request could be admitted into `free` blocks: if none could, admission takes no
    one whatever the order (it stops at the first that does not fit), so no one need be scored for it."""
    for i in range(live.size):
        r = live[i]
        if S[r, _STATUS] == WAITING and _admission(r, S, budget, admission)[1] <= free:
            return True
    return False


@njit(cache=True)
def plan_cached(key, P, S, live, now, setting, X, rows_out, preempted, offsets, blocks, slots):
    """`plan` over an instance with a prefix cache: request r's prompt is blocks[offsets[r]:offsets[r+1]]
    and `slots[b] >= 0` where the cache holds block b. A waiting request's cached prefix is its feature
    column PREFIX_COLUMN, and admitting it starts its prefill after that prefix."""
    free, budget, block_tokens, max_seqs = int(setting[0]), int(setting[1]), setting[2], int(setting[3])
    whole_prompt = setting[6] != 0.0
    ids, starts, tokens = rows_out[0], rows_out[1], rows_out[2]
    order = _ranked(key, P, S, live, RUNNING, now, setting, X, offsets, blocks, slots)
    n = order.size
    served = np.zeros(n, dtype=np.bool_)  # by position in `order`
    rows, lost = 0, 0
    for i in range(n):  # running requests, highest priority first
        r = order[i]
        if S[r, _STATUS] != RUNNING or budget == 0:
            continue
        computed = S[r, _COMPUTED]
        take = min(S[r, _PROMPT] + S[r, _GENERATED] - computed, float(budget))
        need = int(np.ceil((computed + take) / block_tokens)) - int(S[r, _BLOCKS])
        last = n - 1
        while need > free and S[r, _STATUS] == RUNNING:
            while last > i and (served[last] or S[order[last], _STATUS] != RUNNING):
                last -= 1
            victim = order[last] if last > i else r
            free += int(S[victim, _BLOCKS])
            S[victim, _RECOMPUTED] += S[victim, _COMPUTED]
            S[victim, _BLOCKS] = 0.0
            S[victim, _COMPUTED] = 0.0
            S[victim, _PREEMPTIONS] += 1.0
            S[victim, _STATUS] = WAITING
            preempted[lost] = victim
            lost += 1
        if S[r, _STATUS] != RUNNING:
            continue
        free -= need
        S[r, _BLOCKS] += need
        ids[rows], starts[rows], tokens[rows] = r, int(computed), int(take)
        rows += 1
        budget -= int(take)
        served[i] = True
    running = n
    if lost > 0 or budget == 0 or running >= max_seqs:
        return rows, lost, free
    admission = (offsets, blocks, slots, block_tokens, whole_prompt)
    if not _any_fits(S, live, free, budget, admission):
        return rows, lost, free
    for r in _ranked(key, P, S, live, WAITING, now, setting, X, offsets, blocks, slots):
        if budget == 0 or running >= max_seqs:
            break
        need, whole, start, take = _admission(r, S, budget, admission)
        if whole > free:
            break
        free -= need
        S[r, _BLOCKS] = need
        S[r, _COMPUTED] = start
        S[r, _STATUS] = RUNNING
        ids[rows], starts[rows], tokens[rows] = r, int(start), int(take)
        rows += 1
        budget -= int(take)
        running += 1
    return rows, lost, free


@njit(cache=True)
def commit(S, ids, tokens, rows, end, free):
    """Advance the served requests after the iteration ended at `end`; returns the free blocks after."""
    for i in range(rows):
        r = ids[i]
        S[r, _COMPUTED] += tokens[i]
        S[r, _LAST_RUN] = end
        if S[r, _COMPUTED] == S[r, _PROMPT] + S[r, _GENERATED]:  # the pass reached its last token: it emits
            S[r, _GENERATED] += 1.0
            if np.isnan(S[r, _FIRST]):
                S[r, _FIRST] = end
            if S[r, _GENERATED] == S[r, _OUTPUT]:
                S[r, _FINISH] = end
                S[r, _STATUS] = DONE
                free += int(S[r, _BLOCKS])
                S[r, _BLOCKS] = 0.0
    return free


@njit(cache=True)
def drop_done(S, live, count):
    """Keep, in order and in place, the first `count` of `live` that are not done; returns how many."""
    kept = 0
    for i in range(count):
        if S[live[i], _STATUS] != DONE:
            live[kept] = live[i]
            kept += 1
    return kept


_F64, _I64 = types.float64[::1], types.int64[::1]
_PLAN_SIGNATURE = types.UniTuple(types.int64, 3)(
    FUNCTION_TYPE, _F64, types.float64[:, ::1], _I64, types.float64, _F64, types.float64[:, ::1],
    types.int64[:, ::1], _I64,
)  # fmt: skip


@functools.cache
def compiled_plan() -> Callable[..., tuple[int, int, int]]:
    """The planner compiled once per process for any candidate key (a first-class function argument)."""
    return njit(_PLAN_SIGNATURE, cache=True)(plan.py_func)


class CompiledKey(WrapperAddressProtocol):
    """A compiled key as the planner's function argument, resolved to its address once: numba would
    otherwise look the address up on every call, which costs more than planning an iteration."""

    def __init__(self, key: Callable[..., float]) -> None:
        self.address = _get_wrapper_address(key, SIGNATURE)

    def __wrapper_address__(self) -> int:
        return self.address

    def signature(self) -> types.Signature:
        return SIGNATURE


@dataclass(frozen=True)
class Served:
    """What happened to every request: the per-request state at the end, and the run's counters."""

    state: np.ndarray
    iterations: int
    end_s: float
    unfinished: int

    @property
    def arrival(self) -> np.ndarray:
        return self.state[:, _ARRIVAL]

    @property
    def first_token(self) -> np.ndarray:
        return self.state[:, _FIRST]

    @property
    def finish(self) -> np.ndarray:
        return self.state[:, _FINISH]

    @property
    def prompt(self) -> np.ndarray:
        return self.state[:, _PROMPT]

    @property
    def output(self) -> np.ndarray:
        return self.state[:, _OUTPUT]

    @property
    def preemptions(self) -> np.ndarray:
        return self.state[:, _PREEMPTIONS]

    @property
    def status(self) -> np.ndarray:
        """WAITING, RUNNING or DONE, each request's when the replay stopped."""
        return self.state[:, _STATUS]

    @property
    def recomputed(self) -> np.ndarray:
        return self.state[:, _RECOMPUTED]


def initial_state(requests: Requests) -> np.ndarray:
    """Per-request state before the first iteration: every request waiting, nothing computed."""
    S = np.zeros((requests.n, _N_STATE))
    S[:, _ARRIVAL] = requests.arrival_s
    S[:, _PROMPT] = requests.prompt_tokens
    S[:, _OUTPUT] = requests.output_tokens
    S[:, _LAST_RUN] = requests.arrival_s
    S[:, _FIRST] = np.nan
    S[:, _FINISH] = np.nan
    return S


def unfinished(S: np.ndarray) -> int:
    """Requests not done in a state."""
    return int(np.sum(S[:, _STATUS] != DONE))


def serve(
    requests: Requests,
    limits: Limits,
    key: Callable[..., float],
    params: np.ndarray,
    executor: Executor,
    slo_s: tuple[float, float],
    horizon_s: float = np.inf,
    observe: Callable[[Batch, np.ndarray, int], None] | None = None,
) -> Served:
    """Replay the requests through the scheduler, advancing the clock by the executor's durations.

    Stops when every request is done, or at `horizon_s` (a policy that keeps preempting may never finish);
    requests unfinished then are counted. `observe(batch, state, free)` sees every iteration (for tests).
    """
    limits.check(requests)
    n = requests.n
    S = initial_state(requests)
    planner, scorer = compiled_plan(), CompiledKey(key)
    X = np.zeros((n, N_COLUMNS))
    rows_out = np.zeros((3, limits.token_budget), dtype=np.int64)
    ids, starts, tokens = rows_out
    preempted = np.zeros(n, dtype=np.int64)
    live = np.zeros(0, dtype=np.int64)
    setting = limits.setting(slo_s)
    now, free, arrived, iterations = 0.0, limits.kv_blocks, 0, 0
    while now < horizon_s:
        if arrived < n and requests.arrival_s[arrived] <= now:
            upto = int(np.searchsorted(requests.arrival_s, now, side="right"))
            live = np.concatenate((live, np.arange(arrived, upto)))
            arrived = upto
        if live.size == 0:
            if arrived == n:
                break
            now = float(requests.arrival_s[arrived])
            continue
        setting[0] = free
        rows, lost, free = planner(scorer, params, S, live, now, setting, X, rows_out, preempted)
        batch = Batch(ids[:rows].copy(), starts[:rows].copy(), tokens[:rows].copy(), preempted[:lost].copy())
        if rows == 0:  # a request that preempted itself: plan again, now with room to admit
            if lost == 0:
                raise RuntimeError("the scheduler is stuck: live requests, none schedulable")
            continue
        now += executor(batch) / 1e3
        free = commit(S, batch.ids, batch.tokens, rows, now, free)
        iterations += 1
        if observe is not None:
            observe(batch, S, free)
        live = live[S[live, _STATUS] != DONE]
    return Served(S, iterations, now, unfinished(S))
