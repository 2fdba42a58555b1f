"""`crucible ci` end to end in a temporary git repository with a tiny config (kv, generated workloads, a
budget of four candidates, the process sandbox): a healthy champion passes; a planted worse one fails the job
and is named in every report, and the search seeded with it yields a patch that `git apply` takes;
--informational reports the same and exits 0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

pytestmark = pytest.mark.slow  # three CI jobs of about 25 sandbox jobs each: minutes on 2 busy cores

CONFIG = """
[sandbox]
backend = "process"

[search]
budget = 4
trials = 1
workers = 2

[thresholds]
alert = 0.02
fail = 0.05
margin = 0.01

[options.kv]
capacity = 300

[[workloads]]
name = "chat"
target = "kv"
path = "gen:chat:1"

[[workloads]]
name = "chat-held-out"
target = "kv"
path = "gen:chat:2"
held_out = true

[[champions]]
name = "evictor"
target = "kv"
file = "policies/evictor.py"
baseline = "lru"
"""
HEALTHY = '"""LRU: evict the least recent leaf."""\n\n\ndef priority(b, p):\n    return b.last_access\n'
WORSE = '"""MRU: evict the most recent leaf."""\n\n\ndef priority(b, p):\n    return -b.last_access\n'


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = ["git", "-C", str(repo), "-c", "user.name=ci", "-c", "user.email=ci@example.com", *args]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def ci(repo: Path, output: str, *flags: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "search.cli", "ci", "--output", output, *flags]  # ./crucible.toml
    return subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=1800, check=False)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess[str] | Path]:
    """The repository after three jobs: healthy, then the worse champion committed, then informational."""
    repo = tmp_path_factory.mktemp("repo")
    git(repo, "init", "-q")
    (repo / "policies").mkdir()
    (repo / "policies/evictor.py").write_text(HEALTHY)
    (repo / "crucible.toml").write_text(CONFIG)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "healthy champion")
    healthy = ci(repo, "healthy")
    (repo / "policies/evictor.py").write_text(WORSE)
    git(repo, "commit", "-qam", "a worse champion")
    worse = ci(repo, "worse")
    informational = ci(repo, "informational", "--informational")
    return {"repo": repo, "healthy": healthy, "worse": worse, "informational": informational}


def test_a_healthy_champion_passes_with_junit_a_parser_reads(jobs: dict) -> None:
    repo, done = jobs["repo"], jobs["healthy"]
    assert done.returncode == 0, done.stderr
    root = ElementTree.parse(repo / "healthy/junit.xml").getroot()
    cases = [(c.get("classname"), c.get("name")) for c in root.iter("testcase")]
    assert cases == [("crucible.evictor", "chat"), ("crucible.evictor", "chat-held-out")]
    assert [c.find("failure") for c in root.iter("testcase")] == [None, None]
    report = json.loads((repo / "healthy/report.json").read_text())
    assert (report["level"], report["exit_code"]) == ("ok", 0)
    (champion,) = report["champions"]
    assert all(p["verdict"] == "proved" for p in champion["properties"] if p["severity"] == "hard")
    assert [s["workload"] for s in champion["searches"]] == ["chat"]  # the held-out workload is not searched
    bench = json.loads((repo / "healthy/benchmark.json").read_text())
    assert [b["name"] for b in bench] == ["evictor / chat", "evictor / chat-held-out"]


def test_a_planted_worse_champion_fails_the_job_and_is_named_in_all_three_reports(jobs: dict) -> None:
    repo, done = jobs["repo"], jobs["worse"]
    assert done.returncode == 1, done.stderr
    root = ElementTree.parse(repo / "worse/junit.xml").getroot()
    failures = [c.get("name") for c in root.iter("testcase") if c.find("failure") is not None]
    assert failures == ["chat", "chat-held-out"]
    assert all(c.get("classname") == "crucible.evictor" for c in root.iter("testcase"))
    report = json.loads((repo / "worse/report.json").read_text())
    (champion,) = report["champions"]
    assert (report["exit_code"], champion["name"], champion["level"]) == (1, "evictor", "fail")
    previous = [c for w in champion["workloads"] for c in w["checks"] if c["against"] == "previous"]
    assert previous and all(c["level"] == "fail" and c["change"] < -0.05 for c in previous)
    summary = (repo / "worse/summary.md").read_text()
    assert "## evictor (kv, `policies/evictor.py`): ❌ fail" in summary
    assert "against previous" in summary


def test_a_better_found_heuristic_comes_back_as_a_patch_that_git_apply_takes(jobs: dict) -> None:
    repo = jobs["repo"]
    report = json.loads((repo / "worse/report.json").read_text())
    proposal = report["champions"][0]["proposal"]
    assert proposal["proposed"], proposal["reason"]
    assert proposal["mean_change"] >= 0.01
    assert (repo / "worse/patches/evictor.py").read_text() == proposal["source"]
    check = git(repo, "apply", "--check", "worse/patches/evictor.diff")
    assert check.returncode == 0, check.stderr
    git(repo, "apply", "worse/patches/evictor.diff")
    assert (repo / "policies/evictor.py").read_text() == proposal["source"]
    git(repo, "checkout", "--", "policies/evictor.py")


def test_informational_mode_exits_0_and_still_reports_the_failure(jobs: dict) -> None:
    repo, done = jobs["repo"], jobs["informational"]
    assert done.returncode == 0, done.stderr
    report = json.loads((repo / "informational/report.json").read_text())
    assert (report["informational"], report["level"], report["exit_code"]) == (True, "fail", 0)
    root = ElementTree.parse(repo / "informational/junit.xml").getroot()
    assert root.get("failures") == "2"
    assert "informational" in (repo / "informational/summary.md").read_text()
