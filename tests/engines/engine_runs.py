"""The engines' own environments (.engines/<name>, built by .ci/engines): each runs its side of a test as a
subprocess with its own Python, which has the engine and no Crucible; missing, the test is skipped with
the reason, or fails where CRUCIBLE_REQUIRE_ENGINES=1 (CI)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from search.cli import main

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
ENGINES = Path(os.environ.get("CRUCIBLE_ENGINES_DIR", ROOT / ".engines"))
PINS = {"sglang": "sglang==0.5.23", "vllm": "vllm==0.34.0", "router": "sglang-router==0.3.2"}


def engine_python(engine: str) -> Path:
    """The engine environment's Python; skip (or fail under CRUCIBLE_REQUIRE_ENGINES=1) when it is missing."""
    python = ENGINES / engine / "bin" / "python"
    if python.exists():
        return python
    reason = f"{PINS[engine]} is not installed in {ENGINES / engine} (bash .ci/engines builds it)"
    if os.environ.get("CRUCIBLE_REQUIRE_ENGINES") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def run_engine(
    engine: str, script: str, args: list[str], stdin: str = "", env: dict[str, str] | None = None
) -> dict:
    """Run one of this folder's scripts with the engine's Python and return the JSON line it prints last."""
    done = run_script(engine, script, args, stdin, env)
    if done.returncode != 0:
        pytest.fail(f"{engine} run failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_script(
    engine: str, script: str, args: list[str], stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one of this folder's scripts with the engine's Python, as it ends."""
    python = engine_python(engine)
    return subprocess.run(
        [str(python), str(HERE / script), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": "", **(env or {})},
        cwd=HERE,
        check=False,
    )


def export(tmp_path: Path, source: Path, engine: str) -> Path:
    """`crucible export SOURCE --to ENGINE -o DIR`, as a user runs it; returns DIR."""
    folder = tmp_path / f"{source.stem}-{engine}"
    main(["export", str(source), "--to", engine, "-o", str(folder)])
    return folder
