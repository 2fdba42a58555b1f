"""`crucible tune`: an Optuna study over a policy's PARAMS and the mechanism's knobs, run in the sandbox,
shared by processes through one storage, resumed by name, and recorded as a run of the store."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from in_process import InProcess

import targets
from sandbox.job import Job, Result
from search.cli.main import main
from search.errors import UserError
from search.service.runs import RunService, resolve
from search.store.readmodel import ReadModel
from search.store.store import Store, open_engine
from search.tune.study import Goal, Study, TuneSpec, knobs
from verifiers.static import check

SMALL = ["--target", "batching", "--set", "requests=0:40", "--sandbox", "process"]
"""Forty requests of the shipped trace: a trial is one short sandbox job."""


def tune(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    """`crucible tune` in a child process, as a user (or a second machine) starts it."""
    command = [
        sys.executable, "-m", "search.cli", "tune", *SMALL, *args, "--json",
        "--storage", f"sqlite:///{tmp_path / 'study.db'}", "--db", f"sqlite:///{tmp_path / 'runs.db'}",
    ]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen[str]) -> dict:
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err
    return json.loads(out)


def ran(tmp_path: Path, study: str) -> list[optuna.trial.FrozenTrial]:
    loaded = optuna.load_study(study_name=study, storage=f"sqlite:///{tmp_path / 'study.db'}")
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return loaded.get_trials(states=states)


def test_two_processes_sharing_a_storage_together_run_exactly_the_requested_trials(tmp_path: Path) -> None:
    first = tune(tmp_path, "--policy", "sarathi", "--trials", "5", "--study", "shared")
    second = tune(tmp_path, "--policy", "sarathi", "--trials", "5", "--study", "shared")
    reports = [finished(first), finished(second)]
    assert sum(r["trials_here"] for r in reports) == 5
    assert len(ran(tmp_path, "shared")) == 5
    run_id = reports[0]["run_id"]
    assert reports[1]["run_id"] == run_id  # one run of the store for the shared study
    read = ReadModel(Store(open_engine(f"sqlite:///{tmp_path / 'runs.db'}")))
    rows = [c for c in read.candidates(run_id) if not c.is_baseline]
    assert sorted(c.seq for c in rows) == [0, 1, 2, 3, 4]
    assert {c.proposer for c in rows} == {"tune"}


def test_a_trial_another_process_told_first_is_not_counted_here_and_the_run_goes_on(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    target = targets.load("batching")
    source = target.baselines()["sarathi"]
    workload, options = resolve(target, None, {"requests": "0:40"})
    goal = Goal.parse(target.objective.metric, target)
    spec = TuneSpec("batching", "sarathi", source, workload, options, (goal,), trials=3, storage=storage)

    class RacedOnce:
        """The sandbox, while another process pops the same enqueued first trial and tells it first (the job
        before it, the study's check of its goals, runs before the study exists)."""

        def __init__(self) -> None:
            self.jobs = 0

        def run(self, job: Job) -> Result:
            result = InProcess().run(job)
            self.jobs += 1
            if self.jobs == 2:
                other = optuna.load_study(study_name=spec.study_name(), storage=storage)
                (running,) = other.get_trials(states=(optuna.trial.TrialState.RUNNING,))
                other.tell(running.number, [0.5])
            return result

    service = RunService(Store(open_engine(f"sqlite:///{tmp_path / 'runs.db'}")))
    study = Study(spec, target, check(source, target.signatures), RacedOnce(), service)
    assert study.run() == 2, "the trial the other process told is not one of this process's"
    told = [t.values[0] for t in study.done()]
    assert len(told) == 3 and told[0] == 0.5, "the other's value stands; the study holds the requested three"


def test_rerunning_a_study_continues_it_up_to_the_requested_trials(tmp_path: Path) -> None:
    first = finished(tune(tmp_path, "--policy", "sarathi", "--trials", "2", "--study", "again"))
    second = finished(tune(tmp_path, "--policy", "sarathi", "--trials", "3", "--study", "again"))
    assert (first["trials_here"], second["trials_here"], second["trials_done"]) == (2, 1, 3)
    assert first["run_id"] == second["run_id"]
    info = ReadModel(Store(open_engine(f"sqlite:///{tmp_path / 'runs.db'}"))).run(first["run_id"])
    assert (info.status, info.done, info.best_baseline.name) == ("finished", 3, "sarathi (as configured)")


@pytest.mark.slow
def test_the_first_trial_is_the_policy_as_configured_and_the_gain_is_measured_against_it(
    tmp_path: Path,
) -> None:
    report = finished(tune(tmp_path, "--policy", "sarathi", "--trials", "3", "--seed", "1"))
    assert ran(tmp_path, report["study"])[0].params == {"token_budget": 512.0, "max_seqs": 256}
    assert report["configured"]["values"] == {"token_budget": 512.0, "max_seqs": 256}
    best, configured = report["front"][0], report["configured"]
    assert best["train"]["slo_attainment"] >= ran(tmp_path, report["study"])[0].value
    gain = best["eval"]["slo_attainment"] - configured["eval"]["slo_attainment"]
    assert report["gain"]["slo_attainment"] == pytest.approx(gain)


@pytest.mark.slow
def test_several_objectives_give_a_pareto_front_of_trials_none_dominates(tmp_path: Path) -> None:
    objectives = ["--objective", "slo_attainment", "--objective", "ttft_p99_ms"]
    report = finished(tune(tmp_path, "--policy", "sarathi", "--trials", "4", *objectives))
    assert [g["direction"] for g in report["goals"]] == ["maximize", "minimize"]
    front = [(p["train"]["slo_attainment"], p["train"]["ttft_p99_ms"]) for p in report["front"]]
    assert front
    for a in front:
        assert not any(b[0] >= a[0] and b[1] <= a[1] and b != a for b in front)
    every = [(t.values[0], t.values[1]) for t in ran(tmp_path, report["study"])]
    for a in front:  # the front is the non-dominated set of the whole study
        assert not any(b[0] >= a[0] and b[1] <= a[1] and b != a for b in every)


def test_the_recorded_run_carries_the_study_its_trials_and_the_same_front(tmp_path: Path) -> None:
    """What the UI's Study tab and `runs show --json` read: every trial on both objectives, the front as
    the tune command printed it, each front trial and the policy as configured scored on eval."""
    objectives = ["--objective", "ttft_p99_ms", "--objective", "tpot_p99_ms", "--set", "load=1.5"]
    report = finished(tune(tmp_path, "--policy", "fcfs", "--trials", "6", "--seed", "1", *objectives))
    read = ReadModel(Store(open_engine(f"sqlite:///{tmp_path / 'runs.db'}", create=False)))
    study = read.study(report["run_id"])
    assert study is not None and study.study == report["study"] and study.policy == "fcfs"
    assert study.objectives == {"ttft_p99_ms": "minimize", "tpot_p99_ms": "minimize"}
    trials = {t.number: t.values for t in ran(tmp_path, report["study"])}
    assert sorted(p.trial for p in study.points) == sorted(trials)
    for p in study.points:
        assert [p.train["ttft_p99_ms"], p.train["tpot_p99_ms"]] == pytest.approx(trials[p.trial])
    assert [p.trial for p in study.front()] == [p["number"] for p in report["front"]]
    for point, printed in zip(study.front(), report["front"], strict=True):
        assert point.eval == pytest.approx(printed["eval"]) and point.values == pytest.approx(
            printed["values"]
        )
    assert not any(p.eval for p in study.points if not p.front), "only the front is scored on eval"
    assert study.configured == pytest.approx(report["configured"]["eval"])
    assert study.configured_values == pytest.approx(report["configured"]["values"])
    info = read.run(report["run_id"])
    assert (info.objective, info.direction) == ("ttft_p99_ms", "minimize"), "the study's, not the target's"
    assert info.best is not None and info.best.score == min(p.eval["ttft_p99_ms"] for p in study.front())
    assert info.best_baseline is not None
    assert info.best_baseline.score == pytest.approx(study.configured["ttft_p99_ms"])
    shown = json.loads(_runs_show(tmp_path, report["run_id"], "--json"))
    assert [p["trial"] for p in shown["study"]["points"]] == [p.trial for p in study.points]
    text = _runs_show(tmp_path, report["run_id"])
    assert f"study {study.study}: Pareto front of {len(study.points)} trials" in text
    assert "ttft_p99_ms (minimize) of found" in text, "the ratios are in the study's objective"
    assert all(f"trial {p.trial} " in text for p in study.front())


def _runs_show(tmp_path: Path, run_id: str, *flags: str) -> str:
    command = [sys.executable, "-m", "search.cli", "runs", "show", run_id, *flags,
               "--db", f"sqlite:///{tmp_path / 'runs.db'}"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


@pytest.mark.slow
def test_on_the_shipped_batching_workload_tuning_beats_vllm_s_defaults(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "search.cli", "tune", "--target", "batching", "--policy", "fcfs",
               "--trials", "30", "--sandbox", "process", "--storage", f"sqlite:///{tmp_path / 's.db'}",
               "--db", f"sqlite:///{tmp_path / 'r.db'}", "--json"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["configured"]["values"] == {"token_budget": 2048, "max_seqs": 256}  # vLLM's defaults
    assert report["gain"]["slo_attainment"] > 0
    assert report["front"][0]["values"] != report["configured"]["values"]


def test_an_objective_states_its_direction_unless_the_target_or_its_unit_says_it() -> None:
    target = targets.load("batching")
    assert Goal.parse("slo_attainment", target).direction == "maximize"
    assert Goal.parse("ttft_p99_ms", target).direction == "minimize"
    assert Goal.parse("goodput_rps:max", target).direction == "maximize"
    with pytest.raises(UserError, match="goodput_rps:max or goodput_rps:min"):
        Goal.parse("goodput_rps", target)


def test_the_knobs_are_the_policy_params_then_the_declared_options_it_does_not_tune_itself() -> None:
    target = targets.load("batching")
    sarathi = check(target.baselines()["sarathi"], target.signatures)  # PARAMS token_budget
    fcfs = check(target.baselines()["fcfs"], target.signatures)  # no PARAMS
    assert [(k.name, k.kind) for k in knobs(target, fcfs)] == [
        ("token_budget", "option"),
        ("max_seqs", "option"),
    ]
    assert [(k.name, k.kind) for k in knobs(target, sarathi)] == [
        ("token_budget", "param"),
        ("max_seqs", "option"),
    ]
    max_seqs = knobs(target, fcfs)[1]
    assert (max_seqs.low, max_seqs.high, max_seqs.log, max_seqs.integer) == (1, 1024, True, True)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "nosuch"], "neither a baseline of batching"),
        (["--policy", "fcfs", "--trials", "0"], "--trials must be at least 1"),
        (["--policy", "fcfs", "--objective", "slo_attainment:up"], "slo_attainment:max"),
        (["--policy", "fcfs", "--storage", "redis://x"], "expected an RDB URL"),
        (["--policy", "fcfs", "--set", "max_seqs=0"], "max_seqs"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "tune",
                "--target",
                "batching",
                *args,
                "--db",
                f"sqlite:///{tmp_path / 'r.db'}",
                "--sandbox",
                "process",
            ]
        )
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2
    assert lines[-1].startswith("crucible: error: ") and message in lines[-1]


