"""A run's settings are declared once (search/settings.py, which proposer in the proposer registry, and each
proposer's own), each with one default, as Options like a target's: the CLI's flags, crucible.toml's
[search] keys and the UI's launch form (tests/ui) are generated from the declarations, so every front end
starts a run with the same values when it is given nothing."""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

import pytest

from search import proposers
from search.all_settings import BY_NAME, SETTINGS
from search.ci.config import load, search_keys
from search.cli.main import build_parser, main
from search.cli.parsing import given
from search.service import prepare
from search.settings import RunConfig
from targets.base import Option, OptionError, setting

IN_RUN_CONFIG = {f.name for f in fields(RunConfig)} & set(BY_NAME) - {"holdout", "select", "proposer"}
"""The settings a run stores as they are (holdout and select are turned into the split and the ranking; the
proposer is always given)."""


def _run_values(config: RunConfig) -> dict[str, object]:
    return {name: getattr(config, name) for name in IN_RUN_CONFIG}


def test_the_run_stores_each_setting_at_its_declared_default() -> None:
    config = RunConfig(target="kv", workload="w", options={}, proposer="evolve")
    assert _run_values(config) == {name: BY_NAME[name].default for name in IN_RUN_CONFIG}


def test_the_cli_and_crucible_toml_start_a_run_at_the_same_defaults(tmp_path: Path) -> None:
    args = build_parser("search").parse_args(["search"])
    from_cli = given(args, (*SETTINGS, *proposers.settings()))
    assert from_cli == {}, "no flag has a default of its own: an unset flag is the declaration's default"
    (tmp_path / "policy.py").write_text('"""LRU."""\n\n\ndef priority(b, p):\n    return b.last_access\n')
    (tmp_path / "crucible.toml").write_text('[[champions]]\ntarget = "kv"\nfile = "policy.py"\n')
    from_toml = load(tmp_path / "crucible.toml").search
    assert from_toml == {}, "no key has a default of its own either"
    cli = prepare("kv", "gen:chat:1", {}, **from_cli)
    toml = prepare("kv", "gen:chat:1", {}, **from_toml)
    assert (
        _run_values(cli)
        == _run_values(toml)
        == _run_values(RunConfig(target="kv", workload="w", options={}, proposer="evolve"))
    )


def test_every_setting_is_a_flag_and_a_toml_key_with_its_default_in_the_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for declared in (*SETTINGS, *proposers.settings()):
        if declared.name == "sandbox":
            assert declared.switch in text
            continue
        assert declared.switch in text, declared.name
        assert declared.name in search_keys(), f"crucible.toml [search] lacks {declared.name}"
        if declared.default not in (None, [], ()):
            assert f"(default {declared.default})" in text, declared.name


@pytest.mark.parametrize(
    ("setting", "text", "value"),
    [
        (BY_NAME["budget"], "40", 40),
        (BY_NAME["time_budget_s"], "2.5", 2.5),
        (BY_NAME["holdout"], "0.33", 0.33),
        (BY_NAME["proposer"], "llm", "llm"),
        (setting("models", "list", [], "models"), ["a b", "c:2"], ["a", "b", "c:2"]),
        (setting("flag", "bool", False, "a flag"), "yes", True),
    ],
)
def test_a_flag_or_a_form_field_is_parsed_as_its_type(setting: Option, text: object, value: object) -> None:
    assert setting.parse(text) == value  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        (BY_NAME["budget"], 0, "--budget must be a whole number of at least 1, got 0"),
        (BY_NAME["budget"], "ten", "--budget expects a whole number, got 'ten'"),
        (BY_NAME["budget"], True, "--budget expects a whole number, got True"),
        (BY_NAME["time_budget_s"], -1.0, "--time-budget must be positive, got -1.0"),
        (BY_NAME["holdout"], 1.0, "--holdout must lie in (0, 1), got 1.0"),
        (BY_NAME["holdout"], float("nan"), "--holdout must lie in (0, 1), got nan"),
        (BY_NAME["sandbox"], "vm", "--sandbox must be one of auto, docker, process, got 'vm'"),
        (BY_NAME["select"], "best", "--select must be one of window, unseen, got 'best'"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_flag_and_what_it_allows(
    setting: Option, value: object, says: str
) -> None:
    with pytest.raises(OptionError) as error:
        setting.check(value)
    assert str(error.value) == says
    assert error.value.reason == says.removeprefix(f"{setting.switch} "), "front ends name it their own way"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (0, "option capacity must be a whole number of at least 1, got 0"),
        ("ten", "option capacity expects a whole number, got 'ten'"),
        (float("inf"), "option capacity expects a whole number, got inf"),
    ],
)
def test_a_target_option_and_a_run_setting_are_one_type_named_their_own_way(value: object, says: str) -> None:
    capacity = Option("capacity", "int", 2000, "blocks", low=1)
    with pytest.raises(OptionError, match="^" + says.replace("(", r"\(").replace(")", r"\)") + "$"):
        capacity.check(value)


def test_an_unset_flag_stays_none_so_a_resume_can_tell_what_was_given() -> None:
    args = build_parser("search").parse_args(["search", "--budget", "5"])
    assert isinstance(args, argparse.Namespace)
    assert given(args, SETTINGS) == {"budget": 5}
