"""crucible.toml: the example loads; every mistake is one line naming the file and the key, and exit 2."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from search.ci.config import ConfigError, Thresholds, load
from search.cli.main import main

EXAMPLE = Path(__file__).resolve().parents[3] / "crucible.toml.example"
CHAMPION = '"""LRU."""\n\n\ndef priority(b, p):\n    return b.last_access\n'

GOOD = """
[sandbox]
backend = "process"

[search]
budget = 1

[options.kv]
capacity = 300

[[workloads]]
name = "chat"
target = "kv"
path = "gen:chat:1"

[[champions]]
name = "evictor"
target = "kv"
file = "evictor.py"
"""


def repo(tmp_path: Path, text: str) -> Path:
    (tmp_path / "evictor.py").write_text(CHAMPION)
    path = tmp_path / "crucible.toml"
    path.write_text(text)
    return path


def test_the_example_in_the_repository_loads_once_its_files_exist(tmp_path: Path) -> None:
    text = EXAMPLE.read_text()
    for relative in re.findall(r'^(?:file|path) = "([^"]+)"', text, flags=re.MULTILINE):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("")
    shutil.copy(Path(__file__).resolve().parents[3] / "targets/batching/workloads/azure_conv_head.csv",
                tmp_path / "traces/azure_conv_head.csv")  # fmt: skip
    (tmp_path / "policies/scheduler.py").write_text(CHAMPION)
    config = load(shutil.copy(EXAMPLE, tmp_path / "crucible.toml"))
    (champion,) = config.champions
    assert (champion.name, champion.target, champion.baseline) == ("scheduler", "batching", "fcfs")
    assert champion.thresholds == Thresholds(alert=0.02, fail=0.10, margin=0.01)
    assert [(w.name, w.held_out) for w in config.workloads_of(champion)] == [
        ("conversations", False),
        ("conversations-later", True),
    ]
    assert config.workloads[0].options == {"load": 0.4, "requests": "0:600"}
    assert config.store == f"sqlite:///{tmp_path / '.crucible/crucible.db'}"


def test_a_target_without_a_workload_uses_its_shipped_one(tmp_path: Path) -> None:
    config = load(repo(tmp_path, GOOD.replace('target = "kv"\npath = "gen:chat:1"', 'target = "kv"')))
    assert [w.path for w in config.workloads] == [""]
    text = GOOD[: GOOD.index("[[workloads]]")] + GOOD[GOOD.index("[[champions]]") :]
    config = load(repo(tmp_path, text))
    assert [(w.name, w.path, w.options) for w in config.workloads] == [("kv-shipped", "", {"capacity": 300})]


@pytest.mark.parametrize(
    ("old", "new", "key", "says"),
    [
        ('target = "kv"\nfile', 'target = "nosuch"\nfile', "champions[0].target", "unknown target 'nosuch'"),
        ('file = "evictor.py"', 'file = "missing.py"', "champions[0].file", "no such file"),
        ("budget = 1", "budget = 1\nbudjet = 2", "search.budjet", "unknown key"),
        ("[search]", "[thresholds]\nfail = 1.5\n\n[search]", "thresholds.fail", "outside [0, 1]"),
        ("[search]", "[thresholds]\nalert = 0.2\nfail = 0.1\n\n[search]", "thresholds.alert", "above fail"),
        (
            'file = "evictor.py"',
            'file = "evictor.py"\nthresholds = { fail = -0.1 }',
            "champions[0].thresholds.fail",
            "outside [0, 1]",
        ),
        ("capacity = 300", "capacity = 0", "options.kv.capacity", "must lie in [1, 1e+12], got 0"),
        ('name = "chat"', 'name = "chat"\nheld = true', "workloads[0].held", "unknown key"),
        ('path = "gen:chat:1"', 'path = "traces/none.jsonl"', "workloads[0].path", "no such file"),
        (
            'file = "evictor.py"',
            'file = "evictor.py"\nworkloads = ["other"]',
            "champions[0].workloads[0]",
            "no workload named 'other'",
        ),
        (
            'file = "evictor.py"',
            'file = "evictor.py"\nbaseline = "mru"',
            "champions[0].baseline",
            "not a baseline",
        ),
        ('backend = "process"', 'backend = "vm"', "sandbox.backend", "must be one of auto, docker, process"),
        ("budget = 1", "budget = 0", "search.budget", "at least 1"),
        ("budget = 1", 'budget = "ten"', "search.budget", "expects a whole number"),
        ("budget = 1", 'budget = 1\nmodels = ["m"]', "search.models", "applies to proposer llm or mix"),
        ("budget = 1", "budget = 1\n[search.llm]\nmodels = []", "search.llm", "unknown key"),
        ("[[champions]]", "[[champion]]", "champion", "unknown key"),
    ],
)
def test_a_bad_config_is_one_line_naming_the_file_and_the_key_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, key: str, says: str
) -> None:
    assert old in GOOD
    path = repo(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(SystemExit) as exit_info:
        main(["ci", "--config", str(path), "--output", str(tmp_path / "out")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"crucible: error: {path}: {key}: ") and says in lines[0], lines[0]
    assert not (tmp_path / "out").exists()  # nothing ran, nothing written


def test_a_missing_or_malformed_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load(tmp_path / "crucible.toml")
    (tmp_path / "crucible.toml").write_text("[store\n")
    with pytest.raises(ConfigError, match=r"crucible.toml: not valid TOML"):
        load(tmp_path / "crucible.toml")


def test_an_llm_proposer_without_its_key_fails_before_anything_is_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CRUCIBLE_TEST_NO_KEY", raising=False)
    llm = '[search]\nproposer = "llm"\nmodels = ["m"]\napi_key_env = "CRUCIBLE_TEST_NO_KEY"\n'
    path = repo(tmp_path, GOOD.replace("[search]\nbudget = 1\n", llm))
    with pytest.raises(SystemExit) as exit_info:
        main(["ci", "--config", str(path), "--output", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert (
        capsys.readouterr().err.strip()
        == "crucible: error: set CRUCIBLE_TEST_NO_KEY to the API key of https://api.openai.com/v1"
    )
    assert not (tmp_path / ".crucible").exists() and not (tmp_path / "out").exists()
