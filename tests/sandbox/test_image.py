"""The image name follows the code that runs in it and the pinned dependencies: a stale one is not run."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import shutil
from pathlib import Path

import pytest

import sandbox.image
from sandbox.image import IMAGE_PACKAGES, PROJECT_ROOT, image_name, pinned_dependencies, runtime_requirements


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the packages the image holds, which the image name is then computed from."""
    for package in IMAGE_PACKAGES:
        shutil.copytree(
            PROJECT_ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    monkeypatch.setattr(sandbox.image, "PROJECT_ROOT", tmp_path)
    return tmp_path


def test_name_carries_the_version_and_a_source_hash() -> None:
    version = importlib.metadata.version("crucible")
    assert re.fullmatch(rf"crucible-sandbox:{re.escape(version)}-[0-9a-f]{{12}}", image_name())


def test_name_changes_with_any_file_that_runs_in_the_container(checkout: Path) -> None:
    before = image_name()
    for package in IMAGE_PACKAGES:
        module = next((checkout / package).glob("*.py"))
        module.write_text(module.read_text() + "\n")
        after = image_name()
        assert after != before, package
        before = after


def test_name_ignores_what_never_runs_in_the_container(checkout: Path) -> None:
    before = image_name()
    (checkout / "sandbox" / "__pycache__").mkdir()
    (checkout / "sandbox" / "__pycache__" / "worker.cpython-311.pyc").write_bytes(b"\0")
    (checkout / "tests").mkdir()
    (checkout / "tests" / "test_more.py").write_text("")
    assert image_name() == before


def test_dependencies_are_pinned_to_what_runs_here_and_carry_only_the_torch_extra() -> None:
    pins = dict(pin.split("==") for pin in pinned_dependencies())
    for name in ("numpy", "numba", "llvmlite", "optuna"):
        assert pins[name] == importlib.metadata.version(name)
    assert "pytest" not in pins  # the test extra stays out
    if importlib.util.find_spec("torch") is not None:  # the engine's jobs need it in the container too
        assert pins["torch"] == importlib.metadata.version("torch")
        assert "torch==2.13.0" in runtime_requirements()
    else:
        assert "torch" not in pins
