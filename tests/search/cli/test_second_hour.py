"""What a new user still hit in the second hour (issue 39): each ends in one line on stderr and the
documented exit code, loses nothing stored, and says what the user can do next."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox.process import ProcessSandbox
from search.cli.main import main
from search.loop.search import Reporter
from search.proposers.base import Proposal, ProposalRequest
from search.service import open_service, prepare

TINY = [
    "--workload",
    "gen:chat:1",
    "--capacity",
    "300",
    "--trials",
    "1",
    "--workers",
    "1",
    "--sandbox",
    "process",
]
WORSE = '"""MRU: evict the most recent leaf."""\n\n\ndef priority(b, p):\n    return -b.last_access\n'


def one_line(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return int(exit_info.value.code or 0), err[0]


def runs_in(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute("select id, status, config from run").fetchall()


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A finished search of two candidates: its store URL and run id."""
    url = f"sqlite:///{tmp_path_factory.mktemp('runs') / 'runs.db'}"
    service = open_service(url)
    info = service.record(prepare("kv", "gen:chat:1", {"capacity": 300}, budget=2, trials=1, workers=1))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "search.cli",
            "search",
            "--resume",
            info.run_id,
            "--db",
            url,
            "--sandbox",
            "process",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return url, info.run_id


def test_a_resume_raises_the_budget_it_is_given_and_refuses_the_runs_own_settings(
    searched: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, run_id = searched
    code, line = one_line(capsys, "search", "--resume", run_id, "--seed", "4", "--db", url)
    assert code == 2
    own = "a resumed run keeps it (start a new search to change it)"
    assert line == f"crucible: error: --seed is run {run_id}'s own setting; {own}"
    code, line = one_line(capsys, "search", "--resume", run_id, "--capacity", "20", "--db", url)
    assert code == 2 and "--capacity is run" in line
    main(["search", "--resume", run_id, "--budget", "3", "--db", url, "--sandbox", "process", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["config"]["budget"] == 3 and report["done"] == 3, "resuming with --budget sets it"
    events = open_service(url, create=False).read.events(run_id)
    assert any(e.kind == "config" and '"budget": 3' in e.message for e in events), "the change is logged"


def _ignoring_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_an_interrupted_run_says_how_to_resume_it_in_its_own_store(tmp_path: Path) -> None:
    """Even started ignoring SIGINT, as a script's background job is, a run stops on one (the UI's Stop)."""
    url = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    command = [sys.executable, "-m", "search.cli", "search", *TINY, "--budget", "50", "--db", url]
    child = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=_ignoring_interrupts
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (tmp_path / "elsewhere.db").exists():
        time.sleep(0.2)
    time.sleep(5)
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=300)
    assert child.returncode == 130
    ((run_id, status, _),) = runs_in(tmp_path / "elsewhere.db")
    assert status == "stopped"
    assert err.strip().splitlines()[-1] == (
        f"crucible: error: interrupted; resume with: crucible search --resume {run_id} --db {url}"
    )


@pytest.mark.parametrize("command", [["targets", "show", "kv", "--json"], ["targets", "list"]])
def test_output_piped_into_a_reader_that_left_ends_quietly(command: list[str]) -> None:
    """`crucible ... | head`: what head did not read is dropped without a word, plain or rendered output."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first write
    done = subprocess.run(
        [sys.executable, "-m", "search.cli", *command], stdout=write, stderr=subprocess.PIPE, text=True
    )
    os.close(write)
    assert done.stderr == ""
    assert done.returncode != 0


def test_a_store_password_is_never_echoed(capsys: pytest.CaptureFixture[str]) -> None:
    url = "postgresql+psycopg://someone:hunter2@127.0.0.1:9/db"
    code, line = one_line(capsys, "runs", "list", "--db", url)
    assert code == 2 and "hunter2" not in line and "someone:***@127.0.0.1" in line


def test_a_folder_given_as_the_workload_is_named_as_a_folder(tmp_path: Path, capsys) -> None:
    code, line = one_line(
        capsys, "baselines", "--workload", str(tmp_path), "--db", f"sqlite:///{tmp_path}/x.db"
    )
    assert code == 2 and line.endswith(f"{tmp_path}: a folder, not a trace file; give one of the files in it")


def test_a_target_commands_bool_flag_takes_a_value_or_none(capsys: pytest.CaptureFixture[str]) -> None:
    for flags in (["--list"], ["--list", "true"]):
        main(["dit", "plan", *flags, "--json"])
        assert json.loads(capsys.readouterr().out)["models"], flags
    code, line = one_line(capsys, "dit", "plan", "--list", "maybe")
    assert code == 2 and "expects true or false, got 'maybe'" in line


def test_a_gpu_count_no_plan_can_use_is_one_line_not_an_empty_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, line = one_line(
        capsys, "dit", "plan", "--model", "flux.1-dev", "--gpus", "5", "--topology", "h100-nvlink"
    )
    assert code == 2 and line.startswith("crucible: error: no valid plan of flux.1-dev on 5 GPUs: ")


class Writes:
    """A proposer that writes one program, MRU, worse than LRU on any cache that reuses."""

    name = "scripted"
    concurrency = 1

    def propose(self, request: ProposalRequest) -> Proposal:
        return Proposal(WORSE, self.name)


class Bests(Reporter):
    def __init__(self) -> None:
        self.best: list[float | None] = []

    def candidate(self, done: int, budget: int, best: float | None, status: str) -> None:
        self.best.append(best)


def test_a_search_that_beats_no_baseline_says_so_and_its_progress_shows_the_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    service = open_service(url)
    info = service.record(prepare("kv", "gen:chat:1", {"capacity": 300}, budget=1, trials=1, workers=1))
    progress = Bests()
    report = service.execute(info.run_id, ProcessSandbox(), Writes(), progress)
    assert report.best is not None and report.run.best_baseline is not None
    assert report.best.score < report.run.best_baseline.score
    assert progress.best == [report.best.score], "the bar's best is the table's found, not a baseline"
    main(["runs", "show", info.run_id, "--db", url])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    rival = report.run.best_baseline
    assert last.startswith(f"found nothing better than the best baseline: {rival.name} {rival.score:.4f}")
    assert "best heuristic" not in last


def test_every_front_end_names_a_candidate_by_its_number(searched: tuple[str, str], capsys) -> None:
    url, run_id = searched
    main(["runs", "show", run_id, "--db", url, "--json"])
    best = json.loads(capsys.readouterr().out)["best"]
    assert best["label"] == f"#{best['seq']}"
    main(["runs", "show", run_id, "--db", url])
    assert f"found #{best['seq']}" in capsys.readouterr().out
    main(["verify", "--run", run_id, "--candidate", str(best["seq"]), "--db", url, "--json"])
    assert json.loads(capsys.readouterr().out)["file"] == f"run {run_id} candidate #{best['seq']}"


def test_eval_with_tune_says_what_it_tuned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mine.py").write_text(
        '"""Recency and hits."""\nPARAMS = {"w": (0.0, 8.0)}\n\n\ndef priority(b, p):\n'
        "    return b.last_access + p.w * b.hits\n"
    )
    main(["eval", str(tmp_path / "mine.py"), *TINY, "--tune", "--trials", "2"])
    out = capsys.readouterr().out
    assert "tuned 1 PARAMS over 2 trials on gen:chat:1@300[:" in out and '"w": ' in out
    (tmp_path / "plain.py").write_text(WORSE)
    main(["eval", str(tmp_path / "plain.py"), *TINY, "--tune"])
    assert "has no PARAMS to tune; evaluated as written" in capsys.readouterr().out


def test_an_interrupted_tune_says_rerunning_continues_it(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "search.cli", "tune", "--target", "batching", "--set", "requests=0:40",
        "--policy", "fcfs", "--trials", "200", "--sandbox", "process",
        "--storage", f"sqlite:///{tmp_path / 'study.db'}", "--db", f"sqlite:///{tmp_path / 'runs.db'}",
    ]  # fmt: skip
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert child.stderr is not None
    for line in child.stderr:  # the first trial done: the study exists
        if line.startswith("trial 1 here"):
            break
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=300)
    assert child.returncode == 130
    last = err.strip().splitlines()[-1]
    assert last.startswith("crucible: error: interrupted; study tune-batching-fcfs-")
    assert last.endswith(": rerun the same command to continue it")
