"""A target added outside Crucible's tree is a first-class target: tests/search/toy_plugin/toy_cache (a toy
cache's features, one property, one baseline, one option and a validation against a second, independent
implementation of the same cache) is copied to a temporary folder and declared by a `crucible.targets`
entry point, as an installed package declares it. Nothing of Crucible's is edited, not even the registry,
and the CLI lists, searches (in the process sandbox), validates and configures it."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from plugins import forget, install

import targets
from search.cli import kernels as kernel_commands
from search.cli.main import main

TOY = Path(__file__).with_name("toy_plugin") / "toy_cache"
ENTRY_POINTS = "[crucible.targets]\ntoy = toy_cache.target:ToyCacheTarget\n"


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The toy package installed as pip would see it (tests/helpers/plugins.py)."""
    install(TOY, ENTRY_POINTS, tmp_path / "plugins", monkeypatch)
    kernel_commands._validations.cache_clear()  # `validate` reads the targets' validations once a process
    yield tmp_path
    kernel_commands._validations.cache_clear()
    forget("toy_cache")


def _stored_runs(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as connection:
        return int(connection.execute("select count(*) from run").fetchone()[0])


def test_the_registry_names_no_plugin_yet_lists_it(plugin: Path) -> None:
    assert "toy" not in Path(targets.__file__).read_text()
    assert "toy" in targets.names()
    assert {"kv", "batching", "dit"} < set(targets.names()), "built-ins register by the same entry points"


def test_targets_show_describes_the_plugin(plugin: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["targets", "show", "toy", "--json"])
    shown = json.loads(capsys.readouterr().out)
    assert shown["name"] == "toy"
    assert [o["name"] for o in shown["options"]] == ["capacity"]
    assert "lru" in json.dumps(shown["baselines"])
    assert {"age", "lifetime", "hits"} <= set(json.dumps(shown["features"]).replace('"', " ").split())


def test_search_runs_the_plugin_in_the_process_sandbox(
    plugin: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = plugin / "runs.db"
    argv = ["search", "--target", "toy", "--budget", "3", "--trials", "4", "--sandbox", "process"]
    main([*argv, "--set", "capacity=6", "--db", f"sqlite:///{db}", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert (report["status"], report["done"], report["options"]) == ("finished", 3, {"capacity": 6})
    assert report["counts"].get("evaluated", 0) >= 1
    lru = next(b for b in report["baselines"] if b["name"] == "lru")
    assert 0.0 < lru["score"] < 1.0
    assert 0.0 < report["best"]["score"] <= 1.0


def test_validate_compares_the_simulator_with_an_independent_engine(
    plugin: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lfu, mru = plugin / "lfu.py", plugin / "mru.py"
    lfu.write_text(
        '"""LFU: evict the key with the fewest hits."""\n\n\ndef priority(b, p):\n    return b.hits\n'
    )
    mru.write_text('"""MRU: evict the key used last."""\n\n\ndef priority(b, p):\n    return b.age\n')
    argv = ["validate", "--target", "toy", "--candidates", "lru", str(lfu), str(mru), "--sandbox", "process"]
    db = f"sqlite:///{plugin / 'runs.db'}"
    main(
        [*argv, "--capacity", "4", "--requests", "400", "--json", "--check", "--db", db]
    )  # --check: exit 1 on a miss
    result = json.loads(capsys.readouterr().out)
    policies = result["policies"]
    assert set(policies) == {"lru", "lfu", "mru"}
    assert all(p["hit_rate"] == p["engine_hit_rate"] for p in policies.values())
    assert len({p["hit_rate"] for p in policies.values()}) == 3  # a ranking to agree on
    assert (result["kendall_tau"], result["error_max"]) == (1.0, 0.0)


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("capacity=0", ("option capacity", "[1, 64]")),
        ("capacity=many", ("option capacity", "whole number", "'many'")),
        ("slots=3", ("unknown option 'slots'", "options: capacity")),
    ],
)
def test_a_bad_setting_is_one_line_and_stores_nothing(
    plugin: Path, capsys: pytest.CaptureFixture[str], setting: str, named: tuple[str, ...]
) -> None:
    db = plugin / "runs.db"
    with pytest.raises(SystemExit) as exit_:
        main(
            ["search", "--target", "toy", "--set", setting, "--db", f"sqlite:///{db}", "--sandbox", "process"]
        )
    assert exit_.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("crucible: error: ")
    assert all(words in line for words in named)
    assert _stored_runs(db) == 0


def test_a_plugin_that_cannot_load_is_named_in_one_line(
    plugin: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    info = plugin / "plugins" / "broken-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[crucible.targets]\nbroken = no_such_module:Target\n")
    with pytest.raises(SystemExit) as exit_:
        main(["targets", "list"])
    assert exit_.value.code == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("crucible: error: target 'broken' (no_such_module:Target) cannot be loaded")
