"""The run service: what it checks before storing a run, how it executes one through an injected executor,
and how a run ends when its baselines cannot run."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from in_process import InProcess

from sandbox.process import ProcessSandbox
from search.errors import UserError
from search.proposers.evolve.proposer import EvolveProposer
from search.service.runs import RunService, prepare
from search.store.store import Store, open_engine
from targets.kv.target import shipped_workload_path

KV = {"capacity": 300}


def service(tmp_path: Path, name: str = "runs") -> RunService:
    return RunService(Store(open_engine(f"sqlite:///{tmp_path / name}.db")))


def searched(runs: RunService, executor: ProcessPoolExecutor | None = None) -> list[tuple]:
    config = prepare("kv", "gen:chat:1", KV, budget=4, trials=2, workers=2, seed=7)
    info = runs.record(config)
    runs.execute(info.run_id, InProcess(), EvolveProposer(), executor=executor)
    return [(c.seq, c.source, c.status, c.score, c.params) for c in runs.read.candidates(info.run_id)]


def test_a_process_pool_gives_the_same_candidates_and_scores_as_the_default_pool(tmp_path: Path) -> None:
    default = searched(service(tmp_path, "threads"))
    spawn = multiprocessing.get_context("spawn")  # nothing inherited: jobs, results and sandbox pickle
    with ProcessPoolExecutor(max_workers=2, mp_context=spawn) as pool:
        processes = searched(service(tmp_path, "processes"), pool)
    assert [row[2] for row in default].count("evaluated") >= 1
    assert processes == default


def test_a_run_is_checked_before_anything_is_stored(tmp_path: Path) -> None:
    runs = service(tmp_path)
    bad = {
        "--budget must be a whole number of at least 1, got 0": {"budget": 0},
        "--budget must be a whole number of at least 1, got -3": {"budget": -3},
        "--workers must be a whole number of at least 1": {"workers": 0},
        "--time-budget must be positive": {"time_budget_s": -1.0},
    }
    for message, settings in bad.items():
        with pytest.raises(UserError, match=message):
            runs.create("kv", "gen:chat:1", KV, **settings)
    with pytest.raises(UserError, match=r"option capacity must lie in \[1, 1e\+12\], got 0"):
        runs.create("kv", "gen:chat:1", {"capacity": 0})
    with pytest.raises(UserError, match="unknown option 'load'"):
        runs.create("kv", "gen:chat:1", {"load": 0.5})
    with pytest.raises(UserError, match="unknown target 'nope'"):
        runs.create("nope", None, {})
    assert runs.read.runs() == []


def test_a_relative_workload_and_profile_are_stored_as_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = shipped_workload_path().read_text().splitlines()[:300]
    (tmp_path / "trace.jsonl").write_text("\n".join(head) + "\n")
    monkeypatch.chdir(tmp_path)
    config = prepare("kv", "trace.jsonl", {"capacity": 50})
    assert config.workload == str(tmp_path / "trace.jsonl")
    assert config.options == {"capacity": 50, "profile": "cpu-2core", "train_share": 0.3}
    generated = prepare("kv", "gen:chat:1", {})
    assert generated.workload == "gen:chat:1" and generated.options["capacity"] == 2000
    with pytest.raises(UserError, match=f"{tmp_path / 'missing.jsonl'}: no such trace file"):
        prepare("kv", "missing.jsonl", {})


def test_a_search_whose_baselines_fail_is_marked_failed_with_the_reason(tmp_path: Path) -> None:
    runs = service(tmp_path)
    config = prepare("kv", "gen:chat:1", KV, budget=2, trials=1, limits={"wall_s": 0.05})
    info = runs.record(config)
    with pytest.raises(UserError) as failed:
        runs.execute(info.run_id, ProcessSandbox(), EvolveProposer())
    line = str(failed.value)
    assert "\n" not in line and line.startswith(f"run {info.run_id} failed: baseline ")
    assert "timeout" in line
    after = runs.read.run(info.run_id)
    assert after.status == "failed" and "timeout" in after.message and not after.resumable
    assert [e.kind for e in runs.read.events(info.run_id)] == ["failed"]


def test_stop_marks_a_run_whose_process_is_gone_stopped_and_resumable(tmp_path: Path) -> None:
    runs = service(tmp_path)
    info = runs.create("kv", "gen:chat:1", KV, budget=2)
    gone = os.fork()
    if gone == 0:
        os._exit(0)
    os.waitpid(gone, 0)
    runs.store.start_run(info.run_id, gone, os.uname().nodename)
    assert runs.read.run(info.run_id).status == "interrupted"
    assert runs.read.run(info.run_id).resumable
    runs.stop(info.run_id)
    stopped = runs.read.run(info.run_id)
    assert (stopped.status, stopped.message, stopped.resumable) == ("stopped", "stopped", True)
