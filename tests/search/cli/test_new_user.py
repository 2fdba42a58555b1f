"""What a new user hits in the first hour (issue 11): relative paths, a budget of nothing, evaluating a file
that a property refutes, tables piped to a file, a killed run in the list."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import targets
from search.cli.main import main
from search.cli.render import metrics_table, show
from search.service.runs import RunService, prepare
from search.store.store import Store, open_engine
from targets.kv.target import shipped_workload_path

REFUTED = "def priority(b, p):\n    return b.hits / (b.depth - 3)\n"


def crucible(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "search.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, cwd=cwd)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A working folder other than the repository's, holding a small trace and a heuristic file."""
    head = shipped_workload_path().read_text().splitlines()[:200]
    (tmp_path / "trace.jsonl").write_text("\n".join(head) + "\n")
    (tmp_path / "mine.py").write_text(REFUTED)
    return tmp_path


SMALL = ["--workload", "trace.jsonl", "--capacity", "40", "--sandbox", "process", "--json"]


def test_eval_takes_relative_paths_and_warns_of_a_refuted_hard_property(folder: Path) -> None:
    done = crucible("eval", "mine.py", *SMALL, cwd=folder)
    assert done.returncode == 0, done.stderr  # a warning, not a failure: `crucible verify` is the check
    warnings = [line for line in done.stderr.splitlines() if line.startswith("crucible: warning: ")]
    assert any(
        "mine.py fails the hard property no-division-by-zero" in w and '"depth": 3.0' in w for w in warnings
    ), done.stderr
    result = json.loads(done.stdout)
    assert result["workload"] == str(folder / "trace.jsonl")
    assert result["refuted"][0]["property"] == "no-division-by-zero"
    assert result["metrics"]["block_hit_rate"] >= 0


@pytest.mark.slow
def test_baselines_take_a_relative_workload_from_any_folder(folder: Path) -> None:
    shown = crucible("baselines", *SMALL, cwd=folder)
    assert shown.returncode == 0, shown.stderr
    table = json.loads(shown.stdout)
    assert table["workload"] == str(folder / "trace.jsonl")
    assert table["baselines"]["belady"]["block_hit_rate"] > 0


def test_a_budget_below_one_is_refused_and_nothing_is_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    for budget in ("0", "-3"):
        with pytest.raises(SystemExit) as exit_info:
            main(["search", "--workload", "gen:chat:1", "--budget", budget, "--db", f"sqlite:///{db}"])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err == f"crucible: error: --budget must be a whole number of at least 1, got {budget}"
    assert not db.exists()


def test_piped_tables_are_never_cut_and_counts_are_whole_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    batching = targets.load("batching")
    metrics = {name: 1234.5678 for name in batching.report_metrics} | {"preemptions": 17.0}
    show(metrics_table("baselines on a long instance name", {"sarathi": metrics, "fcfs": metrics}, batching))
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "ttft_p50_ms" in line)
    for name in batching.report_metrics:
        assert name in header, f"{name} cut: {header}"
    assert "…" not in out
    rows = [line for line in out.splitlines() if "sarathi" in line]
    assert rows and rows[0].rstrip(" │┃").split()[-1] == "17"


def test_a_killed_run_shows_as_interrupted_with_how_to_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    runs = RunService(Store(open_engine(url)))
    info = runs.record(prepare("kv", "gen:chat:1", {"capacity": 300}, budget=3))
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    runs.store.start_run(info.run_id, int(gone.stdout), socket.gethostname())
    main(["runs", "list", "--db", url])
    out = capsys.readouterr().out
    assert f"interrupted (resume with: crucible search --resume {info.run_id} --db {url})" in out
    main(["runs", "list", "--db", url, "--json"])
    listed = json.loads(capsys.readouterr().out)
    assert (listed[0]["status"], listed[0]["resumable"]) == ("interrupted", True)
    main(["runs", "stop", info.run_id, "--db", url, "--json"])
    stopped = json.loads(capsys.readouterr().out)
    assert (stopped["status"], stopped["resumable"]) == ("stopped", True)
