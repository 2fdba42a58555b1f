"""The planner's decisions are those of its rules read literally: every live request scored and ranked in
one order, running ones served (and preempted) in it, then waiting ones admitted in it while they fit. The
planner itself ranks each status apart and skips scoring a queue no one can join; this pins that it
decides exactly the same, iteration by iteration, whatever the policy and however tight the limits."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from targets.batching.features import N_COLUMNS, PREFIX_COLUMN
from targets.batching.scheduler import (
    DONE,
    RUNNING,
    WAITING,
    Limits,
    _fill_row,
    commit,
    drop_done,
    initial_state,
    plan,
)
from targets.batching.target import BatchingTarget, _compiled
from targets.batching.trace import Requests

_PROMPT, _GENERATED, _COMPUTED, _BLOCKS, _PREEMPTIONS, _STATUS, _RECOMPUTED = 1, 3, 4, 5, 6, 10, 11
STEP_S = 0.004
"""Every iteration takes this long: the price does not matter to which decisions are taken."""
POLICIES = {
    **BatchingTarget().baselines(),
    "longest_first": '"""Longest prompt first: waiting requests outrank running ones."""\n\n'
    "def priority(r, p):\n    return r.prompt - 1000.0 * r.running\n",
}


def literal_plan(
    key: Callable[..., float], S: np.ndarray, live: np.ndarray, now: float, setting: np.ndarray, X: np.ndarray
) -> tuple[list[tuple[int, int, int]], list[int], int]:
    """The rules of targets/batching/scheduler.py's docstring, one step at a time, in plain Python."""
    free, budget, block_tokens, max_seqs = int(setting[0]), int(setting[1]), setting[2], int(setting[3])
    whole_prompt = setting[6] != 0.0
    batch = sum(S[r, _STATUS] == RUNNING for r in live)
    scores = []
    for i, r in enumerate(live):
        _fill_row(
            X, i, int(r), now, S, float(free), float(len(live) - batch), float(batch), setting[4], setting[5]
        )
        X[i, PREFIX_COLUMN] = 0.0
        scores.append(float(key(X, i, np.zeros(0))))
    order = [int(live[i]) for i in sorted(range(len(live)), key=lambda i: (-scores[i], i))]
    rows, preempted, served = [], [], set()
    for position, r in enumerate(order):
        if S[r, _STATUS] != RUNNING or budget == 0:
            continue
        computed = S[r, _COMPUTED]
        take = min(S[r, _PROMPT] + S[r, _GENERATED] - computed, budget)
        need = math.ceil((computed + take) / block_tokens) - int(S[r, _BLOCKS])
        while need > free and S[r, _STATUS] == RUNNING:
            later = [v for v in order[position + 1 :] if S[v, _STATUS] == RUNNING and v not in served]
            victim = later[-1] if later else r
            free += int(S[victim, _BLOCKS])
            S[victim, _RECOMPUTED] += S[victim, _COMPUTED]
            S[victim, [_BLOCKS, _COMPUTED]] = 0.0
            S[victim, _PREEMPTIONS] += 1.0
            S[victim, _STATUS] = WAITING
            preempted.append(victim)
        if S[r, _STATUS] == RUNNING:
            free -= need
            S[r, _BLOCKS] += need
            rows.append((r, int(computed), int(take)))
            budget -= int(take)
            served.add(r)
    if preempted:
        return rows, preempted, free
    running = sum(S[r, _STATUS] == RUNNING for r in live)
    for r in (r for r in order if S[r, _STATUS] == WAITING):
        if budget == 0 or running >= max_seqs:
            break
        take = min(S[r, _PROMPT] + S[r, _GENERATED], budget)
        need = math.ceil(take / block_tokens)
        whole = math.ceil((S[r, _PROMPT] + S[r, _GENERATED]) / block_tokens) if whole_prompt else need
        if whole > free:
            break
        free -= need
        S[r, [_BLOCKS, _COMPUTED, _STATUS]] = need, 0.0, RUNNING
        rows.append((r, 0, int(take)))
        budget -= int(take)
        running += 1
    return rows, preempted, free


def _requests(n: int, seed: int) -> Requests:
    rng = np.random.default_rng(seed)
    return Requests(
        arrival_s=np.cumsum(rng.exponential(0.003, n)),
        prompt_tokens=rng.integers(1, 300, n),
        output_tokens=rng.integers(1, 60, n),
    )


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize(
    "limits",
    [
        Limits(kv_blocks=60, block_tokens=8, token_budget=96, max_seqs=12),  # preempts often
        Limits(kv_blocks=400, block_tokens=16, token_budget=64, max_seqs=6),  # the batch cap binds
        Limits(kv_blocks=45, block_tokens=8, token_budget=256, max_seqs=64, admit_whole_prompt=True),
    ],
    ids=["tight-pool", "batch-cap", "whole-prompt"],
)
def test_every_iteration_plans_as_one_order_over_every_live_request(policy: str, limits: Limits) -> None:
    requests = _requests(160, seed=len(policy))
    key = _compiled(POLICIES[policy])
    S = initial_state(requests)
    setting = limits.setting((0.5, 0.05))
    X, rows_out = np.zeros((requests.n, N_COLUMNS)), np.zeros((3, limits.token_budget), dtype=np.int64)
    preempted, live = np.zeros(requests.n, dtype=np.int64), np.zeros(requests.n, dtype=np.int64)
    now, free, count, arrived, iterations, skipped = 0.0, limits.kv_blocks, 0, 0, 0, 0
    while arrived < requests.n or count:
        while arrived < requests.n and requests.arrival_s[arrived] <= now:
            live[count], count, arrived = arrived, count + 1, arrived + 1
        if count == 0:
            now = float(requests.arrival_s[arrived])
            continue
        setting[0] = free
        expected_state = S.copy()
        expected = literal_plan(key, expected_state, live[:count], now, setting, X.copy())
        rows, lost, free = plan(key, np.zeros(0), S, live[:count], now, setting, X, rows_out, preempted)
        planned = [tuple(int(v) for v in rows_out[:, k]) for k in range(rows)]
        assert (planned, preempted[:lost].tolist(), free) == expected, f"iteration {iterations}"
        assert np.array_equal(S, expected_state, equal_nan=True)
        waiting = sum(S[r, _STATUS] == WAITING for r in live[:count])
        skipped += waiting > 0 and not any(start == 0 and S[r, _STATUS] == RUNNING for r, start, _ in planned)
        if rows == 0:
            continue
        now += STEP_S
        free = commit(S, rows_out[0], rows_out[2], rows, now, free)
        count = drop_done(S, live, count)
        iterations += 1
    assert np.all(S[:, _STATUS] == DONE)
    assert skipped > 0, "some iterations had a queue that no one joined"
