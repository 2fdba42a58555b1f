"""A package outside Crucible's tree made importable with its distribution metadata, as pip installs one:
what lets a test declare a target or a proposer by an entry point without editing any file of Crucible."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest


def install(package: Path, entry_points: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Copy `package` into `folder` beside a dist-info declaring `entry_points`, on the import path (and on
    PYTHONPATH, for the processes a run starts)."""
    shutil.copytree(package, folder / package.name, ignore=shutil.ignore_patterns("__pycache__"))
    info = folder / f"{package.name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {package.name.replace('_', '-')}\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text(entry_points)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PYTHONPATH", str(folder), prepend=":")


def forget(package: str) -> None:
    """Unload the package, so the next test imports its own copy."""
    for name in [m for m in sys.modules if m.split(".")[0] == package]:
        del sys.modules[name]


TOY_PROPOSER = Path(__file__).resolve().parents[1] / "search" / "proposers" / "toy_plugin" / "toy_proposer"
TOY_PROPOSER_ENTRY = "[crucible.proposers]\ntoy = toy_proposer:KIND\n"
