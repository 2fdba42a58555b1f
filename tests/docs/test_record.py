"""A recorded figure names the commit it was measured at, and says `+dirty` when code differed from it;
figures recorded one after another (the results folder itself) do not mark each other dirty."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _record_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_record", ROOT / "docs" / "record.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _repository(tmp_path: Path) -> Path:
    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=tmp_path, check=True)

    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "docs" / "results" / "a.json").write_text("{}\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "start")
    return tmp_path


def test_a_clean_checkout_and_changed_results_stamp_the_bare_commit(tmp_path: Path) -> None:
    record, root = _record_module(), _repository(tmp_path)
    results = root / "docs" / "results"
    clean = record.commit(root, results)
    assert clean and not clean.endswith("+dirty")
    (results / "a.json").write_text('{"figure": 1}\n')
    assert record.commit(root, results) == clean


def test_changed_code_stamps_the_commit_dirty(tmp_path: Path) -> None:
    record, root = _record_module(), _repository(tmp_path)
    (root / "code.py").write_text("x = 2\n")
    assert record.commit(root, root / "docs" / "results").endswith("+dirty")
