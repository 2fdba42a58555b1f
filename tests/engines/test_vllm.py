"""The found batching program exported to vLLM, stepped through vLLM's real V1 Scheduler beside Crucible's
batching mechanism (targets/batching/scheduler.py) on the same requests; vLLM's FCFS beside Crucible's.

The budget rules coincide once vLLM admits a request on the blocks of its first chunk, as Crucible does
(scheduler_reserve_full_isl=False): chunked prefill, one token budget per step, max_seqs, KV blocks of the
computed tokens, admission stopping at the first request that does not fit. vLLM's default admits a
request only if its whole prompt fits, which is Crucible's admit_whole_prompt option (the last test).
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from engine_runs import ROOT, engine_python, export, run_engine

from targets.batching.features import ORACLE_COLUMNS
from targets.batching.scheduler import Batch, Limits, serve
from targets.batching.target import DEFAULTS, BatchingTarget
from targets.batching.trace import Requests
from verifiers.compiler import param_vector, to_numba
from verifiers.static import check

pytestmark = pytest.mark.engines

FOUND = ROOT / "bench" / "policies" / "found_batching.py"
STEP_S = 0.05
PROMPTS = (400, 60, 250, 30, 500, 90, 150, 20, 120, 45)
OUTPUTS = (5, 8, 3, 6, 4, 7, 5, 3, 6, 4)
ARRIVALS = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.1, 0.1, 0.2, 0.3)
ROOMY = Limits(kv_blocks=400, block_tokens=16, token_budget=256, max_seqs=4)
"""Blocks for every request at once: no preemption, so the budget, max_seqs and the order decide."""
TIGHT = Limits(kv_blocks=60, block_tokens=16, token_budget=256, max_seqs=6)
"""Fewer blocks than the requests want together: admission stops at the first that does not fit."""

Step = tuple[tuple[tuple[str, int], ...], tuple[str, ...]]


def crucible_steps(source: str, limits: Limits) -> list[Step]:
    """Every iteration of Crucible's scheduler: (the sorted (id, tokens) rows, the preempted ids)."""
    program = check(source, BatchingTarget().signatures)
    requests = Requests(np.array(ARRIVALS), np.array(PROMPTS), np.array(OUTPUTS), "engines")
    steps: list[Step] = []

    def observe(batch: Batch, state: np.ndarray, free: int) -> None:
        rows = tuple(sorted((f"r{int(i):02d}", int(t)) for i, t in zip(batch.ids, batch.tokens, strict=True)))
        steps.append((rows, tuple(sorted(f"r{int(i):02d}" for i in batch.preempted))))

    key = to_numba(program, "priority", ORACLE_COLUMNS)
    slo = (float(DEFAULTS["ttft_slo_s"]), float(DEFAULTS["tpot_slo_s"]))
    served = serve(
        requests, limits, key, param_vector(program, {}), lambda b: STEP_S * 1e3, slo, observe=observe
    )
    assert served.unfinished == 0
    return steps


def vllm_steps(scheduler: str, limits: Limits, reserve_full_prompt: bool = False) -> list[Step]:
    """Every step of vLLM's Scheduler (its own FCFS, or the exported class) on the same requests."""
    job = {
        "requests": [
            {"id": f"r{i:02d}", "arrival": a, "prompt": p, "output": o}
            for i, (a, p, o) in enumerate(zip(ARRIVALS, PROMPTS, OUTPUTS, strict=True))
        ],
        "limits": {
            "kv_blocks": limits.kv_blocks,
            "block_tokens": limits.block_tokens,
            "token_budget": limits.token_budget,
            "max_seqs": limits.max_seqs,
        },
        "step_s": STEP_S,
        "reserve_full_prompt": reserve_full_prompt,
        "max_steps": 500,
        "scheduler": scheduler,
    }
    out = run_engine("vllm", "vllm_steps.py", [], stdin=json.dumps(job))
    assert out["unfinished"] == 0
    return [(tuple(sorted((i, int(t)) for i, t in s["rows"])), tuple(s["preempted"])) for s in out["steps"]]


def admission(steps: list[Step]) -> list[str]:
    """Request ids in the order they were first scheduled (within a step, by id)."""
    seen: list[str] = []
    for rows, _ in steps:
        seen += [i for i, _ in rows if i not in seen]
    return seen


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> str:
    engine_python("vllm")
    folder = export(tmp_path_factory.mktemp("export"), FOUND, "vllm")
    return str(folder / "crucible_found_batching.py")


@pytest.mark.parametrize("limits", [ROOMY, TIGHT], ids=["roomy", "tight"])
def test_exported_scheduler_decides_as_crucible(exported: str, limits: Limits) -> None:
    engine, crucible = vllm_steps(exported, limits), crucible_steps(FOUND.read_text(), limits)
    print(json.dumps({"vllm": admission(engine), "crucible": admission(crucible)}))
    assert engine == crucible


@pytest.mark.parametrize("limits", [ROOMY, TIGHT], ids=["roomy", "tight"])
def test_vllm_fcfs_decides_as_crucible_fcfs(limits: Limits) -> None:
    fcfs = BatchingTarget().baselines()["fcfs"]
    assert vllm_steps("fcfs", limits) == crucible_steps(fcfs, limits)


def test_the_program_admits_in_another_order_than_fcfs(exported: str) -> None:
    found, fcfs = vllm_steps(exported, ROOMY), vllm_steps("fcfs", ROOMY)
    print(json.dumps({"program": found[:2], "fcfs": fcfs[:2]}))
    found, fcfs = admission(found), admission(fcfs)
    assert sorted(found) == sorted(fcfs)
    assert found != fcfs


def test_vllm_default_admission_is_crucibles_admit_whole_prompt(exported: str) -> None:
    """vLLM's default admission (the whole prompt's blocks) is Crucible's admit_whole_prompt option; it
    differs from Crucible's own rule only where blocks are short."""
    fcfs = BatchingTarget().baselines()["fcfs"]
    whole = replace(TIGHT, admit_whole_prompt=True)
    for scheduler, source in (("fcfs", fcfs), (exported, FOUND.read_text())):
        assert vllm_steps(scheduler, TIGHT, reserve_full_prompt=True) == crucible_steps(source, whole)
    assert vllm_steps("fcfs", ROOMY, reserve_full_prompt=True) == crucible_steps(fcfs, ROOMY)
    engine, crucible = vllm_steps("fcfs", TIGHT, reserve_full_prompt=True), crucible_steps(fcfs, TIGHT)
    first = next(k for k, (a, b) in enumerate(zip(engine, crucible, strict=False)) if a != b)
    print(json.dumps({"first_difference": first, "vllm": engine[first], "crucible": crucible[first]}))
    assert {i for i, _ in engine[first][0]} < {i for i, _ in crucible[first][0]}  # vLLM admitted fewer
