"""`--holdout`: a search tunes and selects on the head of its workload and is judged on the held-out tail,
with the constants as tuned on the head and re-tuned on the tail; the scores come back from the store."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from in_process import InProcess

import targets
from sandbox.job import Job, Result
from search.cli.main import main
from search.errors import UserError
from search.proposers.evolve.proposer import EvolveProposer
from search.service.runs import RunService, prepare
from search.store.readmodel import ReadModel
from search.store.store import Store, open_engine
from search.terms import TAIL_RETUNED, Split
from verifiers.static import check, render

BATCHING = {"requests": "0:120"}
"""A small window of the shipped trace, so a whole search runs in seconds."""


@dataclass
class Recording:
    """The in-process sandbox, noting the request window of every instance each job asked for."""

    windows: list[tuple[str, tuple[int, int]]] = field(default_factory=list)
    tuned_sources: list[str] = field(default_factory=list)
    """The source of every job that tunes, in order."""

    def run(self, job: Job) -> Result:
        if job.tuning is not None:
            self.tuned_sources.append(job.source)
        for instance in job.instances:
            start, stop = instance.config["requests"]
            self.windows.append((instance.role, (int(start), int(stop))))
        return InProcess().run(job)


@pytest.fixture(scope="module")
def held_out(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunService, str, Recording]:
    """One small batching search holding out the last third of its 120 requests."""
    runs = RunService(Store(open_engine(f"sqlite:///{tmp_path_factory.mktemp('holdout') / 'runs'}.db")))
    config = prepare("batching", None, BATCHING, budget=2, trials=2, workers=1, holdout=0.33)
    info = runs.record(config)
    sandbox = Recording()
    runs.execute(info.run_id, sandbox, EvolveProposer())
    return runs, info.run_id, sandbox


def test_the_tail_never_reaches_the_search_and_every_policy_is_scored_on_it(
    held_out: tuple[RunService, str, Recording],
) -> None:
    runs, run_id, sandbox = held_out
    config = runs.read.run(run_id).config
    assert config["holdout"] == {"share": 0.33, "head": "0:80", "tail": "80:120", "warm": False}
    assert config["options"]["requests"] == "0:80"
    first_tail = next(i for i, (_, (start, _)) in enumerate(sandbox.windows) if start >= 80)
    search_jobs, tail_jobs = sandbox.windows[:first_tail], sandbox.windows[first_tail:]
    assert search_jobs and all(stop <= 80 for _, (_, stop) in search_jobs)  # selection saw the head only
    assert all(start >= 80 and stop <= 120 for _, (start, stop) in tail_jobs)  # and the tail came after
    assert ("eval", (80, 120)) in tail_jobs
    assert {"train", "eval"} <= {role for role, _ in tail_jobs}
    assert {w for role, w in tail_jobs if role == "train"} == {(80, 120)}  # re-tuned on the whole tail

    report = ReadModel(runs.store).report(run_id)  # a fresh reader: from the store alone
    assert report.holdout is not None
    rows = {row.name: row for row in report.holdout.rows}
    target = targets.load("batching")
    assert set(rows) == {
        f"found {report.best.label}",
        *target.baselines(),
        *target.builtin_baselines(),
    }  # type: ignore[union-attr]
    for row in rows.values():
        assert row.head is not None and row.tail is not None
        assert (row.tail_retuned is None) == (row.kind == "builtin")  # a built-in has no constants
        if row.tail_retuned is not None:  # fitted on the tail from the head's constants: never worse there
            assert row.tail_retuned >= row.tail
    found = rows[f"found {report.best.label}"]  # type: ignore[union-attr]
    assert found.head == report.best.score  # type: ignore[union-attr]
    assert {name for name, row in rows.items() if row.oracle} == set(target.oracles()) == {"srpt"}

    # The tail figure is the policy's own score on requests 80:120, as evaluating it there directly gives.
    fcfs = check(target.baselines()["fcfs"], target.signatures)
    tail = [i for i in target.instances(config["workload"], {"requests": "80:120"}) if i.role == "eval"]
    assert rows["fcfs"].tail == target.evaluate(fcfs, tail[0], fcfs.defaults())["slo_attainment"]
    assert report.to_json()["holdout"]["tail"] == "80:120"


def test_runs_show_marks_the_oracle_and_gives_the_found_tail_as_a_multiple_of_each(
    held_out: tuple[RunService, str, Recording], capsys: pytest.CaptureFixture[str]
) -> None:
    runs, run_id, _ = held_out
    holdout = ReadModel(runs.store).holdout(run_id)
    assert holdout is not None and (found := holdout.found_tail()) is not None
    main(["runs", "show", run_id, "--db", str(runs.store.engine.url)])
    shown = capsys.readouterr().out
    table = shown.split("held-out tail", 1)[1]
    assert "found / this, tail" in table
    for row in holdout.rows:
        (line,) = [x for x in table.splitlines() if x.startswith(f"│ {row.name} ")]
        assert (" (oracle) " in line) == (row.name == "srpt")
        assert line.rstrip(" │").endswith(f"{found / row.tail:.3f}")  # type: ignore[operator]
    ratios = next(x for x in shown.splitlines() if "against each baseline" in x)
    policies, oracle = ratios.split("; against the oracle: ")
    assert "srpt" not in policies and oracle.startswith("srpt ")


def test_re_tuning_on_the_tail_starts_from_the_constants_tuned_on_the_head(
    held_out: tuple[RunService, str, Recording],
) -> None:
    runs, run_id, sandbox = held_out
    target = targets.load("batching")
    scored = {e.candidate_id for e in runs.store.evaluations(run_id) if e.role == TAIL_RETUNED}
    rows = [r for r in runs.store.candidates(run_id) if r.id in scored]
    # each re-tuning job's PARAMS carry the head's tuned values as defaults: its first trial is the head's
    starts = {render(check(r.source, target.signatures), json.loads(r.params or "{}")) for r in rows}
    assert len(starts) == len(rows) and starts <= set(sandbox.tuned_sources)
    for r in rows:
        head = json.loads(r.params or "{}")
        start = check(render(check(r.source, target.signatures), head), target.signatures)
        assert start.defaults() == head or not head


def test_a_resumed_finished_run_scores_only_the_policies_the_tail_report_lacks(
    held_out: tuple[RunService, str, Recording],
) -> None:
    runs, run_id, _ = held_out
    again = Recording()
    runs.execute(run_id, again, EvolveProposer())
    assert again.windows == []
    assert len(ReadModel(runs.store).report(run_id).holdout.rows) == 6  # type: ignore[union-attr]


@pytest.mark.parametrize("value", ["0", "1", "-0.2", "1.5", "abc", "nan"])
def test_a_bad_holdout_is_one_line_and_stores_nothing(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    with pytest.raises(SystemExit) as exit_info:
        main(["search", "--target", "batching", "--holdout", value, "--db", f"sqlite:///{db}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2
    assert len(err) == 1 and err[0].startswith("crucible: error: --holdout "), err
    assert "must lie in (0, 1)" in err[0] or "expects a number" in err[0], err
    assert not db.exists()


def test_a_holdout_that_leaves_no_head_or_tail_is_refused() -> None:
    with pytest.raises(UserError, match="leaves the head or the tail empty"):
        prepare("batching", None, {"requests": "0:2"}, holdout=0.1)


def test_a_run_stopped_by_its_time_budget_is_scored_on_the_tail_too(tmp_path: Path) -> None:
    runs = RunService(Store(open_engine(f"sqlite:///{tmp_path / 'timed'}.db")))
    config = prepare(
        "batching", None, BATCHING, budget=50, trials=2, workers=1, holdout=0.5, time_budget_s=0.01
    )
    info = runs.record(config)
    report = runs.execute(info.run_id, InProcess(), EvolveProposer())
    assert (report.run.status, report.run.message) == ("stopped", "time budget spent")
    assert report.holdout is not None and report.holdout.tail == "60:120"
    target = targets.load("batching")
    scored = {row.name for row in report.holdout.rows if row.kind != "found"}
    assert scored == {*target.baselines(), *target.builtin_baselines()}


def test_a_kv_search_scores_its_tail_warm_and_measures_the_gap_on_the_tail_itself(tmp_path: Path) -> None:
    runs = RunService(Store(open_engine(f"sqlite:///{tmp_path / 'kv'}.db")))
    config = prepare("kv", "gen:chat:1", {"capacity": 300}, budget=1, trials=2, workers=1, holdout=0.25)
    target = targets.load("kv")
    n = target.requests("gen:chat:1")  # type: ignore[attr-defined]
    cut = n - round(n * 0.25)
    assert config.holdout == {"share": 0.25, "head": f"0:{cut}", "tail": f"{cut}:{n}", "warm": True}
    info = runs.record(config)
    runs.execute(info.run_id, InProcess(), EvolveProposer())
    holdout = ReadModel(runs.store).holdout(info.run_id)
    assert holdout is not None and holdout.warm
    rows = {row.name: row for row in holdout.rows}
    # LRU and Belady bound the gap on the tail's own requests: 0 and 1 of it there, as on the head.
    assert rows["lru"].tail_metrics["gap_closed"] == pytest.approx(0.0)
    assert rows["belady"].tail_metrics["gap_closed"] == pytest.approx(1.0)
    assert rows["lru"].tail != rows["lru"].head
    # The tail met the cache the head left: S3-FIFO's figure is its warm score there, not its cold one.
    window = {"capacity": 300, "requests": f"{cut}:{n}"}
    warm, cold = (
        next(i for i in target.instances("gen:chat:1", {**window, "warm": w}) if i.role == "eval")
        for w in (True, False)
    )
    assert rows["s3fifo"].tail == target.evaluate_builtin("s3fifo", warm)["block_hit_rate"]
    assert rows["s3fifo"].tail != target.evaluate_builtin("s3fifo", cold)["block_hit_rate"]


def test_a_split_stored_before_warm_tails_reads_back_cold() -> None:
    """A run recorded before tails were scored warm resumes as it began: its tail stays cold."""
    assert Split.from_json({"share": 0.25, "head": "0:30", "tail": "30:40"}).warm is False


def test_the_verdict_follows_the_held_out_tail_where_it_reverses_the_head(
    held_out: tuple[RunService, str, Recording],
) -> None:
    from dataclasses import replace

    from search.cli.report import verdict

    runs, run_id, _ = held_out
    report = ReadModel(runs.store).report(run_id)
    assert report.holdout is not None and report.best is not None
    rows = report.holdout.rows
    rival = next(r for r in rows if r.kind != "found" and not r.oracle)
    found = next(r for r in rows if r.kind == "found")
    # the found policy wins on the head (its best score) and loses on the tail, to one baseline
    losing = [replace(r, tail=rival.tail * 2 if r is rival else r.tail) for r in rows]  # type: ignore[operator]
    reversed_ = replace(report, holdout=replace(report.holdout, rows=losing))
    judged = reversed_.judgement()
    assert judged is not None and judged.on == "the held-out tail" and not judged.better
    assert judged.ratios[rival.name] == pytest.approx(found.tail / (rival.tail * 2))  # type: ignore[operator]
    (line,) = verdict(reversed_, "sqlite:///crucible.db")
    assert line.startswith(f"found nothing better than the best baseline on the held-out tail: {rival.name}")
