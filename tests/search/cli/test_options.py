"""Targets declare their options as data; the CLI generates `--set` from them, checks each value in one line,
stores them in the run, and shows them in `crucible targets show` and `--help`."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

import targets
from search.cli.main import build_parser, main
from search.cli.parsing import option_assignments
from search.service.runs import RunService, prepare
from search.settings import target_options
from search.store.readmodel import ReadModel
from search.store.store import Store, open_engine


def one_line(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return int(exit_info.value.code or 0), err[0]


def test_a_bad_set_ends_in_one_line_naming_the_option_and_what_it_allows_and_stores_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    kv = ["--workload", "gen:chat:1"]
    batching = ["--target", "batching"]
    cases = {
        "unknown option 'cache' for target kv; options: capacity, block_tokens, profile, train_share": [
            *kv,
            "--set",
            "cache=3",
        ],
        "option capacity expects a whole number, got 'x'; allowed: [1, 1e+12]": [*kv, "--set", "capacity=x"],
        "option capacity must lie in [1, 1e+12], got -5": [*kv, "--capacity", "-5"],
        "option train_share must lie in [0.01, 1], got 2.0": [*kv, "--set", "train_share=2"],
        "--set expects NAME=VALUE, got 'capacity'": [*kv, "--set", "capacity"],
        "option load must be a number of at least 0.001, got 0.0": [*batching, "--set", "load=0"],
        "option requests needs 0 <= START < STOP": [*batching, "--set", "requests=50:10"],
    }
    for expected, flags in cases.items():
        for command in ("search", "baselines"):
            code, line = one_line(capsys, command, *flags, "--db", url)
            assert code == 2 and line.startswith("crucible: error: ") and expected in line, (expected, line)
    assert not db.exists(), "nothing stored, not even an empty database"


def test_options_are_stored_in_the_run_with_their_defaults(tmp_path: Path) -> None:
    runs = RunService(Store(open_engine(f"sqlite:///{tmp_path / 'runs.db'}")))
    given = {"load": 0.6, "ttft_slo_s": 2.0, "requests": "0:400", "token_budget": 512}
    info = runs.record(prepare("batching", None, given, budget=1))
    stored = ReadModel(runs.store).run(info.run_id)
    defaults = {o.name: o.default for o in targets.load("batching").options if o.default is not None}
    assert stored.options == {**defaults, **given}
    assert stored.config["options"] == stored.options
    eval_instance = next(i for i in targets.load("batching").instances(stored.workload, stored.options))
    assert eval_instance.config["load"] == 0.6 and eval_instance.config["requests"] == [0, 120]


def test_an_option_the_target_marks_as_a_flag_is_a_shorthand_for_set() -> None:
    kv = targets.load("kv")
    given = []
    for flags in (["--capacity", "300"], ["--capacity=300"], ["--set", "capacity=300"]):
        args, extra = build_parser("search").parse_known_args(["search", *flags])
        args.extra = extra
        given.append(target_options(kv, option_assignments(args, kv)))
    assert given == [{"capacity": 300}] * 3
    assert not [o for o in targets.load("batching").options if o.flag], "batching marks none: no --capacity"


def test_targets_show_lists_options_features_metrics_and_baselines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["targets", "list", "--json"])
    assert {t["name"] for t in json.loads(capsys.readouterr().out)} == set(targets.names())
    main(["targets", "show", "batching", "--json"])
    shown = json.loads(capsys.readouterr().out)
    options = {o["name"]: o for o in shown["options"]}
    assert {
        "load",
        "capacity",
        "block_tokens",
        "token_budget",
        "max_seqs",
        "ttft_slo_s",
        "tpot_slo_s",
    } <= set(options)
    assert {"profile", "requests", "train_share", "deployment"} <= set(options)
    assert options["deployment"]["default"] == "cpu" and "h100-llama3-8b" in options["deployment"]["choices"]
    assert options["capacity"] == {
        "name": "capacity",
        "type": "int",
        "default": None,
        "doc": "KV cache capacity in blocks (default 2048 on the cpu; on a GPU deployment the blocks that "
        "fit beside the weights and activations)",
        "low": 1,
        "high": 10**12,
        "choices": [],
        "allowed": "[1, 1e+12]",
        "flag": "",
    }
    assert shown["objective"] == {"metric": "slo_attainment", "direction": "maximize"}
    assert "srpt" in shown["builtin_baselines"] and "fcfs" in shown["baselines"]
    assert "waiting" in {f["name"] for f in shown["features"]["priority"]}
    clocks = {f["name"] for f in shown["features"]["priority"] if f["clock"]}
    assert clocks == {"now", "arrival"}, "moments on the trace's clock, which no threshold may test"
    main(["targets", "show", "kv"])
    text = capsys.readouterr().out
    for words in (
        "capacity",
        "cache capacity in blocks",
        "block_hit_rate",
        "belady",
        "cpu-2core, h100-vidur",
    ):
        assert words in text


def _own_parsers() -> dict[str, argparse.ArgumentParser]:
    """search, baselines, eval, verify, runs list/show/best, targets list/show: this module's commands."""
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    found = {}
    for name in ("search", "baselines", "eval", "verify", "runs", "targets"):
        parser = commands.choices[name]
        nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if nested:
            found |= {f"{name} {k}": p for k, p in nested[0].choices.items()}
        else:
            found[name] = parser
    return found


def test_every_option_has_a_description_and_help_shows_the_defaults() -> None:
    for name, parser in _own_parsers().items():
        for action in parser._actions:
            assert action.help, f"crucible {name}: {action.dest} has no description"
    text = " ".join(_own_parsers()["search"].format_help().split())
    assert "candidates to propose (default 300)" in text
    assert "Optuna trials per candidate (default 32)" in text
    assert "`crucible targets show TARGET` lists them" in text


def test_version_and_a_mistyped_flag_are_one_line() -> None:
    command = [sys.executable, "-m", "search.cli"]
    shown = subprocess.run([*command, "--version"], capture_output=True, text=True, check=True)
    assert shown.stdout.strip().startswith("crucible ") and shown.stdout.strip() != "crucible unknown"
    wrong = subprocess.run([*command, "search", "--budget", "many"], capture_output=True, text=True)
    assert wrong.returncode == 2
    assert wrong.stderr.strip().splitlines() == [
        "crucible: error: --budget expects a whole number, got 'many'"
    ]
