"""A proposer added outside Crucible's tree is a first-class proposer: tests/search/proposers/toy_plugin
(a proposer with one setting of its own) is copied to a temporary folder and declared by a
`crucible.proposers` entry point, as an installed package declares it. Nothing of Crucible's is edited, and
the CLI, the UI's launch form and crucible.toml list it and its setting and run it."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from plugins import TOY_PROPOSER, TOY_PROPOSER_ENTRY, forget, install

from search import proposers
from search.ci.config import load
from search.cli.main import main


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    install(TOY_PROPOSER, TOY_PROPOSER_ENTRY, tmp_path / "plugins", monkeypatch)
    yield tmp_path
    forget("toy_proposer")


def test_the_registry_lists_it_and_its_setting(plugin: Path) -> None:
    assert "toy" not in Path(proposers.__file__).read_text()
    assert "toy" in proposers.names()
    assert "toy_weight" in {s.name for s in proposers.settings()}


def test_a_search_runs_with_it_and_its_own_flag(plugin: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    assert "--toy-weight" in capsys.readouterr().out
    db = plugin / "runs.db"
    main(
        ["search", "--proposer", "toy", "--toy-weight", "2", "--workload", "gen:chat:1", "--capacity", "300",
         "--budget", "2", "--trials", "1", "--workers", "1", "--sandbox", "process",
         "--db", f"sqlite:///{db}", "--json"]
    )  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert report["config"]["proposer_settings"] == {"toy_weight": 2.0}
    with sqlite3.connect(db) as connection:
        written = connection.execute("select proposer, note from candidate where proposer = 'toy'").fetchall()
    assert len(written) >= 2 and all(note.startswith("weight ") for _, note in written)


def test_crucible_toml_takes_it_and_its_setting(plugin: Path) -> None:
    (plugin / "policy.py").write_text('"""LRU."""\n\n\ndef priority(b, p):\n    return b.last_access\n')
    (plugin / "crucible.toml").write_text(
        '[search]\nproposer = "toy"\ntoy_weight = 3\n\n[[champions]]\ntarget = "kv"\nfile = "policy.py"\n'
    )
    config = load(plugin / "crucible.toml")
    assert config.search == {"proposer": "toy", "toy_weight": 3.0}
