"""The batching target's behaviour sample: iterations to plan, each the live requests a policy ranks.

Two priority keys that order every iteration of the sample alike (ties kept) serve any trace alike,
since the scheduler scores every live request afresh at each iteration and acts on the order alone.
The requests are drawn in every state the scheduler scores them in (waiting, preempted, prefilling,
decoding) with every relation of REQUEST_FEATURES kept, on the scales of the shipped workloads.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np

ITERATIONS = 24
"""Decisions in the sample: enough that keys which agree on a few orders but not on all are told apart."""
REQUESTS = 16
"""Live requests per iteration: a queue near saturation holds a few running and more waiting."""
TTFT_SLO_S = 5.0
TPOT_SLO_S = 0.1
"""The shipped SLOs, which place the deadlines; a key reads only their order, so others would do."""
BLOCK_TOKENS = 16


MOST_PROMPT = 4096
"""The longest prompt drawn, in tokens: the shipped Azure head's prompts reach about that."""


@functools.cache
def behaviour_sample(
    most_prompt: int = MOST_PROMPT, block_tokens: int = BLOCK_TOKENS
) -> tuple[tuple[Mapping[str, float], ...], ...]:
    """Seeded iterations (the same in every process): one moment each, its requests in mixed states, their
    prompts up to `most_prompt` tokens in blocks of `block_tokens` (another target's scale: serving's)."""
    rng = np.random.default_rng(23)
    iterations = []
    for _ in range(ITERATIONS):
        now = float(rng.uniform(10.0, 600.0))
        states = [_request(rng, now, most_prompt, block_tokens) for _ in range(REQUESTS)]
        running = sum(s["running"] for s in states)
        moment = {
            "now": now,
            "free_blocks": float(rng.integers(0, 256)),
            "queued": float(REQUESTS - running),
            "batch": float(running),
        }
        iterations.append(tuple({**moment, **s} for s in states))
    return tuple(iterations)


def _request(rng: np.random.Generator, now: float, most_prompt: int, block_tokens: int) -> dict[str, float]:
    """One live request at `now`: waiting for its first admission, preempted, prefilling or decoding."""
    waiting = float(np.exp(rng.uniform(np.log(0.01), np.log(min(now, 120.0)))))
    arrival = now - waiting
    prompt = float(rng.integers(1, most_prompt + 1))
    state = rng.choice(["waiting", "preempted", "prefilling", "decoding"])
    generated = 0.0 if state in ("waiting", "prefilling") else float(rng.integers(1, 300))
    if state == "prefilling":
        computed = float(rng.integers(1, prompt)) if prompt > 1 else 0.0
    elif state == "decoding":
        computed = prompt + generated - 1.0
    else:
        computed = 0.0
    first_token = arrival + waiting * float(rng.uniform(0.0, 1.0))
    deadline = arrival + TTFT_SLO_S if generated == 0.0 else first_token + generated * TPOT_SLO_S
    since_run = waiting * float(rng.uniform(0.0, 1.0)) if state != "waiting" else waiting
    return {
        "arrival": arrival,
        "waiting": now - arrival,
        "since_run": min(since_run, now - arrival),
        "prompt": prompt,
        "generated": generated,
        "computed": computed,
        "pending": prompt + generated - computed,
        "decoding": float(state == "decoding"),
        "running": float(state in ("prefilling", "decoding")),
        "blocks": float(np.ceil(computed / block_tokens)),
        "preemptions": float(rng.integers(1, 3)) if state == "preempted" else float(rng.random() < 0.1),
        "deadline": deadline,
        "slack": deadline - now,
    }
