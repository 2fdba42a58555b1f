"""The offline batch loop (targets/batching_offline/offline_loop.py) as a specification: the key orders
admission and preemption, the pool is never overdrawn, a preempted sequence recomputes, and a prefix
block computed once serves every later sequence that begins with it while it stays cached."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from targets.batching.compiled_scheduler import Pricing
from targets.batching.kernels import cost_model
from targets.batching_offline.batch import Batch
from targets.batching_offline.features import SEQUENCE_FEATURES
from targets.batching_offline.offline_loop import Machine, Ran, run_batch
from verifiers.compiler import to_numba
from verifiers.program import Signature
from verifiers.static import check

SIGNATURE = Signature(name="priority", features=SEQUENCE_FEATURES.names, state_arg="r")
PRICING = Pricing.of(cost_model(on="h100-llama3-8b"), 4096, 64)


def key(expression: str) -> Callable[..., float]:
    source = f"def priority(r, p):\n    return {expression}\n"
    return to_numba(check(source, [SIGNATURE]), "priority", SEQUENCE_FEATURES.columns())


def plain(prompts: list[int], outputs: list[int]) -> Batch:
    n = len(prompts)
    empty = np.zeros(0, dtype=np.int64)
    return Batch(np.array(prompts), np.array(outputs), np.zeros(n + 1, dtype=np.int64), empty, 0, "test")


def prefixed(chains: list[list[int]], prompts: list[int], outputs: list[int], unit: int) -> Batch:
    offsets = np.cumsum([0, *map(len, chains)])
    units = np.array([u for c in chains for u in c], dtype=np.int64)
    return Batch(np.array(prompts), np.array(outputs), offsets, units, unit, "test")


def run(batch: Batch, expression: str, machine: Machine) -> Ran:
    X = batch.features()
    return run_batch(
        key(expression), np.zeros(0), X, batch.prompt, batch.output, batch.offsets, batch.units, machine,
        PRICING, record=True,
    )  # fmt: skip


def admitted(ran: Ran) -> list[int]:
    """Sequences in the order they first computed a token."""
    seen: list[int] = []
    for _, r, start, _ in ran.decisions:
        if start >= 0 and r not in seen:
            seen.append(int(r))
    return seen


ONE_AT_A_TIME = Machine(kv_blocks=1000, block_tokens=16, token_budget=64, max_seqs=1)


def test_every_sequence_finishes_with_its_output() -> None:
    batch = plain([100, 30, 70, 10], [5, 3, 4, 2])
    ran = run(batch, "-r.order", Machine(1000, 16, 256, 4))
    assert ran.unfinished == 0 and not np.isnan(ran.finish).any()
    assert ran.end_s == pytest.approx(ran.finish.max())
    computed = np.zeros(batch.n)
    for _, r, _, tokens in ran.decisions:
        computed[r] += tokens
    assert (computed == batch.prompt + batch.output - 1).all()  # the last token is sampled, not computed


def test_the_key_orders_admission_highest_first_ties_in_submission_order() -> None:
    batch = plain([100, 30, 70, 10], [2, 2, 2, 2])
    assert admitted(run(batch, "-r.order", ONE_AT_A_TIME)) == [0, 1, 2, 3]
    assert admitted(run(batch, "-r.prompt", ONE_AT_A_TIME)) == [3, 1, 2, 0]
    assert admitted(run(batch, "r.prompt", ONE_AT_A_TIME)) == [0, 2, 1, 3]
    assert admitted(run(batch, "0.0", ONE_AT_A_TIME)) == [0, 1, 2, 3]


def test_a_tight_pool_preempts_the_lowest_scored_which_recomputes() -> None:
    batch = plain([64] * 6, [40] * 6)
    machine = Machine(kv_blocks=20, block_tokens=16, token_budget=512, max_seqs=6, admit_whole_prompt=False)
    ran = run(batch, "-r.order", machine)
    assert ran.unfinished == 0 and ran.preemptions > 0 and ran.recomputed_tokens > 0
    assert ran.peak_blocks <= machine.kv_blocks
    victims = [int(r) for _, r, start, _ in ran.decisions if start < 0]
    assert victims[0] == 4  # five prompts fit the pool; the last of them in order is preempted first


def test_whole_prompt_admission_waits_for_room_and_preempts_less() -> None:
    batch = plain([96] * 6, [30] * 6)  # prompts in two chunks of the budget: a first chunk fits sooner
    first_chunk = run(batch, "-r.order", Machine(20, 16, 64, 6, admit_whole_prompt=False))
    whole = run(batch, "-r.order", Machine(20, 16, 64, 6, admit_whole_prompt=True))
    assert whole.preemptions < first_chunk.preemptions
    assert whole.unfinished == first_chunk.unfinished == 0


def first_starts(ran: Ran) -> dict[int, int]:
    """Where each sequence began computing when first admitted (past the prefix it found cached)."""
    found: dict[int, int] = {}
    for _, r, start, _ in ran.decisions:
        found.setdefault(int(r), int(start))
    return found


def test_a_cached_prefix_is_computed_once_and_skipped_by_later_sequences() -> None:
    # Three sequences share two 32-token prefix blocks (ids 0, 1); the third adds its own block 2.
    batch = prefixed([[0, 1], [0, 1], [0, 1, 2]], [70, 70, 100], [2, 2, 2], unit=32)
    ran = run(batch, "-r.order", Machine(1000, 16, 128, 1, unit_tokens=32))
    assert first_starts(ran) == {0: 0, 1: 64, 2: 64}
    assert ran.hit_tokens == 128
    off = run(batch, "-r.order", Machine(1000, 16, 128, 1, unit_tokens=0))
    assert off.hit_tokens == 0 and off.end_s > ran.end_s


def test_prefix_blocks_count_once_while_shared() -> None:
    """Two sequences running on one cached 64-token prefix hold its 4 blocks once: 4 + 2 x 3 = 10 blocks
    for two 80-token prompts with 30 outputs each, where their own copies would need 14."""
    batch = prefixed([[0], [0]], [80, 80], [30, 30], unit=64)
    shared = run(batch, "-r.order", Machine(10, 16, 512, 2, admit_whole_prompt=False, unit_tokens=64))
    assert shared.unfinished == 0 and shared.preemptions == 0 and shared.peak_blocks <= 10


def test_unused_prefixes_are_evicted_least_recently_used_first() -> None:
    # One at a time in a pool of 12 blocks: prefixes 0 and 1 stay cached (8 blocks); prefix 2 needs room
    # and evicts 0, the older. Then 1 is found and 0 is not.
    batch = prefixed([[0], [1], [2], [1], [0]], [65] * 5, [1] * 5, unit=64)
    ran = run(batch, "-r.order", Machine(12, 16, 128, 1, unit_tokens=64))
    assert ran.unfinished == 0
    assert first_starts(ran) == {0: 0, 1: 0, 2: 0, 3: 64, 4: 0}
    roomy = run(batch, "-r.order", Machine(40, 16, 128, 1, unit_tokens=64))
    assert first_starts(roomy) == {0: 0, 1: 0, 2: 0, 3: 64, 4: 64}


def test_a_nan_key_ranks_lowest() -> None:
    batch = plain([10, 10, 10], [1, 1, 1])
    assert admitted(run(batch, "0.0 / (r.order - 1.0)", ONE_AT_A_TIME))[-1] == 1
