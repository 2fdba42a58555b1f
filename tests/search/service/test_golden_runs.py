"""The same seed and settings give the same run, candidate by candidate: a search, a tune study and a CI job,
each compared with what it stored when the golden files were recorded (before the run service's redesign).

Set CRUCIBLE_RECORD_GOLDEN=1 to write the files again; a change of behaviour must be a decision, never a
side effect of moving code.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

GOLDEN = Path(__file__).with_name("golden")
RECORD = os.environ.get("CRUCIBLE_RECORD_GOLDEN") == "1"
CI_CONFIG = """
[store]
url = "sqlite:///runs.db"

[sandbox]
backend = "process"

[search]
budget = 3
trials = 2
workers = 2

[thresholds]
alert = 0.02
fail = 0.05
margin = 0.01

[options.kv]
capacity = 300

[[workloads]]
name = "chat"
target = "kv"
path = "gen:chat:1"

[[champions]]
name = "evictor"
target = "kv"
file = "policies/evictor.py"
baseline = "lru"
"""
CHAMPION = '"""LRU: evict the least recent leaf."""\n\n\ndef priority(b, p):\n    return b.last_access\n'


def crucible(*args: str, cwd: Path) -> None:
    command = [sys.executable, "-m", "search.cli", *args]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr


def _score(value: float | None) -> float | None:
    """Scores to 9 significant digits: the same arithmetic, whatever the last bit of a float sum."""
    return None if value is None else float(f"{value:.9g}")


def candidates(db: Path) -> list[list[dict[str, Any]]]:
    """Every run's candidates, runs in the order they were made, each as the golden file keeps it."""
    with sqlite3.connect(db) as connection:
        runs = [r for (r,) in connection.execute("select id from run order by created_at, id")]
        found = []
        for run in runs:
            rows = connection.execute(
                "select c.seq, c.name, c.status, c.score, c.train_score, c.fingerprint, c.island, c.params, "
                "p.seq from candidate c left join candidate p on p.id = c.parent_id "
                "where c.run_id = ? order by c.seq",
                (run,),
            ).fetchall()
            found.append(
                [
                    {
                        "seq": seq,
                        "name": name,
                        "status": status,
                        "score": _score(score),
                        "train_score": _score(train),
                        "fingerprint": mark,
                        "island": island,
                        "params": {k: _score(v) for k, v in json.loads(params).items()},
                        "parent": parent,
                    }
                    for seq, name, status, score, train, mark, island, params, parent in rows
                ]
            )
    return found


def same_as_golden(name: str, found: list[list[dict[str, Any]]]) -> None:
    path = GOLDEN / f"{name}.json"
    if RECORD:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    assert found == json.loads(path.read_text())


def test_a_search_stores_the_same_candidates_as_when_recorded(tmp_path: Path) -> None:
    crucible(
        "search", "--workload", "gen:chat:1", "--capacity", "300", "--budget", "6", "--trials", "3",
        "--seed", "3", "--sandbox", "process", "--db", "sqlite:///runs.db", cwd=tmp_path,
    )  # fmt: skip
    same_as_golden("search", candidates(tmp_path / "runs.db"))


def test_a_tune_study_stores_the_same_trials_as_when_recorded(tmp_path: Path) -> None:
    crucible(
        "tune", "--target", "batching", "--set", "requests=0:40", "--sandbox", "process", "--policy",
        "sarathi", "--trials", "4", "--seed", "2", "--storage", "sqlite:///study.db", "--db",
        "sqlite:///runs.db", cwd=tmp_path,
    )  # fmt: skip
    same_as_golden("tune", candidates(tmp_path / "runs.db"))


def test_a_ci_job_stores_the_same_runs_as_when_recorded(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies/evictor.py").write_text(CHAMPION)
    (tmp_path / "crucible.toml").write_text(CI_CONFIG)
    crucible("ci", "--output", "reports", cwd=tmp_path)
    same_as_golden("ci", candidates(tmp_path / "runs.db"))


@pytest.mark.parametrize("name", ["search", "tune", "ci"])
def test_each_golden_file_holds_runs_with_candidates(name: str) -> None:
    runs = json.loads((GOLDEN / f"{name}.json").read_text())
    assert runs and all(runs), "a golden file of no candidates would compare nothing"
