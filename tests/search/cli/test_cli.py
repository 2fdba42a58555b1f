"""The `crucible` command line, end to end: what a user types, what comes back, what is stored."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import targets
from search.cli.main import main
from search.store.readmodel import ReadModel
from search.store.store import Store, open_engine

WORKLOAD = ["--workload", "gen:chat:1", "--capacity", "300"]


def crucible(*args: str, db: Path) -> subprocess.CompletedProcess[str]:
    """Run the installed command line as a user would, in a child process."""
    command = [sys.executable, "-m", "search.cli", *args, "--db", f"sqlite:///{db}"]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)


def error_line(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    err = capsys.readouterr().err.strip().splitlines()
    return int(exit_info.value.code or 0), err[-1] if err else ""


def stored(db: Path, query: str) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


def test_search_reports_the_best_candidate_against_every_baseline(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    done = crucible("search", *WORKLOAD, "--budget", "6", "--trials", "2", "--seed", "3", "--json", db=db)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["status"] == "finished"
    names = {b["name"] for b in summary["baselines"]}
    assert {"lru", "fifo", "lfu", "slru", "gdsf", "s3fifo", "sieve", "belady"} <= names
    best = summary["best"]
    assert best["metrics"]["block_hit_rate"] > 0
    assert {"block_hit_rate", "token_hit_rate", "gap_closed"} <= set(best["metrics"])
    spent = sum(n for status, n in summary["counts"].items() if status != "duplicate")
    assert spent == 6, "a behavioural duplicate spends none of the budget"
    assert any(f"sandbox: {backend} (" in done.stderr for backend in ("docker", "process"))

    written = tmp_path / "best.py"
    assert crucible("runs", "best", summary["run_id"], "--output", str(written), db=db).returncode == 0
    evaluated = crucible("eval", str(written), *WORKLOAD, "--json", db=db)
    assert evaluated.returncode == 0, evaluated.stderr
    again = json.loads(evaluated.stdout)
    assert again["params"] == pytest.approx(best["params"])
    assert again["metrics"]["block_hit_rate"] == pytest.approx(best["metrics"]["block_hit_rate"])

    listed = json.loads(crucible("runs", "list", "--json", db=db).stdout)
    assert [r["run_id"] for r in listed] == [summary["run_id"]]
    shown = json.loads(crucible("runs", "show", summary["run_id"], "--json", db=db).stdout)
    assert shown["best"]["candidate_id"] == best["candidate_id"]
    read = ReadModel(Store(open_engine(f"sqlite:///{db}", create=False)))
    assert shown == json.loads(json.dumps(read.report(summary["run_id"]).to_json())), "the read model's data"
    assert shown == summary, "search --json prints the same report"


def test_baselines_name_each_metric_per_policy(tmp_path: Path) -> None:
    done = crucible("baselines", *WORKLOAD, "--json", db=tmp_path / "runs.db")
    assert done.returncode == 0, done.stderr
    table = json.loads(done.stdout)["baselines"]
    assert table["belady"]["block_hit_rate"] >= max(m["block_hit_rate"] for m in table.values()) - 1e-12
    assert all("token_hit_rate" in metrics for metrics in table.values())


def test_a_killed_search_resumes_without_repeating_or_losing_a_candidate(tmp_path: Path) -> None:
    args = ["search", *WORKLOAD, "--budget", "10", "--trials", "2", "--seed", "5", "--json"]
    whole = tmp_path / "whole.db"
    assert crucible(*args, db=whole).returncode == 0

    killed = tmp_path / "killed.db"
    command = [sys.executable, "-m", "search.cli", *args, "--db", f"sqlite:///{killed}"]
    child = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if killed.exists() and _proposed(killed) >= 4:
            break
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    assert 4 <= _proposed(killed) < 10, "the kill must land mid-run"
    (run_id,) = stored(killed, "select id from run")[0]
    listed = crucible("runs", "list", db=killed)
    resume = f"crucible search --resume {run_id} --db sqlite:///{killed}"
    assert f"interrupted (resume with: {resume})" in listed.stdout, "the command names the store it needs"

    resumed = crucible("search", "--resume", run_id, "--json", db=killed)
    assert resumed.returncode == 0, resumed.stderr
    assert re.search(rf"resuming run {run_id}: \d of 10 candidates done", resumed.stderr), resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "finished"

    query = "select fingerprint from candidate where proposer != 'baseline' order by seq"
    spent = "select count(*) from candidate where proposer != 'baseline' and status != 'duplicate'"
    assert stored(killed, spent) == [(10,)], "behavioural duplicates spend none of the budget"
    assert len(set(stored(killed, query))) == len(stored(killed, query)), "no duplicates"
    assert stored(killed, "select count(*) from candidate where status = 'pending'") == [(0,)]
    assert set(stored(killed, query)) == set(stored(whole, query)), "the same candidates as an unbroken run"
    baselines = len(targets.load("kv").baselines())
    assert stored(killed, "select count(*) from candidate where proposer = 'baseline'") == [(baselines,)]


def _proposed(db: Path) -> int:
    try:
        rows = stored(
            db, "select count(*) from candidate where proposer != 'baseline' and status != 'pending'"
        )
    except sqlite3.OperationalError:
        return 0
    return int(rows[0][0])


def test_bad_input_ends_in_one_line_and_keeps_what_is_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    first = crucible("search", *WORKLOAD, "--budget", "2", "--trials", "1", "--json", db=db)
    assert first.returncode == 0, first.stderr
    before = stored(db, "select id, status from run"), stored(db, "select count(*) from candidate")
    url = f"sqlite:///{db}"

    malformed = tmp_path / "bad.jsonl"
    malformed.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n{oops\n')
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    outside = tmp_path / "evil.py"
    outside.write_text("import os\n\ndef priority(b, p):\n    return os.getpid()\n")

    cases = {
        "line 2": ["search", "--workload", str(malformed), "--capacity", "10", "--db", url],
        "no requests": ["baselines", "--workload", str(empty), "--capacity", "10", "--db", url],
        "[no-imports]": ["eval", str(outside), *WORKLOAD, "--db", url],
        "option capacity must lie in [1, 1e+12], got 0": ["search", "--capacity", "0", "--db", url],
        "does not exist": ["search", *WORKLOAD, "--db", f"sqlite:///{tmp_path}/missing/dir/runs.db"],
        f"not a store URL; a SQLite file is sqlite:///{db}": ["runs", "list", "--db", str(db)],
        "no such trace file": ["search", "--workload", str(tmp_path / "nope.jsonl"), "--db", url],
        "no run": ["runs", "show", "nosuchrun", "--db", url],
    }
    for expected, args in cases.items():
        code, line = error_line(capsys, *args)
        assert code != 0
        assert line.startswith("crucible: error: ") and expected in line, (expected, line)
    assert (stored(db, "select id, status from run"), stored(db, "select count(*) from candidate")) == before
