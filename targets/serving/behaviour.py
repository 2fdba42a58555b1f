"""The serving target's behaviour sample: decisions of each of its three functions, drawn in the states the
fleet meets them in.

The fleet acts on orders alone: the router sends a request to the instance that scores highest, each
scheduler serves its requests in their order, each cache evicts its lowest-scored block first. Two programs
that order every decision of the sample alike (ties kept) are one program to it. A mutation the fleet
cannot see (a guard on a feature every instance shares, adding the same constant to each) is caught here,
before it is tuned and replayed, and the proposer is steered elsewhere.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np

from targets.batching.behaviour import behaviour_sample as schedule_sample

DECISIONS = 24
"""Decisions per function: enough that keys which agree on a few orders but not on all are told apart."""
INSTANCES = 8
"""Instances a request is routed among: the target's default fleet."""
BLOCKS = 16
"""Evictable blocks per eviction decision."""
BLOCK_TOKENS = 512
"""The Mooncake trace's prefix blocks, which the fleet's caches hold."""
MOST_PROMPT = 131072
"""The longest prompt drawn, in tokens: the Mooncake conversation trace's reach about that."""
POOL = 880
"""KV blocks of 512 tokens per instance: about what h100-llama3-8b holds beside its weights."""
PREFILL_S_PER_TOKEN = 1.0 / 15000.0
"""The price of a prefill token in the mechanism's TTFT estimate, on the scale of an H100 with Llama-3-8B."""

Decisions = tuple[tuple[Mapping[str, float], ...], ...]


@functools.cache
def route_sample() -> Decisions:
    """Seeded arrivals (the same in every process): a request of any size against a fleet of instances in
    mixed states, every relation of ROUTE_FEATURES kept."""
    rng = np.random.default_rng(29)
    return tuple(_arrival(rng) for _ in range(DECISIONS))


def _arrival(rng: np.random.Generator) -> tuple[Mapping[str, float], ...]:
    blocks = int(np.exp(rng.uniform(0.0, np.log(MOST_PROMPT / BLOCK_TOKENS))))
    prompt = float(max(1, blocks * BLOCK_TOKENS - int(rng.integers(0, BLOCK_TOKENS))))
    rows = [_instance(rng, i, prompt, blocks) for i in range(INSTANCES)]
    fleet = {
        "best_match": max(r["match"] for r in rows),
        "best_routed_match": max(r["routed_match"] for r in rows),
        "min_outstanding": min(r["outstanding"] for r in rows),
        "max_outstanding": max(r["outstanding"] for r in rows),
        "min_queued": min(r["queued"] for r in rows),
        "max_queued": max(r["queued"] for r in rows),
    }
    return tuple({**r, **fleet} for r in rows)


def _instance(rng: np.random.Generator, i: int, prompt: float, blocks: int) -> dict[str, float]:
    """One instance's state as a request of `prompt` tokens (`blocks` blocks) arrives."""
    running = int(rng.integers(0, 48))
    queued = int(rng.integers(0, 12)) if rng.random() < 0.5 else 0
    active = int(rng.integers(0, POOL + 1))
    cached = int(rng.integers(0, blocks + 1)) if rng.random() < 0.5 else 0
    routed = cached if rng.random() < 0.7 else int(rng.integers(0, blocks + 1))
    uncached = max(prompt - cached * BLOCK_TOKENS, 0.0)
    queued_prefill = float(queued * rng.integers(0, 16000) + rng.integers(0, 4000) * (running > 0))
    return {
        "prompt_tokens": prompt,
        "prompt_blocks": float(blocks),
        "cached_blocks": float(cached),
        "uncached_tokens": uncached,
        "match": cached / blocks,
        "instance": float(i),
        "outstanding": float(running + queued),
        "running": float(running),
        "queued": float(queued),
        "queued_prefill_tokens": queued_prefill,
        "decode_batch": float(rng.integers(0, running + 1)),
        "active_blocks": float(active),
        "free_blocks": float(POOL - active),
        "kv_used": active / POOL,
        "tree_blocks": float(rng.integers(0, 20000)),
        "hit_rate": float(rng.uniform(0.0, 1.0)),
        "ttft_estimate_s": (queued_prefill + uncached) * PREFILL_S_PER_TOKEN,
        "routed_blocks": float(routed),
        "routed_match": routed / blocks,
    }


@functools.cache
def priority_sample() -> Decisions:
    """The batching scheduler's sample at the trace's scale, each waiting request with a cached prefix of
    its prompt on the instance (0 once it runs, as the fleet gives it)."""
    rng = np.random.default_rng(31)
    decisions = []
    for decision in schedule_sample(MOST_PROMPT, BLOCK_TOKENS):
        rows = []
        for row in decision:
            whole = int(row["prompt"] // BLOCK_TOKENS)
            cached = 0 if row["running"] or rng.random() < 0.5 else int(rng.integers(0, whole + 1))
            rows.append({**row, "cached_prefix": float(cached)})
        decisions.append(tuple(rows))
    return tuple(decisions)


@functools.cache
def evict_sample() -> Decisions:
    """Seeded moments, each the evictable blocks of one cache: inserted and last used at any time before,
    hit or never, shallow or deep in their prefix."""
    rng = np.random.default_rng(37)
    decisions = []
    for _ in range(DECISIONS):
        now = float(rng.uniform(10.0, 3600.0))
        rows = []
        for _ in range(BLOCKS):
            inserted = now - float(np.exp(rng.uniform(np.log(0.1), np.log(now))))
            hits = 0 if rng.random() < 0.5 else int(np.exp(rng.uniform(0.0, np.log(64.0))))
            rows.append(
                {
                    "last_access": inserted + (now - inserted) * float(rng.uniform(0.0, 1.0)) * (hits > 0),
                    "inserted": inserted,
                    "hits": float(hits),
                    "depth": float(int(np.exp(rng.uniform(0.0, np.log(MOST_PROMPT / BLOCK_TOKENS))))),
                }
            )
        decisions.append(tuple(rows))
    return tuple(decisions)
