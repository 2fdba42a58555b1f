"""The read model: what a stored run answers, from the store alone; every `runs` command prints it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from in_process import InProcess
from sqlalchemy import inspect, text

from search.cli.main import main
from search.proposers.base import Proposal, ProposalFailed, ProposalRequest
from search.proposers.evolve.proposer import EvolveProposer
from search.service.runs import RunService, prepare
from search.store.readmodel import ReadModel
from search.store.store import Store, open_engine
from search.terms import BASELINE

TRIALS = 2
"""Optuna trials per candidate in the stored run."""


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """One real search of four candidates, evaluated on the shipped kv mechanism: (db URL, run id). Its seed
    gives four candidates that each behave unlike every baseline (a behavioural duplicate adds a fifth)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('read') / 'runs.db'}"
    runs = RunService(Store(open_engine(url)))
    info = runs.record(prepare("kv", "gen:chat:1", {"capacity": 300}, budget=4, trials=TRIALS, seed=5))
    runs.execute(info.run_id, InProcess(), EvolveProposer())
    return url, info.run_id


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> object:
    main(list(args))
    return json.loads(capsys.readouterr().out)


def test_runs_show_json_is_the_read_models_report(
    stored: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, run_id = stored
    report = ReadModel(Store(open_engine(url, create=False))).report(run_id)
    assert cli_json(capsys, "runs", "show", run_id, "--db", url, "--json") == json.loads(
        json.dumps(report.to_json())
    )
    listed = cli_json(capsys, "runs", "list", "--db", url, "--json")
    assert listed == [json.loads(json.dumps(report.run.to_json()))]


def test_a_run_answers_status_progress_best_against_the_best_baseline_and_cost(
    stored: tuple[str, str],
) -> None:
    url, run_id = stored
    read = ReadModel(Store(open_engine(url, create=False)))
    info = read.run(run_id)
    assert (info.status, info.done, info.budget, info.resumable) == ("finished", 4, 4, False)
    assert info.options == {"capacity": 300, "profile": "cpu-2core", "train_share": 0.3}
    assert info.objective == "block_hit_rate" and info.direction == "maximize"
    candidates = [c for c in read.candidates(run_id) if not c.is_baseline]
    scored = [c for c in candidates if c.score is not None and c.status == "evaluated"]
    assert info.best is not None and info.best.score == max(c.score for c in scored)  # type: ignore[type-var]
    baselines = read.baselines(run_id)
    assert {b.kind for b in baselines} == {"candidate", "builtin"}
    assert {b.name for b in baselines if b.oracle} == {"belady"}
    policies = [b for b in baselines if not b.oracle and b.score is not None]
    assert info.best_baseline is not None and info.best_baseline.name != "belady"  # a bound, not a baseline
    assert info.best_baseline.score == max(b.score for b in policies)  # type: ignore[type-var]
    assert info.oracle is not None and info.oracle.name == "belady"
    assert info.oracle.score is not None and info.oracle.score >= info.best_baseline.score  # type: ignore[operator]
    assert read.study(run_id) is None and read.report(run_id).study is None, "a search, not a tune study"
    progress = read.progress(run_id)
    assert [p.done for p in progress] == list(range(1, 5))
    bests = [p.best_so_far for p in progress if p.best_so_far is not None]
    assert bests == sorted(bests) and bests[-1] == info.best.score


def test_each_candidate_carries_its_lineage_verdicts_params_and_metrics_per_instance(
    stored: tuple[str, str],
) -> None:
    url, run_id = stored
    read = ReadModel(Store(open_engine(url, create=False)))
    candidates = read.candidates(run_id)
    ids = {c.candidate_id for c in candidates}
    proposed = [c for c in candidates if c.proposer != BASELINE]
    assert all(c.parent_id in ids for c in proposed)
    assert any(c.inspirations for c in proposed), "the proposers were shown inspirations; they are stored"
    assert all(set(c.inspirations) <= ids for c in proposed)
    for c in proposed:
        assert {v.property for v in c.verdicts} >= {"no-division-by-zero", "finite-bounded"}
        if c.status == "evaluated":
            assert {e.role for e in c.evaluations} == {"train", "eval"}
            assert c.metrics["block_hit_rate"] == c.score
            assert set(c.params) == set(json.loads(json.dumps(c.params)))
        assert (c.failure_class == "") == (c.status in ("evaluated", "gated"))


def test_a_tuned_candidate_keeps_its_optuna_study_one_trial_per_trial_run(stored: tuple[str, str]) -> None:
    url, run_id = stored
    read = ReadModel(Store(open_engine(url, create=False)))
    tuned = [c for c in read.candidates(run_id) if c.status in ("evaluated", "gated") and c.params]
    assert tuned
    for c in tuned:
        assert [t["number"] for t in c.trials] == list(range(TRIALS))
        complete = [t for t in c.trials if t["state"] == "COMPLETE"]
        best = max(complete, key=lambda t: t["value"])
        assert best["params"] == pytest.approx(c.params)
        assert best["value"] == pytest.approx(c.train_score)


def test_an_older_store_without_the_trials_column_opens_with_empty_studies(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    with open_engine(url).begin() as connection:
        connection.execute(text("ALTER TABLE candidate DROP COLUMN trials"))
        connection.execute(text("DROP TABLE crucible_schema_version"))  # made before migrations
    columns = {c["name"]: c for c in inspect(open_engine(url, create=False)).get_columns("candidate")}
    assert "trials" in columns and columns["trials"]["default"] == "'[]'"


def test_runs_best_json_holds_the_file_and_verify_checks_a_stored_candidate(
    stored: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, run_id = stored
    best = cli_json(capsys, "runs", "best", run_id, "--db", url, "--json")
    assert isinstance(best, dict) and "def priority(b, p):" in best["file"]
    assert best["file"] == ReadModel(Store(open_engine(url))).best_file(run_id)
    shown = cli_json(
        capsys, "verify", "--db", url, "--run", run_id, "--candidate", str(best["seq"]), "--json"
    )
    assert isinstance(shown, dict)
    assert {p["verdict"] for p in shown["properties"] if p["severity"] == "hard"} <= {"proved", "unknown"}


def test_read_only_commands_never_create_a_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "typo.db"
    for args in (["runs", "list"], ["runs", "show", "abc"], ["runs", "best", "abc"]):
        with pytest.raises(SystemExit) as exit_info:
            main([*args, "--db", f"sqlite:///{missing}"])
        assert exit_info.value.code == 2
        assert capsys.readouterr().err.strip() == f"crucible: error: no database at {missing}"
    assert not missing.exists()


@dataclass
class Scripted:
    """A proposer that replies from a script, in order: a source, or None for a proposal that fails."""

    script: list[str | None]
    name: str = "scripted"
    concurrency: int = 1

    def propose(self, request: ProposalRequest) -> Proposal:
        source = self.script.pop(0)
        if source is None:
            raise ProposalFailed("scripted: no program this time")
        return Proposal(source=source, proposer=self.name)


_KEEPS_HITS = "def priority(b, p):\n    return b.hits + b.last_access\n"


def test_runs_show_says_where_the_budget_went(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    runs = RunService(Store(open_engine(url)))
    info = runs.record(prepare("kv", "gen:chat:1", {"capacity": 300}, budget=3, trials=TRIALS, workers=1))
    script: list[str | None] = [
        _KEEPS_HITS,
        _KEEPS_HITS,  # the same program again: discarded, proposed again
        None,
        "def priority(b, p):\n    return b.hits / b.age\n",  # age can be 0: refuted by the verifier
        "def priority(b, p):\n    return b.recompute_ms\n",  # no such feature: the static check
    ]
    runs.execute(info.run_id, InProcess(), Scripted(script))
    budget = ReadModel(Store(open_engine(url, create=False))).budget(info.run_id)
    assert (budget.duplicates, budget.failed_proposals, budget.static, budget.refuted) == (1, 1, 1, 1)
    assert (budget.faulted, budget.gated + budget.evaluated, budget.pending) == (0, 1, 0)
    main(["runs", "show", info.run_id, "--db", url])
    assert "budget: 1 duplicates and 1 failed proposals discarded; 1 rejected by the static check, " in (
        capsys.readouterr().out.replace("\n", " ")
    )
