"""`crucible dit plan` and `crucible dit check`: flags made from their Options, a ranked table or JSON,
where each plan's time and memory go (--explain), and one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

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
        (["--model", "flux"], "option model must be one of flux.1-dev"),
        (["--model", "flux.1-dev", "--topology", "dgx"], "option topology must be one of"),
        (["--model", "flux.1-dev", "--gpus", "9"], "topology h100-nvlink has 8 GPUs; cannot use 9"),
        (["--model", "flux.1-dev", "--height", "1000"], "1000x1024 does not patch evenly"),
        (["--model", "flux.1-dev", "--gpus", "two"], "option gpus expects a whole number, got 'two'"),
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


@pytest.mark.parametrize(
    ("model", "gpus", "topology"),
    [("flux.1-dev", "4", "h100-nvlink"), ("hunyuandit", "8", "a100-nvlink"), ("consisid", "8", "l40-pcie")],
)
def test_explain_parts_add_up_to_each_plans_step_and_total(
    model: str, gpus: str, topology: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["dit", "plan", "--model", model, "--gpus", gpus, "--topology", topology, "--explain", "--json"]
    code, out, _ = _run(argv, capsys)
    assert code == 0
    data = json.loads(out)
    assert set(data["parts"]) == {"step", "overlapped", "request"}
    for p in data["plans"]:
        assert set(p["step_parts"]) == set(data["parts"]["step"])
        assert sum(p["step_parts"].values()) == pytest.approx(p["step_s"], rel=0.01), p["plan"]
        total = p["pipelined_steps"] * p["step_s"] + sum(p["request_parts"].values())
        assert total == pytest.approx(p["total_s"], rel=0.01), p["plan"]
        assert sum(p["memory_gib_parts"].values()) == pytest.approx(p["memory_gib"], rel=0.01)
        assert min(p["step_parts"].values()) >= 0 and min(p["request_parts"].values()) >= 0
    kinds = {k for p in data["plans"] for k, v in p["step_parts"].items() if v > 0}
    assert {"gemm", "attention", "dispatch"} <= kinds


def test_explain_shows_pipefusion_warm_up_fill_stale_kv_and_hops_hidden_on_nvlink(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["dit", "plan", "--model", "sd3-medium", "--gpus", "8", "--topology", "a100-nvlink", "--explain"]
    code, out, _ = _run(argv, capsys)
    assert code == 0
    for column in ("cfg_all_gather", "warmup", "pipeline_fill", "mem_stale_kv", "overlapped"):
        assert column in out
    assert "pipefusion_p2p" not in out, "on NVLink the next patch hides every hop"


def test_check_prints_both_halves_and_one_table_on_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "check.json"
    code, out, _ = _run(["dit", "check", "--out", str(out_file), "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert json.loads(out_file.read_text()) == data
    assert set(data["summary"]) == {"calibration", "check"}
    assert {t["half"] for t in data["tables"]} == {"calibration", "check"}
    assert all(e["why"] for e in data["excluded"])
    code, out, _ = _run(["dit", "check", "--half", "check", "--json"], capsys)
    assert set(json.loads(out)["summary"]) == {"check"}
    code, out, _ = _run(["dit", "check", "--table", "sana-4096-a100", "--json"], capsys)
    rows = json.loads(out)["table"]["rows"]
    assert len(rows) == 13 and all(r["published_s"] > 0 for r in rows)


def test_check_names_an_unknown_table_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["dit", "check", "--table", "sora"], capsys)
    assert code == 2 and out == ""
    said = "crucible: error: option table names no table 'sora'; tables: flux-1024-h100-compile"
    assert err.startswith(said)
    assert len(err.strip().splitlines()) == 1
