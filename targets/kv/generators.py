"""Seeded generators of multi-turn chat and agentic tool-loop traces, the shapes Mooncake's traces lack."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import count

import numpy as np

from targets.kv.trace import Trace, build_trace


@dataclass(frozen=True)
class _Context:
    """A token sequence as prefix-hash block ids; equal prefixes share ids because contexts are extended."""

    ids: tuple[int, ...]
    tokens: int


_EMPTY = _Context((), 0)


def _extend(ctx: _Context, tokens: int, block_size: int, fresh: Iterator[int]) -> _Context:
    """Append tokens: full blocks keep their ids; a partial last block's content changes, so it is new."""
    keep = ctx.tokens // block_size
    total = ctx.tokens + tokens
    new = -(-total // block_size) - keep
    return _Context(ctx.ids[:keep] + tuple(next(fresh) for _ in range(new)), total)


def _record(t_s: float, ctx: _Context, output_tokens: int) -> dict[str, object]:
    """One request in the Mooncake JSONL shape, with integer ms timestamps as in the real traces."""
    return {
        "timestamp": round(t_s * 1000.0),
        "input_length": ctx.tokens,
        "output_length": output_tokens,
        "hash_ids": list(ctx.ids),
    }


def _lognormal(rng: np.random.Generator, median: float, sigma: float, low: float, high: float) -> float:
    """A right-skewed duration, clipped to a plausible range."""
    return float(np.clip(median * np.exp(sigma * rng.standard_normal()), low, high))


def _tokens(rng: np.random.Generator, median: float, sigma: float, low: int, high: int) -> int:
    """A right-skewed token count, clipped to a plausible range."""
    return round(_lognormal(rng, median, sigma, low, high))


def _zipf_choice(rng: np.random.Generator, n: int, s: float) -> int:
    """Index k with probability proportional to 1 / (k + 1)^s: a few popular items and a long tail."""
    weights = 1.0 / np.arange(1, n + 1) ** s
    return int(rng.choice(n, p=weights / weights.sum()))


def _build(records: list[dict[str, object]], name: str, block_size: int) -> Trace:
    """Build with the loader's builder, so generated and loaded traces pass the same checks."""
    return build_trace(enumerate(records, 1), source=name, block_size=block_size, name=name)


def multi_turn_chat(
    seed: int,
    n_sessions: int = 900,
    n_system_prompts: int = 5,
    prompt_zipf: float = 1.2,
    sessions_per_s: float = 0.5,
    mean_turns: float = 2.0,
    median_gap_s: float = 30.0,
    gap_sigma: float = 1.6,
    document_prob: float = 0.6,
    block_size: int = 512,
) -> Trace:
    """Chat sessions: Zipf-shared system prompts, each turn resends the history, heavy-tailed return gaps.

    A turn's input is the previous input plus the previous answer plus the new user message; with
    probability `document_prob` the message carries a pasted document or retrieved web results (2k-16k
    tokens), which is what makes real chat contexts long.
    """
    rng = np.random.default_rng(seed)
    fresh = count()
    prompts = [
        _extend(_EMPTY, int(rng.integers(1000, 4001)), block_size, fresh) for _ in range(n_system_prompts)
    ]
    starts = np.cumsum(rng.exponential(1.0 / sessions_per_s, n_sessions))
    records = []
    for start in starts.tolist():
        ctx = prompts[_zipf_choice(rng, n_system_prompts, prompt_zipf)]
        t, answer = start, 0
        for _ in range(int(rng.geometric(1.0 / mean_turns))):
            message = _tokens(rng, 300, 1.0, 50, 2000)
            if rng.random() < document_prob:
                message += _tokens(rng, 5000, 0.7, 2000, 16000)
            ctx = _extend(ctx, answer + message, block_size, fresh)
            answer = _tokens(rng, 250, 0.8, 50, 1000)
            records.append(_record(t, ctx, answer))
            t += _lognormal(rng, median_gap_s, gap_sigma, 2.0, 3600.0)
    return _build(records, f"chat-seed{seed}", block_size)


def agentic_tool_loops(
    seed: int,
    n_tasks: int = 190,
    n_templates: int = 4,
    template_zipf: float = 1.0,
    tasks_per_s: float = 0.1,
    mean_steps: float = 10.0,
    max_steps: int = 30,
    median_step_s: float = 3.0,
    branch_prob: float = 0.1,
    block_size: int = 512,
) -> Trace:
    """Agent tasks: long shared tool-definition prefixes, many quick steps, retries that fork the prefix tree.

    Each step's input is the previous step's input plus the model's tool call and the tool's output; with
    probability `branch_prob` a step instead retries from an earlier step's input with a new tool call.
    """
    rng = np.random.default_rng(seed)
    fresh = count()
    templates = [
        _extend(_EMPTY, int(rng.integers(6000, 12001)), block_size, fresh) for _ in range(n_templates)
    ]
    starts = np.cumsum(rng.exponential(1.0 / tasks_per_s, n_tasks))
    records = []
    for start in starts.tolist():
        template = templates[_zipf_choice(rng, n_templates, template_zipf)]
        ctx = _extend(template, _tokens(rng, 400, 0.8, 50, 4000), block_size, fresh)
        inputs: list[_Context] = []
        t = start
        for step in range(min(int(rng.geometric(1.0 / mean_steps)), max_steps)):
            call = _tokens(rng, 120, 0.7, 20, 1000)
            records.append(_record(t, ctx, call))
            inputs.append(ctx)
            if step and rng.random() < branch_prob:  # retry an earlier step with a different tool call
                ctx = inputs[int(rng.integers(step))]
                call = _tokens(rng, 120, 0.7, 20, 1000)
            ctx = _extend(ctx, call + _tokens(rng, 600, 1.2, 20, 16000), block_size, fresh)
            t += _lognormal(rng, median_step_s, 0.7, 0.5, 120)
    return _build(records, f"agentic-seed{seed}", block_size)


GENERATORS: dict[str, Callable[..., Trace]] = {"chat": multi_turn_chat, "agentic": agentic_tool_loops}
