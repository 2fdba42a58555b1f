"""A lower bound on a batch's makespan: no schedule finishes sooner, whatever its order, budget and cap.

An iteration's price is a sum of parts (compiled_scheduler.price) that an HBM floor can only raise:
projections and MLP over its tokens, the head over its rows, decode attention over the keys its decodes
read, and prefill attention over its chunks. Over a whole batch:
- work every schedule does: every prompt token its cache cannot supply, every prefix block at least once,
  every output token after the first; a row for every output token; the keys each decode reads (fixed by
  the sequence's length); each prompt's attention in one chunk after the longest prefix another sequence
  can have cached;
- passes every schedule runs: every decoding sequence holds its blocks through the pass, so the passes
  number at least the blocks all decodes hold, over the pool; and at least the tokens over the budget,
  the rows over the cap, and the longest output;
- a pass's tokens and rows cost at least a line below the price table (a + s per token, a >= 0), so N
  passes over T tokens cost at least N·a + s·T: the per-pass cost is charged to the passes counted above.
The budget and the cap a candidate may tune trade against the pool (activations take room from the keys
and values), so the bound is the least over cells of a (budget, cap) grid, each cell taking its largest
budget, cap and pool together. Decode attention's launches and partial passes are left out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from targets.batching.compiled_scheduler import Pricing

from .batch import Batch

LARGEST_PASS = 65536
"""Tokens (and rows) up to which a candidate may set the budget and the cap."""
STEPS_PER_OCTAVE = 8
"""The (budget, cap) grid's resolution: a finer one tightens the bound a little and costs more cells."""


@dataclass(frozen=True)
class Engine:
    """What a schedule may choose and what the choice leaves it: KV blocks of `block_tokens` tokens that
    fit beside a token budget and a batch cap (`pool`, non-increasing in both), up to the largest of each."""

    block_tokens: int
    pool: Callable[[int, int], int]
    largest_budget: int = LARGEST_PASS
    largest_cap: int = LARGEST_PASS


def lower_bound_s(batch: Batch, pricing: Pricing, engine: Engine) -> float:
    """Seconds below which no schedule of the batch finishes on the pricing's machine; `pricing` must
    tabulate passes up to the engine's largest budget and cap."""
    hit = _reusable(batch)
    prompt, output = batch.prompt.astype(np.float64), batch.output.astype(np.float64)
    tokens = float(np.sum(prompt - hit) + np.sum(output - 1) + _shared_once(batch, hit))
    rows = float(np.sum(output))
    keys = float(np.sum((output - 1) * prompt + output * (output - 1) / 2))
    fixed = pricing.layers * pricing.width * keys * float(pricing.decode[2])
    fixed += float(np.sum(pricing.chunks_ms(prompt - hit, hit)))
    held = _held_blocks(batch, hit, engine.block_tokens)
    longest = -(-int((batch.prompt + batch.output).max()) // engine.block_tokens)
    budgets = _grid(engine.largest_budget)
    caps = _grid(min(engine.largest_cap, batch.n))
    token_lines = [_lines(pricing.linear, int(b)) for b in budgets[1:]]
    row_lines = [_lines(pricing.head, int(c)) for c in caps[1:]]
    weights_ms, key_ms = pricing.floor
    best = np.inf
    for i, budget in enumerate(budgets[1:]):
        for j, cap in enumerate(caps[1:]):
            blocks = engine.pool(int(budgets[i]), int(caps[j]))  # the most any setting in the cell has
            if blocks < longest:
                continue  # the longest sequence fits no setting in the cell: none runs the batch
            passes = max(-(-held // blocks), np.ceil(tokens / budget), np.ceil(rows / cap), output.max())
            ms = _least(token_lines[i], passes, tokens) + _least(row_lines[j], passes, rows) + fixed
            ms = max(ms, weights_ms * passes + key_ms * (keys + np.sum(prompt - hit)))
            best = min(best, ms)
    return float(best) / 1e3


def _grid(largest: int) -> np.ndarray:
    """Whole numbers from 1 to `largest`, STEPS_PER_OCTAVE to an octave: consecutive ones bound a cell."""
    octaves = np.log2(max(largest, 1))
    steps = np.arange(int(np.ceil(octaves * STEPS_PER_OCTAVE)) + 1) / STEPS_PER_OCTAVE
    return np.unique(np.minimum(np.round(2.0**steps), largest).astype(np.int64))


def _lines(table: np.ndarray, most: int) -> list[tuple[float, float]]:
    """Lines a + s·x below the table on 1..most with a >= 0: its chord there (below it where the table is
    concave, lowered where not) and the cheapest rate through zero."""
    x = np.arange(1, most + 1, dtype=np.float64)
    y = table[1 : most + 1]
    slopes = [float(np.min(y / x))]
    if most > 1:
        slopes.append(float((y[-1] - y[0]) / (most - 1)))
    lines = [(float(np.min(y - s * x)), s) for s in slopes]
    return [(a, s) for a, s in lines if a >= 0 and s >= 0]


def _least(lines: list[tuple[float, float]], passes: float, total: float) -> float:
    """The least milliseconds of `passes` passes over `total` tokens or rows, by the best of the lines."""
    return max(a * passes + s * total for a, s in lines)


def _held_blocks(batch: Batch, hit: np.ndarray, block_tokens: int) -> float:
    """Blocks the decodes hold, summed over every decode: decoding from position q keeps q + 1 tokens'
    blocks, less the prefix another sequence may share with it (counted as free)."""
    prompt, output = batch.prompt, batch.output
    shared = (hit // block_tokens).astype(np.int64)
    held = _ceil_sum(prompt + output - 1, block_tokens) - _ceil_sum(prompt, block_tokens)
    return float(np.sum(held - (output - 1) * shared))


def _ceil_sum(n: np.ndarray, b: int) -> np.ndarray:
    """The sum over x in 1..n of ceil(x / b), for each n."""
    k, r = n // b, n % b
    return b * k * (k + 1) // 2 + r * (k + 1)


def _reusable(batch: Batch) -> np.ndarray:
    """Each sequence's prompt tokens some other sequence may have cached for it: its leading prefix blocks
    shared with another sequence, leaving at least one token to compute."""
    if not batch.units.size:
        return np.zeros(batch.n)
    shared = batch.shared_tokens()
    most = (batch.prompt - 1) // batch.unit_tokens * batch.unit_tokens
    return np.minimum(shared, most).astype(np.float64)


def _shared_once(batch: Batch, hit: np.ndarray) -> float:
    """Tokens of the prefix blocks some sequence skips, each of which one sequence must compute."""
    if not batch.units.size:
        return 0.0
    blocks = (hit // batch.unit_tokens).astype(np.int64)
    first = batch.offsets[:-1]
    spans = [batch.units[s : s + b] for s, b in zip(first, blocks, strict=True) if b]
    distinct = np.unique(np.concatenate(spans)).size if spans else 0
    return float(distinct * batch.unit_tokens)
