"""What a new user met in the third hour, each a command that now ends in one line on stderr with the
documented exit code (2: a bad argument or input), or works: absurd sizes that once crashed native code,
files that are not what they claim, stores that are not Crucible's, work thrown away after an hour, and
messages that named values the user never typed."""

from __future__ import annotations

import os
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from search.cli.main import main
from search.service import open_service
from search.store.migrate import head
from search.tune.study import Goal
from targets.batching import BatchingTarget

CRUCIBLE = [sys.executable, "-m", "search.cli"]


def one_line(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """The exit code and the one line on stderr a command ends with (asserted to be one line)."""
    try:
        main(list(argv))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("sandbox:")]
    assert len(lines) == 1, lines
    return code, lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["baselines", "--capacity", "4611686018427387904"],
        ["eval", "POLICY", "--set", "capacity=9223372036854775807"],
        ["eval", "POLICY", "--set", "capacity=99999999999999999999"],
        ["search", "--set", "capacity=1099511627776", "--budget", "1"],
        ["baselines", "--target", "kv-tiered", "--set", "host_capacity=9223372036854775807"],
    ],
)
def test_a_size_no_machine_holds_is_one_line_naming_the_option_not_a_native_crash(
    argv: list[str], tmp_path: Path
) -> None:
    policy = tmp_path / "lru.py"
    policy.write_text('"""LRU."""\n\n\ndef priority(b, p):\n    return b.last_access\n')
    words = [str(policy) if w == "POLICY" else w for w in argv]
    done = subprocess.run(
        [*CRUCIBLE, *words, "--db", f"sqlite:///{tmp_path / 'runs.db'}", "--sandbox", "process"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()[-1:]
    assert line.startswith("crucible: error: option ") and "capacity" in line and "1e+12" in line, line


def test_a_cache_larger_than_the_trace_runs_and_says_it_never_fills(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["baselines", "--capacity", "1000000000", "--workload", "gen:chat:1", "--sandbox", "process"])
    assert "holds all" in capsys.readouterr().out.replace("\n", " ")


def test_batching_sizes_past_what_the_window_uses_run_as_the_window_allows() -> None:
    target = BatchingTarget()
    huge = {"max_seqs": 10**12, "token_budget": 10**12, "requests": "0:40"}
    (evaluated,) = [
        i for i in target.instances(target.default_config()["workload"], huge) if i.role == "eval"
    ]
    from targets.batching.target import instance_limits

    limits = instance_limits(evaluated)
    assert limits.max_seqs == 40 and limits.token_budget < 10**7


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: os.mkfifo(p), "a FIFO, not a regular trace file"),
        (lambda p: p.symlink_to("/dev/zero"), "a device, not a regular trace file"),
        (lambda p: p.write_bytes(bytes(range(128, 256)) * 8), "not valid UTF-8"),
    ],
)
def test_a_file_that_is_not_a_trace_is_one_line(
    make: object, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.jsonl"
    make(trace)  # type: ignore[operator]
    code, line = one_line(capsys, "baselines", "--workload", str(trace))
    assert code == 2 and says in line, line


def test_a_binary_profile_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "profile.json"
    profile.write_bytes(bytes(range(256)) * 8)
    code, line = one_line(capsys, "baselines", "--set", f"profile={profile}")
    assert code == 2 and "not a profile file (not UTF-8 text)" in line, line


def test_a_trace_too_large_for_the_memory_the_process_may_hold_is_one_line(tmp_path: Path) -> None:
    trace = tmp_path / "huge.jsonl"
    with trace.open("wb") as out:  # sparse: 3 GiB that take no room on disk
        out.truncate(3 * 2**30)

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))

    done = subprocess.run(
        [*CRUCIBLE, "baselines", "--workload", str(trace)],
        capture_output=True, text=True, timeout=120, check=False, preexec_fn=limited,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "more than this process can parse in its memory" in done.stderr.splitlines()[-1]


def _bytes(path: Path) -> bytes:
    return path.read_bytes()


def test_a_store_written_by_a_newer_crucible_is_refused_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "newer.db"
    open_service(f"sqlite:///{db}")
    with sqlite3.connect(db) as connection:
        connection.execute("update crucible_schema_version set version_num = '0099'")
    before = _bytes(db)
    code, line = one_line(capsys, "runs", "list", "--db", f"sqlite:///{db}")
    assert code == 2 and f"written by a newer Crucible: schema 0099; this one knows up to {head()}" in line
    assert _bytes(db) == before


@pytest.mark.parametrize(
    ("tables", "says"),
    [
        ("create table run (id integer, name text); create table users (id integer)", "Crucible never makes"),
        ("create table run (id integer, name text)", "its table run is another's"),
    ],
)
def test_another_applications_database_is_refused_and_left_byte_for_byte(
    tables: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "theirs.db"
    with sqlite3.connect(db) as connection:
        connection.executescript(tables)
    before = _bytes(db)
    code, line = one_line(capsys, "runs", "list", "--db", f"sqlite:///{db}")
    assert code == 2 and "not a Crucible store" in line and says in line, line
    assert _bytes(db) == before


def test_an_empty_file_becomes_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    main(["runs", "list", "--db", f"sqlite:///{db}", "--json"])
    assert capsys.readouterr().out.strip() == "[]"


def test_a_run_of_a_target_not_installed_lists_with_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    service = open_service(url)
    kept = service.create("kv", "gen:chat:1", {"capacity": 100}, budget=1)
    gone = service.create("kv", "gen:chat:1", {"capacity": 100}, budget=1)
    with sqlite3.connect(tmp_path / "runs.db") as connection:
        connection.execute("update run set target = 'toy' where id = ?", (gone.run_id,))
    main(["runs", "list", "--db", url])
    listed = capsys.readouterr().out
    assert kept.run_id in listed and gone.run_id in listed
    main(["runs", "show", gone.run_id, "--db", url, "--json"])
    assert "target 'toy' is not installed here" in capsys.readouterr().out


def test_a_ci_output_that_cannot_be_written_fails_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "lru.py").write_text('"""LRU."""\n\n\ndef priority(b, p):\n    return b.last_access\n')
    config = tmp_path / "crucible.toml"
    config.write_text(
        '[store]\nurl = "sqlite:///runs.db"\n\n[[workloads]]\nname = "chat"\ntarget = "kv"\n'
        'path = "gen:chat:1"\n\n[[champions]]\nname = "lru"\ntarget = "kv"\nfile = "lru.py"\n'
    )
    taken = tmp_path / "a-file"
    taken.write_text("mine")
    code, line = one_line(capsys, "ci", "--config", str(config), "--output", str(taken))
    assert code == 2 and line == f"crucible: error: --output {taken}: a file, not a folder for the reports"
    assert not (tmp_path / "runs.db").exists(), "nothing ran, nothing was stored"


def test_a_tune_metric_the_target_lacks_leaves_no_study(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = tmp_path / "study.db"
    code, line = one_line(
        capsys, "tune", "--target", "batching", "--policy", "fcfs", "--set", "requests=0:40",
        "--objective", "speed:max", "--trials", "2", "--sandbox", "process",
        "--db", f"sqlite:///{tmp_path / 'runs.db'}", "--storage", f"sqlite:///{storage}",
    )  # fmt: skip
    assert code == 2 and "--objective speed: batching reports no such metric" in line
    assert not storage.exists()


def test_a_tune_gain_is_signed_by_the_metrics_direction() -> None:
    assert Goal("ttft_p99_ms", "minimize").gain(before=100.0, after=80.0) == 20.0
    assert Goal("slo_attainment", "maximize").gain(before=0.8, after=0.7) == pytest.approx(-0.1)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["baselines", "--workload", "gen:chat:abc"], "gen:chat:abc: the seed must be a whole number from 0"),
        (["baselines", "--workload", "gen:chat:-1"], "gen:chat:-1: the seed must be a whole number from 0"),
        (["baselines", "--workload", "gen:blog:1"], "gen:blog:1: no generator 'blog'; the kinds are chat"),
        (
            ["search", "--holdout", "0.5", "--set", "requests=0:3", "--budget", "1"],
            "--holdout 0.5 of requests 0:3 leaves the head 0:1: --select unseen: nothing is left",
        ),
        (
            [
                "dit",
                "plan",
                "--model",
                "flux.1-dev",
                "--gpus",
                "1",
                "--height",
                "16384",
                "--width",
                "16384",
                "--topology",
                "h100-nvlink",
            ],
            "GPU counts with a valid plan: 2, 3, 4, 6, 8",
        ),
    ],
)
def test_a_message_says_what_was_typed_and_what_was_derived_from_it(
    argv: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, line = one_line(
        capsys, *argv, *(["--db", f"sqlite:///{tmp_path / 'r.db'}"] if argv[0] == "search" else [])
    )
    assert code == 2 and says in line, line


def test_the_top_level_error_lists_every_command_the_targets_own_groups_too(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, line = one_line(capsys, "nosuch")
    assert code == 2 and "'dit'" in line and "'kv-tiered'" in line and "'export'" in line
