"""A search on the serving target finds a heuristic above every baseline on SLO attainment, on a seeded
workload where the baselines differ, and again on another seed (slow: two searches of 20 candidates)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from search.cli.main import main


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_a_search_finds_a_heuristic_above_every_baseline_on_slo_attainment(
    seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["search", "--target", "dit", "--budget", "20", "--workload", f"gen:images:{seed}"]
    main([*argv, "--sandbox", "process", "--db", f"sqlite:///{tmp_path / 'runs.db'}", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "finished"
    baselines = {b["name"]: b["score"] for b in report["baselines"]}
    assert len(baselines) == 4 and len(set(baselines.values())) > 1  # a workload where the baselines differ
    best = report["best"]
    assert not best["is_baseline"]
    assert best["score"] > max(baselines.values()), (best["source"], baselines)