def test_a_timeout_leaves_a_finished_run_that_says_how_to_continue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, storage = f"sqlite:///{tmp_path / 'r.db'}", f"sqlite:///{tmp_path / 's.db'}"
    main(["tune", *SMALL, "--policy", "fcfs", "--trials", "3", "--timeout", "0.001", "--storage", storage,
          "--db", db, "--json"])  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert (report["trials_here"], report["trials_done"]) == (1, 1)  # the one started before the timeout
    info = ReadModel(Store(open_engine(db))).run(report["run_id"])
    assert (info.status, info.resumable) == ("finished", False)
    assert info.message == "1 of 3 trials; rerun crucible tune to continue"
    with pytest.raises(SystemExit) as exit_info:  # a study continues by rerunning tune, not as a search
        main(["search", "--resume", report["run_id"], "--db", db])
    assert exit_info.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == (
        f"crucible: error: run {report['run_id']} is a tune run, not a search: rerun the same "
        "`crucible tune` command to continue it"
    )


def test_a_trial_left_running_by_a_killed_process_is_failed_and_run_again(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="killed", storage=storage, direction="maximize")
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    orphan = study.ask()  # as a process killed mid-trial leaves it
    orphan.set_user_attr("pid", int(gone.stdout))
    orphan.set_user_attr("host", socket.gethostname())
    report = finished(tune(tmp_path, "--policy", "fcfs", "--trials", "2", "--study", "killed"))
    assert (report["trials_here"], report["trials_done"]) == (2, 2)
    states = [t.state for t in optuna.load_study(study_name="killed", storage=storage).trials]
    assert states[0] == optuna.trial.TrialState.FAIL
    assert states[1:] == [optuna.trial.TrialState.COMPLETE] * 2
