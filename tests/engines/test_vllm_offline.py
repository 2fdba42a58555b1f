"""The found offline batch program exported to vLLM, stepped through vLLM's real V1 Scheduler beside
Crucible's offline loop (targets/batching_offline/offline_loop.py) on the same batch, all at time zero.

The program (bench/policies/offline_mooncake_seed1.py, found on the Mooncake batch) reads each sequence's
place in the prefix order, the prompt tokens it shares with another and its preemptions, so the prompts
here are token ids that share prefixes: vLLM's
export ranks them by their tokens, Crucible by their prefix blocks (one per KV block here), and both give
every sequence the same place. Prefix caching is off on both sides, so the order and the budget rules
decide alone: scored when it joins the queue, the running list served in score order, admission stopping
at the first that does not fit, the lowest preempted first.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from engine_runs import ROOT, engine_python, run_engine

from search.cli import main
from targets.batching.compiled_scheduler import Pricing
from targets.batching.kernels import cost_model
from targets.batching_offline.batch import Batch
from targets.batching_offline.features import SEQUENCE_FEATURES
from targets.batching_offline.offline_loop import Machine, run_batch
from targets.batching_offline.target import BatchingOfflineTarget
from verifiers.compiler import param_vector, to_numba
from verifiers.static import check

pytestmark = pytest.mark.engines

FOUND = ROOT / "bench" / "policies" / "offline_mooncake_seed1.py"
BLOCK = 16
HEADS = ((3,) * 32, (5,) * 32, (3,) * 16 + (4,) * 16)
"""Shared openings of 2 blocks; the third shares its first block with the first."""
PROMPTS = tuple(HEADS[k % 3] + tuple(range(100 + 16 * k, 100 + 16 * k + 16 * (k % 4))) for k in range(10))
"""Ten prompts of whole blocks: an opening, then 0-3 blocks of their own (equal prompts where those are
empty and the openings alike)."""
OUTPUTS = (5, 8, 3, 6, 4, 7, 5, 3, 6, 4)
ROOMY = Machine(kv_blocks=400, block_tokens=BLOCK, token_budget=256, max_seqs=4, admit_whole_prompt=True)
TIGHT = Machine(kv_blocks=24, block_tokens=BLOCK, token_budget=128, max_seqs=6, admit_whole_prompt=False)

Step = tuple[tuple[tuple[str, int], ...], tuple[str, ...]]


def batch() -> Batch:
    """The prompts as a batch: a prefix block per KV block, ids in the order of their tokens."""
    prefixes = sorted({p[: BLOCK * (j + 1)] for p in PROMPTS for j in range(len(p) // BLOCK)})
    ids = {prefix: i for i, prefix in enumerate(prefixes)}
    chains = [[ids[p[: BLOCK * (j + 1)]] for j in range(len(p) // BLOCK)] for p in PROMPTS]
    return Batch(
        np.array([len(p) for p in PROMPTS]),
        np.array(OUTPUTS),
        np.cumsum([0, *map(len, chains)]),
        np.array([u for c in chains for u in c], dtype=np.int64),
        BLOCK,
        "engines",
    )


def crucible_steps(source: str, machine: Machine) -> list[Step]:
    program = check(source, BatchingOfflineTarget().signatures)
    key = to_numba(program, "priority", SEQUENCE_FEATURES.columns())
    b = batch()
    pricing = Pricing.of(cost_model(on="h100-llama3-8b"), machine.token_budget, machine.max_seqs)
    ran = run_batch(
        key, param_vector(program, {}), b.features(), b.prompt, b.output, b.offsets, b.units, machine,
        pricing, record=True,
    )  # fmt: skip
    assert ran.unfinished == 0
    steps: dict[int, tuple[list[tuple[str, int]], list[str]]] = {}
    for iteration, r, start, tokens in ran.decisions.tolist():
        rows, preempted = steps.setdefault(iteration, ([], []))
        if start >= 0:
            rows.append((f"r{r:02d}", tokens))
        else:
            preempted.append(f"r{r:02d}")
    return [(tuple(sorted(rows)), tuple(sorted(gone))) for _, (rows, gone) in sorted(steps.items())]


def vllm_steps(scheduler: str, machine: Machine) -> list[Step]:
    job = {
        "requests": [
            {"id": f"r{i:02d}", "arrival": 0.0, "prompt": len(p), "output": o, "tokens": list(p)}
            for i, (p, o) in enumerate(zip(PROMPTS, OUTPUTS, strict=True))
        ],
        "limits": {
            "kv_blocks": machine.kv_blocks,
            "block_tokens": machine.block_tokens,
            "token_budget": machine.token_budget,
            "max_seqs": machine.max_seqs,
        },
        "step_s": 0.05,
        "reserve_full_prompt": machine.admit_whole_prompt,
        "max_steps": 500,
        "scheduler": scheduler,
    }
    out = run_engine("vllm", "vllm_steps.py", [], stdin=json.dumps(job))
    assert out["unfinished"] == 0
    return [(tuple(sorted((i, int(t)) for i, t in s["rows"])), tuple(s["preempted"])) for s in out["steps"]]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> str:
    engine_python("vllm")
    folder = tmp_path_factory.mktemp("export")
    main(["export", str(FOUND), "--to", "vllm", "--target", "batching-offline", "-o", str(folder)])
    return str(folder / "crucible_offline_mooncake_seed1.py")


def test_the_batch_ranks_its_prefixes_as_the_tokens_sort() -> None:
    columns = SEQUENCE_FEATURES.columns()
    X = batch().features()
    by_tokens = sorted(range(len(PROMPTS)), key=lambda r: (PROMPTS[r], r))
    assert [int(X[r, columns["prefix_rank"]]) for r in by_tokens] == sorted(X[:, columns["prefix_rank"]])
    assert [int(x) for x in X[:, columns["shared"]]] == [shared(r) for r in range(len(PROMPTS))]


def shared(r: int) -> int:
    """The export's definition: the longest common prefix with another prompt, in whole KV blocks."""
    longest = 0
    for o, other in enumerate(PROMPTS):
        n = 0
        while o != r and n < min(len(other), len(PROMPTS[r])) and other[n] == PROMPTS[r][n]:
            n += 1
        longest = max(longest, n)
    return longest // BLOCK * BLOCK


@pytest.mark.parametrize("machine", [ROOMY, TIGHT], ids=["roomy", "tight"])
def test_exported_offline_scheduler_decides_as_crucible(exported: str, machine: Machine) -> None:
    engine, crucible = vllm_steps(exported, machine), crucible_steps(FOUND.read_text(), machine)
    print(json.dumps({"vllm": engine[:3], "crucible": crucible[:3]}))
    assert engine == crucible
    if machine is TIGHT:
        assert any(gone for _, gone in crucible)  # the pool is tight enough to preempt
