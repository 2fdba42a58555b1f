"""The simulator's scheduling loop compiled whole: scheduler.serve with the priced executor, in numba.

scheduler.serve calls its executor from Python once per iteration, which costs far more than planning the
iteration; the simulator's executor is arithmetic on the cost model's coefficients, so here the loop, the
planner, the pricing and the bookkeeping run in one compiled call. The decisions are scheduler.serve's
(the same planner and commit), and an iteration's price is PricedExecutor's to the last bit (the same
operations in the same order, numpy's pairwise sum included): tests/targets/batching checks both. The
engine, which runs real kernels per iteration, keeps scheduler.serve and its Executor protocol.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit, types

from targets.costmodel.model import PREFILL_TILE, CostModel
from verifiers.compiler import FUNCTION_TYPE

from .features import N_COLUMNS
from .scheduler import (
    CompiledKey,
    Limits,
    Served,
    commit,
    drop_done,
    initial_state,
    plan,
    request_arrival,
    request_first_token,
    unfinished,
)
from .trace import Requests

DECISION_COLUMNS = ("iteration", "request", "start", "tokens")
"""A decision log row: request `request` computes `tokens` tokens from `start` in iteration `iteration`;
a row with start -1 and tokens 0 says it was preempted there (after the iteration's rows)."""


@dataclass(frozen=True)
class Pricing:
    """A cost model as the arrays the compiled loop reads (what PricedExecutor computes, in one place)."""

    linear: np.ndarray  # ms of a pass's work per token (CostModel.linear_ms), for 0..max_tokens tokens
    head: np.ndarray  # ms per pass and per sequence (CostModel.head_ms), for 0..max_sequences rows
    prefill: np.ndarray  # attn_prefill's coefficients in a pass (launch, tiles, macs, kv_read, kv_written)
    decode: np.ndarray  # attn_decode's coefficients inside a pass (launch, sequences, kv_elements)
    layers: float
    width: float  # heads x head_dim
    floor: tuple[float, float] = (0.0, 0.0)  # CostModel.streaming: no iteration beats its bytes at HBM speed

    @classmethod
    def of(cls, model: CostModel, max_tokens: int, max_sequences: int) -> Pricing:
        return cls(
            linear=model.linear_ms(np.arange(max_tokens + 1)),
            head=model.head_ms(np.arange(max_sequences + 1)),
            prefill=np.array(model.in_pass("attn_prefill").coef, dtype=np.float64),
            decode=np.array(model.in_pass("attn_decode").coef, dtype=np.float64),
            layers=float(model.model.layers),
            width=float(model.model.heads) * float(model.model.head_dim),
            floor=model.streaming,
        )

    def iteration_ms(self, starts: np.ndarray, tokens: np.ndarray) -> float:
        """One iteration's milliseconds: rows computing `tokens[i]` tokens from position `starts[i]`."""
        starts, tokens = np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(tokens, np.int64)
        args = (self.linear, self.head, self.prefill, self.decode, self.layers, self.width, *self.floor)
        return float(price(starts, tokens, tokens.size, *args, np.zeros(tokens.size)))

    def chunks_ms(self, tokens: np.ndarray, cached: np.ndarray) -> np.ndarray:
        """Each prefill chunk's attention, ms over all layers: `tokens[i]` queries after `cached[i]` keys."""
        q, ctx = np.asarray(tokens, dtype=np.float64), np.asarray(cached, dtype=np.float64)
        return self.layers * _attn_prefill(self.prefill, self.width, q, ctx)

    def shape(self) -> np.ndarray:
        """The scalars the compiled loop reads: layers, query width, and the floor's two coefficients."""
        return np.array([self.layers, self.width, *self.floor])


@njit(cache=True)
def _block_sum(a, start, n):
    """numpy's sum of at most 128 float64s: in order below eight, else eight accumulators, then the rest."""
    if n < 8:
        total = 0.0
        for i in range(start, start + n):
            total += a[i]
        return total
    r = a[start : start + 8].copy()
    i = 8
    while i < n - n % 8:
        for j in range(8):
            r[j] += a[start + i + j]
        i += 8
    total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    while i < n:
        total += a[start + i]
        i += 1
    return total


@njit(cache=True)
def _pairwise_sum(a, n):
    """numpy's sum of a[:n] (pairwise over halves cut at multiples of eight), so a price matches it bit for
    bit. The halving runs on an explicit stack: numba's cache cannot hold a recursive function safely."""
    if n <= 128:
        return _block_sum(a, 0, n)
    starts, sizes, phases = np.zeros(64, np.int64), np.zeros(64, np.int64), np.zeros(64, np.int64)
    values = np.zeros(64)
    top, filled = 0, 0
    sizes[0] = n
    while top >= 0:
        start, size = starts[top], sizes[top]
        half = size // 2
        half -= half % 8
        if size <= 128:
            values[filled] = _block_sum(a, start, size)
            filled += 1
            top -= 1
        elif phases[top] == 0:  # the left half first
            phases[top] = 1
            top += 1
            starts[top], sizes[top], phases[top] = start, half, 0
        elif phases[top] == 1:  # then the right half
            phases[top] = 2
            top += 1
            starts[top], sizes[top], phases[top] = start + half, size - half, 0
        else:  # both done: their sum replaces them
            filled -= 1
            values[filled - 1] += values[filled]
            top -= 1
    return values[0]


@njit(cache=True)
def _attn_prefill(coef, width, q, ctx):
    """One chunk's attention in one layer: the cost model's attn_prefill terms times their coefficients."""
    tiles = np.ceil(q / PREFILL_TILE)
    last = q - (tiles - 1.0) * PREFILL_TILE
    seen = (tiles - 1.0) * PREFILL_TILE * ctx + PREFILL_TILE**2 * (tiles - 1.0) * tiles / 2 + last * (ctx + q)
    return (((coef[0] + tiles * coef[1]) + width * seen * coef[2]) + width * (ctx + q) * coef[3]) + (
        width * q * coef[4]
    )


@njit(cache=True)
def price(starts, tokens, rows, linear, head, prefill, decode, layers, width, weights_ms, key_ms, chunk_ms):
    """An iteration's milliseconds, as PricedExecutor prices it (rows of one token are decodes)."""
    total, decodes, contexts, chunks, read = 0, 0, 0, 0, 0
    for i in range(rows):
        total += tokens[i]
        read += starts[i] + tokens[i]
        if tokens[i] > 1:
            chunk_ms[chunks] = layers * _attn_prefill(prefill, width, float(tokens[i]), float(starts[i]))
            chunks += 1
        else:
            decodes += 1
            contexts += starts[i]
    ms = linear[total] + head[rows]
    if decodes > 0:
        keys = float(contexts) + decodes
        ms += layers * ((decode[0] + decodes * decode[1]) + width * keys * decode[2])
    if chunks > 0:
        ms += _pairwise_sum(chunk_ms, chunks)
    if weights_ms > 0:
        ms = max(ms, weights_ms + key_ms * float(read))
    return ms


@njit(cache=True)
def _record(log, logged, iteration, rows_out, rows, preempted, lost):
    """Append an iteration's decisions to `log` while it has room; returns the rows it needs in all."""
    if logged + rows + lost <= log.shape[0]:
        for i in range(rows):
            log[logged + i, 0] = iteration
            log[logged + i, 1] = rows_out[0, i]
            log[logged + i, 2] = rows_out[1, i]
            log[logged + i, 3] = rows_out[2, i]
        for i in range(lost):
            log[logged + rows + i, 0] = iteration
            log[logged + rows + i, 1] = preempted[i]
            log[logged + rows + i, 2] = -1
            log[logged + rows + i, 3] = 0
    return logged + rows + lost


def _serve(key, P, S, arrival, setting, horizon, linear, head, prefill, decode, shape, log, late_limit):
    """scheduler.serve's loop with the priced executor; returns (iterations, end time, decision rows). With
    `late_limit` at 0 or more it stops once more requests than that are past their TTFT SLO unserved or
    were served after it: whatever follows, they miss it (a capacity sweep needs no more of a load)."""
    n = arrival.size
    budget = int(setting[1])
    X = np.zeros((n, N_COLUMNS))
    rows_out = np.zeros((3, budget), dtype=np.int64)
    preempted = np.zeros(n, dtype=np.int64)
    live = np.zeros(n, dtype=np.int64)
    chunk_ms = np.zeros(budget)
    layers, width, weights_ms, key_ms = shape[0], shape[1], shape[2], shape[3]
    now, free = 0.0, int(setting[0])
    count, arrived, iterations, logged = 0, 0, 0, 0
    while now < horizon:
        if arrived < n and arrival[arrived] <= now:
            upto = np.searchsorted(arrival, now, side="right")
            for r in range(arrived, upto):
                live[count] = r
                count += 1
            arrived = upto
        if count == 0:
            if arrived == n:
                break
            now = arrival[arrived]
            continue
        setting[0] = free
        rows, lost, free = plan(key, P, S, live[:count], now, setting, X, rows_out, preempted)
        if rows == 0:  # a request that preempted itself: plan again, now with room to admit
            if lost == 0:
                raise RuntimeError("the scheduler is stuck: live requests, none schedulable")
            continue
        logged = _record(log, logged, iterations, rows_out, rows, preempted, lost)
        ms = price(
            rows_out[1], rows_out[2], rows, linear, head, prefill, decode, layers, width, weights_ms, key_ms,
            chunk_ms,
        )  # fmt: skip
        now += ms / 1e3
        free = commit(S, rows_out[0], rows_out[2], rows, now, free)
        iterations += 1
        count = drop_done(S, live, count)
        counting = late_limit >= 0 and iterations % LATE_EVERY == 0
        if counting and _late(S, arrived, now, setting[4]) > late_limit:
            break
    return iterations, now, logged


LATE_EVERY = 256
"""Iterations between counts of late requests: a count reads every request arrived, a plan only the live."""


@njit(cache=True)
def _late(S, arrived, now, ttft_slo):
    """How many of the first `arrived` requests miss the TTFT SLO whatever the scheduler does next."""
    late = 0
    for r in range(arrived):
        first = request_first_token(S, r)
        waited = (now if np.isnan(first) else first) - request_arrival(S, r)  # a first token comes after now
        late += waited > ttft_slo
    return late


_F64, _I64 = types.float64[::1], types.int64[::1]
_SERVE_SIGNATURE = types.Tuple((types.int64, types.float64, types.int64))(
    FUNCTION_TYPE, _F64, types.float64[:, ::1], _F64, _F64, types.float64, _F64, _F64, _F64, _F64, _F64,
    types.int64[:, ::1], types.int64,
)  # fmt: skip


@functools.cache
def compiled_serve() -> Callable[..., tuple[int, float, int]]:
    """The loop compiled once per process for any candidate key (a first-class function argument)."""
    return njit(_SERVE_SIGNATURE, cache=True)(_serve)


def serve_priced(
    requests: Requests,
    limits: Limits,
    key: Callable[..., float],
    params: np.ndarray,
    pricing: Pricing,
    slo_s: tuple[float, float],
    horizon_s: float = np.inf,
    late_limit: int = -1,
) -> Served:
    """scheduler.serve with PricedExecutor's prices, in one compiled call; with `late_limit` at 0 or more,
    stopped once more requests than that miss the TTFT SLO whatever comes next (the rest left unfinished)."""
    return _replay(requests, limits, key, params, pricing, slo_s, horizon_s, 0, late_limit)[0]


def serve_priced_recorded(
    requests: Requests,
    limits: Limits,
    key: Callable[..., float],
    params: np.ndarray,
    pricing: Pricing,
    slo_s: tuple[float, float],
    horizon_s: float = np.inf,
) -> tuple[Served, np.ndarray]:
    """serve_priced, and every decision it took (rows of DECISION_COLUMNS), for comparing schedulers."""
    capacity = 4 * requests.n + 1024
    while True:
        served, log, needed = _replay(requests, limits, key, params, pricing, slo_s, horizon_s, capacity, -1)
        if needed <= capacity:
            return served, log[:needed]
        capacity = needed  # the replay is deterministic: run it again with room for every row


def _replay(
    requests: Requests,
    limits: Limits,
    key: Callable[..., float],
    params: np.ndarray,
    pricing: Pricing,
    slo_s: tuple[float, float],
    horizon_s: float,
    capacity: int,
    late_limit: int,
) -> tuple[Served, np.ndarray, int]:
    limits.check(requests)
    if pricing.linear.size <= limits.token_budget or pricing.head.size <= min(limits.max_seqs, requests.n):
        raise ValueError("the pricing tables are smaller than the limits' token budget or sequences")
    S = initial_state(requests)
    setting = limits.setting(slo_s)
    shape = pricing.shape()
    log = np.zeros((capacity, len(DECISION_COLUMNS)), dtype=np.int64)
    iterations, end, needed = compiled_serve()(
        CompiledKey(key),
        np.ascontiguousarray(params, dtype=np.float64),
        S,
        np.ascontiguousarray(requests.arrival_s, dtype=np.float64),
        setting,
        float(horizon_s),
        pricing.linear,
        pricing.head,
        pricing.prefill,
        pricing.decode,
        shape,
        log,
        late_limit,
    )
    return Served(S, int(iterations), float(end), unfinished(S)), log, int(needed)
