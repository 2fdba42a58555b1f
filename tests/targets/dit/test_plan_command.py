"""`crucible dit plan`: flags made from its Options, a ranked table or JSON, and one-line errors."""

from __future__ import annotations

import json
import re

import pytest

from search.cli.main import main


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_json_ranks_every_valid_plan_fastest_first(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["dit", "plan", "--model", "flux.1-dev", "--height", "1024", "--width", "1024", "--gpus", "4"]
    code, out, _ = _run([*argv, "--topology", "h100-nvlink", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert (data["model"], data["tokens"], data["steps"]) == ("flux.1-dev", 4608, 28)
    totals = [p["total_s"] for p in data["plans"]]
    assert totals == sorted(totals) and data["plans"][0]["plan"] == "ulysses4"
    assert all(p["gpus"] == "0,1,2,3" for p in data["plans"])


def test_plan_table_is_not_cut_when_piped(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        ["dit", "plan", "--model", "pixart-sigma", "--gpus", "8", "--topology", "l40-pcie"], capsys
    )
    assert code == 0
    assert "memory_gib" in out and "UPI (cross-socket)" in out
    assert max(len(line) for line in out.splitlines()) > 80


def test_list_names_the_models_and_topologies(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["dit", "plan", "--list", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert "hunyuanvideo" in data["models"] and "l40-pcie-x2" in data["topologies"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model", "flux"], "option model: 'flux' is not one of flux.1-dev"),
        (["--model", "flux.1-dev", "--topology", "dgx"], "option topology: 'dgx' is not one of"),
        (["--model", "flux.1-dev", "--gpus", "9"], "topology h100-nvlink has 8 GPUs; cannot use 9"),
        (["--model", "flux.1-dev", "--height", "1000"], "1000x1024 does not patch evenly"),
        (["--model", "flux.1-dev", "--gpus", "two"], "option gpus: expected a whole number, got 'two'"),
        (["--model", "hunyuanvideo", "--frames", "128"], "frames must be 1 \\+ a multiple of 4"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    defaults = {"--gpus": "8", "--topology": "h100-nvlink", "--width": "1024"}
    argv = ["dit", "plan", *extra]
    for flag, value in defaults.items():
        if flag not in extra:
            argv += [flag, value]
    code, out, err = _run(argv, capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("crucible: error: ")
    assert re.search(message, err)


def test_a_missing_argument_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["dit", "plan", "--model", "flux.1-dev"], capsys)
    assert code == 2 and err.strip() == "crucible: error: dit plan needs --gpus, --topology (or --list)"
