"""What the Launch page starts: the `crucible search` command line its form stands for, detached, logged."""

from __future__ import annotations

import sys
from pathlib import Path

from ui import launcher


def test_the_form_becomes_the_search_flags() -> None:
    settings = launcher.SearchSettings(
        target="kv",
        workload="trace.jsonl",
        options={"capacity": 4000, "flag": True},
        budget=40,
        proposer="llm",
        sandbox="process",
        models=("alpha", "beta:0.5"),
        base_url="http://127.0.0.1:8000/v1",
        api_key_env="MY_KEY",
        prices=("alpha=1,2",),
        max_cost_usd=2.0,
    )
    argv = launcher.search_argv("sqlite:///runs.db", settings)
    assert argv[:3] == [sys.executable, "-m", "search.cli"]
    words = " ".join(argv[3:])
    assert words == (
        "search --db sqlite:///runs.db --target kv --budget 40 --workload trace.jsonl"
        " --set capacity=4000 --set flag=true --proposer llm --sandbox process"
        " --seed 0 --trials 32 --workers 2"
        " --model alpha --model beta:0.5 --base-url http://127.0.0.1:8000/v1 --api-key-env MY_KEY"
        " --price alpha=1,2 --max-cost-usd 2.0"
    )


def test_a_holdout_and_where_to_rank_become_their_flags_and_the_defaults_none() -> None:
    plain = launcher.SearchSettings(target="kv", workload=None, options={}, budget=5)
    assert "--holdout" not in launcher.search_argv("sqlite:///runs.db", plain)
    assert "--select" not in launcher.search_argv("sqlite:///runs.db", plain)
    held = launcher.SearchSettings(
        target="kv", workload=None, options={}, budget=5, holdout=0.33, select="unseen"
    )
    assert " ".join(launcher.search_argv("sqlite:///runs.db", held)).endswith(
        "--workers 2 --holdout 0.33 --select unseen"
    )


def test_resume_is_the_stored_run_continued() -> None:
    argv = launcher.resume_argv("sqlite:///runs.db", "abc123")
    assert argv[3:] == ["search", "--db", "sqlite:///runs.db", "--resume", "abc123"]


def test_logs_and_uploads_sit_beside_a_sqlite_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    assert launcher.beside_store(url, "logs") == tmp_path / "runs.db.logs"
    kept = launcher.keep_upload(url, "../../trace.jsonl", b'{"x": 1}\n')
    assert kept.parent == tmp_path / "runs.db.uploads" and kept.name.endswith("-trace.jsonl")
    assert kept.read_bytes() == b'{"x": 1}\n'


def test_a_started_process_logs_beside_the_store_and_its_error_line_is_read(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    code = (
        "import sys; print('progress'); print('crucible: error: no such trace', file=sys.stderr); sys.exit(2)"
    )
    started = launcher.start([sys.executable, "-c", code], url)
    assert started.process.wait(timeout=30) == 2
    assert started.log.parent == tmp_path / "runs.db.logs"
    assert launcher.error_line(started.log) == "no such trace"
