"""`crucible validate --target serving --against SYSTEM`: a real router process in front of recording
backends, replayed in lockstep with the simulated fleet; here the router Crucible exports, which needs
nothing beyond the test extras (the real sglang-router is checked in tests/engines)."""

from __future__ import annotations

import json

import pytest

from search.cli import main


def validate(capsys: pytest.CaptureFixture[str], *flags: str) -> dict:
    main(["validate", "--target", "serving", *flags, "--json"])
    return json.loads(capsys.readouterr().out)


def test_the_exported_sglang_program_decides_as_the_simulator(capsys: pytest.CaptureFixture[str]) -> None:
    shown = validate(capsys, "--against", "exported-router", "--requests", "0:120", "--instances", "4")
    (row,) = shown["policies"]
    assert row["baseline"] == "sglang_cache_aware" and row["requests"] == 120
    assert row["agreed"] == 1.0 and row["exact"] == 1.0
    assert row["hit_rate_router"] == row["hit_rate_simulator"]


def test_a_program_that_reads_queues_decides_as_the_simulator(
    capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    program = tmp_path / "queues.py"
    program.write_text(
        '"""Fewest waiting, then fewest running, from the backends\' metrics."""\n\n\n'
        "def route(s, p):\n    return -s.queued - 0.01 * s.running - 0.001 * s.kv_used\n\n\n"
        "def priority(r, p):\n    return r.waiting\n\n\ndef evict(b, p):\n    return b.last_access\n"
    )
    shown = validate(capsys, "--against", "exported-router", "--requests", "0:120", "--program", str(program))
    assert shown["policies"][0]["agreed"] == 1.0


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--target", "serving", "--against", "nosuch"], "is not checked against 'nosuch'"),
        (["--target", "kv", "--against", "sglang-router"], "is not checked against 'sglang-router'"),
        (["--target", "serving"], "needs --candidates"),
        (["--target", "serving", "--against", "exported-router", "--requests", "9:3"], "option requests"),
        (["--target", "serving", "--against", "exported-router", "--program", "no.py"], "no such heuristic"),
        (["--target", "serving", "--against", "exported-router", "--program", "/dev/zero"], "not a regular"),
    ],
)
def test_a_wrong_request_is_one_line(capsys: pytest.CaptureFixture[str], flags: list[str], said: str) -> None:
    with pytest.raises(SystemExit) as done:
        main(["validate", *flags])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
