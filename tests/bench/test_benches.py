"""Benches cannot rot: every bench/*.py runs its `--quick` mode here (tiny inputs, the same code path as the
full run) and records its figures, so a changed signature breaks a test instead of a bench. A new bench is
picked up by its file name; helpers start with an underscore."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHES = sorted(p for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_"))
TIMEOUT_S = 300
"""A quick mode takes seconds; this is room for a loaded machine compiling numba kernels cold."""
REAL_MODEL_TIMEOUT_S = 1200
"""bench/llm_local.py's quick mode waits on a real model on the CPU: minutes, not seconds."""
OPTIONAL = ("torch",)
"""Extras a bench may need: missing here (no torch extra), such a bench is skipped, and only for that."""
NOT_INSTALLED = 3
"""A bench's exit status where an environment it needs is not built here (bench/llm_local.py without
`bash .ci/llm-local`): skipped with its line, or failed where CRUCIBLE_REQUIRE_LLM_LOCAL=1 (CI)."""


def test_every_bench_is_found() -> None:
    assert len(BENCHES) >= 14, [p.name for p in BENCHES]


@pytest.mark.parametrize("bench", BENCHES, ids=[p.stem for p in BENCHES])
def test_the_quick_mode_runs_and_records(bench: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(bench), "--quick", "--record", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=REAL_MODEL_TIMEOUT_S if bench.stem == "llm_local" else TIMEOUT_S,
        check=False,
    )
    said = f"{bench.name} --quick exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    for module in OPTIONAL:
        missing = (f"No module named '{module}'", f"needs {module}: pip install")
        if any(m in done.stderr for m in missing) and importlib.util.find_spec(module) is None:
            pytest.skip(f"{bench.name} needs {module}, not installed here")
    if done.returncode == NOT_INSTALLED and os.environ.get("CRUCIBLE_REQUIRE_LLM_LOCAL") != "1":
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, said
    assert "Traceback" not in done.stderr, said
    record = json.loads((tmp_path / f"{bench.stem}.json").read_text())
    assert record["command"] == f"python bench/{bench.name} --quick --record {tmp_path}"
    assert record["machine"]["cores"] >= 1 and isinstance(record["loaded"], bool)
    assert record["data"], f"{bench.name} recorded no figures"
