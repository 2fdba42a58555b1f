"""The suite keeps its promise to whoever runs it (tests/helpers/store_guard.py): a test that writes the
user's store fails, naming it, and the store is left as it was by every test that keeps to its own folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HELPERS = Path(__file__).resolve().parent / "helpers"
WRITES = 'from pathlib import Path\n\n\ndef test_writes():\n    Path("crucible.db").write_bytes(b"mine")\n'
KEEPS = 'def test_keeps(tmp_path):\n    (tmp_path / "crucible.db").write_bytes(b"its own")\n'


def _pytest(folder: Path, test: str) -> subprocess.CompletedProcess[str]:
    (folder / "test_it.py").write_text(test)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "store_guard",
        "-p",
        "no:cacheprovider",
        "test_it.py",
    ]
    env = {"PYTHONPATH": str(HELPERS), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        command, cwd=folder, capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_a_test_that_writes_the_users_store_fails_naming_it(tmp_path: Path) -> None:
    done = _pytest(tmp_path, WRITES)
    assert done.returncode == 1, done.stdout
    assert f"the test wrote the user's store {tmp_path / 'crucible.db'}" in done.stdout


def test_the_users_store_is_left_byte_for_byte_by_a_test_that_keeps_to_its_folder(tmp_path: Path) -> None:
    store = tmp_path / "crucible.db"
    store.write_bytes(b"the README's first command made this")
    done = _pytest(tmp_path, KEEPS)
    assert done.returncode == 0, done.stdout
    assert store.read_bytes() == b"the README's first command made this"
