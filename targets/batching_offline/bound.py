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
    # cell (i, j): budgets up to budgets[i + 1] and caps up to caps[j + 1], with the pool of its low corner
    pools = np.array([[engine.pool(int(b), int(c)) for c in caps[:-1]] for b in budgets[:-1]], np.float64)
    passes = np.maximum.reduce([
        np.ceil(held / np.maximum(pools, 1.0)),
        np.broadcast_to(np.ceil(tokens / budgets[1:, None]), pools.shape),
        np.broadcast_to(np.ceil(rows / caps[None, 1:]), pools.shape),
        np.full(pools.shape, float(output.max())),
    ])  # fmt: skip
    token_a, token_s = _lines(pricing.linear, budgets[1:])
    row_a, row_s = _lines(pricing.head, caps[1:])
    ms = np.max(token_a[:, None, :] * passes[:, :, None] + token_s[:, None, :] * tokens, axis=2)
    ms += np.max(row_a[None, :, :] * passes[:, :, None] + row_s[None, :, :] * rows, axis=2) + fixed
    weights_ms, key_ms = pricing.floor
    ms = np.maximum(ms, weights_ms * passes + key_ms * (keys + float(np.sum(prompt - hit))))
    ms[pools < longest] = np.inf  # the longest sequence fits no setting of the cell: none runs the batch
    return float(ms.min()) / 1e3


def _grid(largest: int) -> np.ndarray:
    """Whole numbers from 1 to `largest`, STEPS_PER_OCTAVE to an octave: consecutive ones bound a cell."""
    octaves = np.log2(max(largest, 1))
    steps = np.arange(int(np.ceil(octaves * STEPS_PER_OCTAVE)) + 1) / STEPS_PER_OCTAVE
    return np.unique(np.minimum(np.round(2.0**steps), largest).astype(np.int64))


def _lines(table: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each size m, two lines a + s·x below the price table on 1..m with a >= 0 (rows of a and of s):
    its chord there (lowered where the table is not concave) and the cheapest rate through zero. A line
    that would need a < 0 is (0, 0), which bounds nothing."""
    a, s = np.zeros((sizes.size, 2)), np.zeros((sizes.size, 2))
    for i, m in enumerate(sizes.tolist()):
        x = np.arange(1, m + 1, dtype=np.float64)
        y = table[1 : m + 1]
        for k, slope in enumerate((float(np.min(y / x)), float((y[-1] - y[0]) / max(m - 1, 1)))):
            intercept = float(np.min(y - slope * x))
            if intercept >= 0 and slope >= 0:
                a[i, k], s[i, k] = intercept, slope
    return a, s


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
