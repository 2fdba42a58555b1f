"""Every option of every registered target, fed the extreme values of its type: the command ends in one line
on stderr naming the option with exit 2, or with a result. Never a signal, a traceback, or a message that
does not say which option (a capacity of 2^63 once reached compiled code and freed memory twice).

Each example evaluates the target's first baseline on its shipped workload with one option set, in this
process (a native crash would end the test run: loud, as it must be), through the CLI's own `eval`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from in_process import InProcess

import targets
from search.cli.main import main

EXTREMES: dict[str, tuple[str, ...]] = {
    "int": (
        "0",
        "-1",
        "-9223372036854775808",
        str(2**31),
        str(2**63),
        str(2**63 - 1),
        "99999999999999999999",
    ),
    "float": ("0", "-1", "1e300", "-1e300", "nan", "inf", "-inf", "1e-300"),
    "str": ("", " ", "\x00\xff", "0:0", "-1:5", "99999999999999999999:1", "a" * 5000),
    "path": ("", "\x00\xff", "/dev/null", "/", "no/such/profile.json"),
    "bool": ("", "maybe", "2", "\x00"),
    "list": ("", "\x00"),
}
"""What each type is fed: its edges (0, negatives, 2^31, 2^63, 1e300, NaN, infinities), empty and binary."""
CASES = sorted(
    (name, option.name, value)
    for name in targets.names()
    for option in targets.load(name).options
    for value in EXTREMES[option.type]
)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each target's first baseline, as a heuristic file."""
    folder = tmp_path_factory.mktemp("baselines")
    found = {}
    for name in targets.names():
        baseline, source = next(iter(targets.load(name).baselines().items()))
        found[name] = folder / f"{name}-{baseline}.py"
        found[name].write_text(source)
    return found


@settings(max_examples=45, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=st.sampled_from(CASES))
def test_an_extreme_option_is_one_line_naming_it_or_a_result(
    case: tuple[str, str, str],
    files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target, option, value = case
    monkeypatch.setattr("sandbox.choice.choose_sandbox", lambda asked: (InProcess(), "in this process"))
    code = _run(["eval", str(files[target]), "--target", target, "--set", f"{option}={value}", "--json"])
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("sandbox:")]
    if code == 0:
        assert out.strip().startswith("{"), (case, out[-500:])
        return
    assert code == 2, (case, code, err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("crucible: error: "), (case, err[-2000:])
    assert option in lines[0], f"{case}: the message names no option: {lines[0]}"


def _run(argv: list[str]) -> Any:
    try:
        main(argv)
    except SystemExit as exc:
        return exc.code
    return 0
