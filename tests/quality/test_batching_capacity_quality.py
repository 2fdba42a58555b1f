"""The offline proposer's batching-capacity program carries over to later traffic on an H100 deployment: the
program a budget-60 search finds on the shipped Azure head beats the SRPT oracle's capacity on two later
windows of the conversation train trace it never saw (slow: run with -m slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

TRACE = Path(__file__).resolve().parents[3] / "shared" / "data" / "batching" / "azure_llm_conv_2023_train.csv"
DEPLOYMENT = ["--target", "batching-capacity", "--set", "deployment=h100-llama3-8b"]
LATER = ("5000:6000", "10000:11000")


def crucible(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "search.cli", *args], capture_output=True, text=True, timeout=1800, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_the_found_program_beats_srpt_on_later_windows_it_never_saw(seed: int, tmp_path: Path) -> None:
    if not TRACE.is_file():
        pytest.skip(f"{TRACE} is absent")
    db = f"sqlite:///{tmp_path}/q.db"
    searched = crucible("search", *DEPLOYMENT, "--budget", "60", "--seed", str(seed), "--db", db, "--json")
    run = json.loads(searched)
    best = tmp_path / "best.py"  # with its tuned constants, as a user takes it
    crucible("runs", "best", run["run_id"], "--db", db, "--output", str(best))
    for window in LATER:
        on = ["--workload", str(TRACE), "--set", f"requests={window}", "--json"]
        found = json.loads(crucible("eval", str(best), *DEPLOYMENT, *on))["metrics"]["capacity"]
        srpt = json.loads(crucible("baselines", *DEPLOYMENT, *on))["baselines"]["srpt"]["capacity"]
        # 2026-12-07, at the commit that made the target rank on unseen requests: seed 1 2.751 and 1.966,
        # seed 2 2.692 and 2.054, against SRPT's 2.663 and 1.883
        assert found > srpt, (seed, window, found, srpt)
