"""A lower bound on a batch's makespan: its unavoidable work, each part priced at its cheapest.

An iteration's price is a sum of parts (compiled_scheduler.price): projections and MLP over its tokens,
the head over its rows, decode attention over the keys its decodes read, and prefill attention over its
chunks; an HBM floor can only raise it. So no schedule finishes sooner than the sum, over the whole batch,
of each part's least possible total:
- tokens: every prompt token its cache cannot supply, every prefix block at least once, and every output
  token after the first, priced at the cheapest tokens-per-millisecond any pass size reaches;
- rows: every output token is emitted by a row, priced at the cheapest rows-per-millisecond;
- decode attention: the keys each decode reads are fixed by the sequence's length, whatever the order;
- prefill attention: each prompt in one chunk after the longest prefix another sequence can have cached.
Launch costs and the floor are left out, so the bound is below what any schedule reaches.
"""

from __future__ import annotations

import numpy as np

from targets.batching.compiled_scheduler import Pricing

from .batch import Batch

LARGEST_PASS = 65536
"""Tokens (and rows) up to which the cheapest rate is sought: past any budget an engine runs."""


def lower_bound_s(batch: Batch, pricing: Pricing) -> float:
    """Seconds below which no schedule of the batch finishes on the pricing's machine; `pricing` must
    tabulate passes up to LARGEST_PASS tokens and rows."""
    sizes = np.arange(1, LARGEST_PASS + 1)
    per_token = float(np.min(pricing.linear[1:] / sizes))
    per_row = float(np.min(pricing.head[1:] / sizes))
    hit = _reusable(batch)
    prompt, output = batch.prompt.astype(np.float64), batch.output.astype(np.float64)
    tokens = float(np.sum(prompt - hit) + np.sum(output - 1) + _shared_once(batch, hit))
    keys = float(np.sum((output - 1) * prompt + output * (output - 1) / 2))
    decode = pricing.layers * pricing.width * keys * float(pricing.decode[2])
    chunks = pricing.chunks_ms(prompt - hit, hit)
    ms = tokens * per_token + float(np.sum(output)) * per_row + decode + float(np.sum(chunks))
    return ms / 1e3


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
