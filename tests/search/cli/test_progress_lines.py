"""A run's progress where stderr is no terminal (a log, a CI job): a plain line at most every LINE_EVERY_S
seconds, since a bar cannot redraw there."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from search.cli import progress


def test_a_log_gets_a_plain_line_at_most_every_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([0.0, 0.0, 10.0, 31.0, 40.0, 62.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    log = io.StringIO()
    bar = progress.Bar(Console(file=log, force_terminal=False, width=200))
    bar.started("abc", 0, 10)
    for done, best in [(1, None), (2, 0.5), (3, 0.5), (4, 0.75)]:
        bar.candidate(done, 10, best, "ran")
    bar.stop()
    lines = [line for line in log.getvalue().splitlines() if line.startswith("run abc:")]
    assert lines == [
        "run abc: 2/10 done, 0:31, best found 0.5000",
        "run abc: 4/10 done, 1:02, best found 0.7500",
    ]
