"""The offline proposer finds real improvements on the real Mooncake trace (slow: run with -m slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

TRACE = Path(__file__).resolve().parents[3] / "shared" / "data" / "kv" / "mooncake_conversation_train.jsonl"


@pytest.mark.slow
def test_search_beats_the_best_classic_policy_by_15_percent_at_4000_blocks(tmp_path: Path) -> None:
    if not TRACE.is_file():
        pytest.skip(f"{TRACE} is absent")
    command = [
        sys.executable,
        "-m",
        "search.cli",
        "search",
        "--target",
        "kv",
        "--workload",
        str(TRACE),
        "--capacity",
        "4000",
        "--budget",
        "300",
        "--seed",
        "1",
        "--json",
        "--db",
        f"sqlite:///{tmp_path}/q.db",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    rates = {b["name"]: b["metrics"]["block_hit_rate"] for b in summary["baselines"]}
    classic = {name: rate for name, rate in rates.items() if name != "belady"}
    found = summary["best"]["metrics"]["block_hit_rate"]
    # 1.18x Perfect LFU at 2885c33 (0.1578 against 0.1333); 1.2x was the bar when S3-FIFO was the best classic
    assert found >= 1.15 * max(classic.values()), (found, classic)
    assert found <= rates["belady"]
