"""The chat and agentic generators: deterministic, prefix trees, and sized like the brief asks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from targets.kv.generators import GENERATORS, agentic_tool_loops, multi_turn_chat
from targets.kv.trace import Trace, load_mooncake, save_mooncake

FIELDS = ("timestamps_s", "input_tokens", "output_tokens", "offsets", "blocks", "parent", "depth")
FIELDS += ("block_tokens", "hash_ids")


def same(a: Trace, b: Trace) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in FIELDS)


def forks(trace: Trace) -> int:
    """Blocks with two or more children that have children of their own: where prefixes really diverge.

    Leaves do not count: a request's partial last block is a leaf that the next turn replaces.
    """
    has_child = np.zeros(trace.n_blocks, dtype=bool)
    has_child[trace.parent[trace.parent >= 0]] = True
    continuing = has_child & (trace.parent >= 0)
    return int(np.count_nonzero(np.bincount(trace.parent[continuing], minlength=trace.n_blocks) >= 2))


@pytest.mark.parametrize("name", GENERATORS)
def test_deterministic_per_seed_and_different_across_seeds(name: str) -> None:
    make = GENERATORS[name]
    assert same(make(1), make(1))
    assert not same(make(1), make(2))


@pytest.mark.parametrize("name", GENERATORS)
@pytest.mark.parametrize("seed", range(3))
def test_prefix_tree_invariants(name: str, seed: int) -> None:
    trace = GENERATORS[name](seed)
    roots = trace.parent < 0
    assert np.all(trace.depth[roots] == 1)
    assert np.all(trace.depth[trace.parent[~roots]] == trace.depth[~roots] - 1)
    before = np.empty_like(trace.blocks)
    before[1:] = trace.blocks[:-1]
    before[trace.offsets[:-1]] = -1
    assert np.array_equal(trace.parent[trace.blocks], before)
    assert np.all(np.diff(trace.timestamps_s) >= 0)
    assert np.array_equal(np.diff(trace.offsets), -(-trace.input_tokens // trace.block_size))
    assert np.all((trace.block_tokens >= 1) & (trace.block_tokens <= trace.block_size))


@pytest.mark.parametrize(("name", "hit_low", "hit_high"), [("chat", 0.3, 0.65), ("agentic", 0.8, 0.95)])
@pytest.mark.parametrize("seed", range(3))
def test_default_sizes(name: str, hit_low: float, hit_high: float, seed: int) -> None:
    trace = GENERATORS[name](seed)
    assert 1_500 <= trace.n_requests <= 3_000
    assert 30_000 <= trace.n_accesses <= 80_000
    infinite_cache_hits = 1 - trace.n_blocks / trace.n_accesses  # every block but its first sighting hits
    assert hit_low <= infinite_cache_hits <= hit_high


def test_chat_sessions_share_only_their_system_prompt() -> None:
    trace = multi_turn_chat(0, n_system_prompts=3)
    assert np.count_nonzero(trace.parent < 0) <= 3  # every session starts with one of three prompts
    assert forks(trace) <= 3  # sessions diverge after the prompt; a session's turns never fork
    assert np.all((trace.output_tokens >= 50) & (trace.output_tokens <= 1000))


def test_chat_users_return_after_seconds_or_many_minutes() -> None:
    gaps = np.diff(multi_turn_chat(0, n_sessions=1, mean_turns=200).timestamps_s)
    assert gaps.size >= 50
    assert np.count_nonzero(gaps < 10) >= 5
    assert np.count_nonzero(gaps > 600) >= 2


def test_agentic_retries_fork_the_tree_beyond_the_templates() -> None:
    assert forks(agentic_tool_loops(0, n_templates=3, branch_prob=0.0)) <= 3
    assert forks(agentic_tool_loops(0, n_templates=3, branch_prob=0.3)) > 3


@pytest.mark.parametrize("name", GENERATORS)
def test_generated_trace_saves_as_a_loadable_file(tmp_path: Path, name: str) -> None:
    trace = GENERATORS[name](0)
    path = tmp_path / f"{name}.jsonl"
    save_mooncake(trace, path)
    assert same(load_mooncake(path), trace)
