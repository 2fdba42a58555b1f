"""The CI job's reports: JUnit a parser reads, github-action-benchmark's format, the job summary, a patch
that `git apply` takes, and the exit code the gate gives."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from xml.etree import ElementTree

import pytest

from search.ci.config import Thresholds
from search.ci.gate import judge, relative_change
from search.ci.pipeline import ChampionResult, WorkloadResult, unified_diff
from search.ci.reports import CIReport, benchmark, junit, markdown, write

THRESHOLDS = Thresholds(alert=0.02, fail=0.05, margin=0.01)


def workload(name: str, score: float, previous: float | None, maximize: bool = True) -> WorkloadResult:
    checks = [judge("previous", score, previous, maximize, THRESHOLDS)] if previous is not None else []
    level = checks[0].level if checks else "ok"
    reason = checks[0].describe() if checks and level != "ok" else ""
    baselines = {"lru": 0.3, "s3fifo": 0.35, "belady": 0.9}
    return WorkloadResult(
        name, False, f"{name}@1", score, {"m": score}, baselines, previous, "r0", checks, level, reason
    )


def champion(name: str, *workloads: WorkloadResult, direction: str = "maximize") -> ChampionResult:
    levels = [w.level for w in workloads]
    level = "fail" if "fail" in levels else "alert" if "alert" in levels else "ok"
    return ChampionResult(name, "kv", f"policies/{name}.py", "block_hit_rate", direction, ["belady"], [], [],
                          list(workloads), [], None, "rec", level)  # fmt: skip


def test_the_gate_measures_relative_worsening_in_the_objective_s_direction() -> None:
    assert relative_change(0.9, 1.0, maximize=True) == pytest.approx(-0.1)
    assert relative_change(90.0, 100.0, maximize=False) == pytest.approx(0.1)
    assert judge("previous", 0.99, 1.0, True, THRESHOLDS).level == "ok"
    assert judge("previous", 0.97, 1.0, True, THRESHOLDS).level == "alert"
    assert judge("previous", 0.90, 1.0, True, THRESHOLDS).level == "fail"
    assert judge("previous", 110.0, 100.0, False, THRESHOLDS).level == "fail"


def test_junit_has_one_case_per_champion_and_workload_and_fails_the_regressed_one() -> None:
    report = CIReport("crucible.toml", "abc", False, [
        champion("good", workload("chat", 0.5, 0.5), workload("agentic", 0.4, None)),
        champion("worse", workload("chat", 0.2, 0.5)),
    ])  # fmt: skip
    root = ElementTree.fromstring(junit(report))
    cases = {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}
    assert sorted(cases) == [
        ("crucible.good", "agentic"),
        ("crucible.good", "chat"),
        ("crucible.worse", "chat"),
    ]
    failed = [key for key, case in cases.items() if case.find("failure") is not None]
    assert failed == [("crucible.worse", "chat")]
    assert (root.get("tests"), root.get("failures")) == ("3", "1")
    assert report.exit_code == 1
    assert CIReport("crucible.toml", "abc", True, report.champions).exit_code == 0


def test_the_summary_names_the_best_baseline_a_policy_could_be_not_the_oracle() -> None:
    report = CIReport("crucible.toml", "abc", False, [champion("good", workload("chat", 0.5, 0.5))])
    (row,) = [line for line in markdown(report).splitlines() if line.startswith("| chat |")]
    assert "| s3fifo 0.3500 |" in row and "belady" not in row


def test_benchmark_entries_follow_github_action_benchmark_s_custom_format_by_direction() -> None:
    report = CIReport("c", "", False, [
        champion("hits", workload("chat", 0.5, None)),
        champion("latency", workload("chat", 80.0, None, maximize=False), direction="minimize"),
    ])  # fmt: skip
    tools = benchmark(report)
    assert tools["customBiggerIsBetter"] == [
        {
            "name": "hits / chat",
            "unit": "block_hit_rate",
            "value": 0.5,
            "extra": "target kv; instance chat@1; gate ok",
        }
    ]
    assert [e["name"] for e in tools["customSmallerIsBetter"]] == ["latency / chat"]


def test_every_report_is_written_and_the_summary_also_goes_to_the_step_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    step = tmp_path / "step.md"
    step.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    report = CIReport("crucible.toml", "abc", False, [champion("worse", workload("chat", 0.2, 0.5))])
    written = {p.name for p in write(report, tmp_path / "out")}
    assert written == {"summary.md", "report.json", "junit.xml", "benchmark.json"}
    summary = (tmp_path / "out/summary.md").read_text()
    assert "worse" in summary and "❌ fail" in summary and "-60.00% against previous" in summary
    assert step.read_text() == "earlier step\n" + summary + "\n"
    data = json.loads((tmp_path / "out/report.json").read_text())
    assert (data["level"], data["exit_code"], data["champions"][0]["workloads"][0]["level"]) == (
        "fail",
        1,
        "fail",
    )
    assert markdown(report).startswith("# Crucible CI: ❌ fail")


@pytest.mark.parametrize("ending", ["\n", ""])
def test_the_patch_applies_with_git_apply_at_the_repository_root(tmp_path: Path, ending: str) -> None:
    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "-C", str(tmp_path), *args], capture_output=True, text=True, check=False
        )

    git("init", "-q")
    (tmp_path / "policies").mkdir()
    old = '"""MRU."""\n\n\ndef priority(b, p):\n    return -b.last_access' + ending
    new = '"""LRU."""\n\n\ndef priority(b, p):\n    return b.last_access\n'
    (tmp_path / "policies/evictor.py").write_text(old)
    (tmp_path / "fix.diff").write_text(unified_diff(old, new, "policies/evictor.py"))
    done = git("apply", "fix.diff")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "policies/evictor.py").read_text() == new


def test_the_example_workflow_runs_nightly_and_on_demand_and_uploads_the_reports() -> None:
    import yaml

    root = Path(__file__).resolve().parents[3]
    workflow = yaml.safe_load((root / ".github/workflows/crucible-nightly.yml").read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as true
    assert "schedule" in triggers and "workflow_dispatch" in triggers
    steps = workflow["jobs"]["crucible"]["steps"]
    runs = " ".join(s.get("run", "") for s in steps)
    assert (
        "crucible sandbox build" in runs and "crucible ci --config crucible.toml --output crucible-ci" in runs
    )
    uploads = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact")]
    assert uploads and uploads[0]["with"]["path"] == "crucible-ci/" and uploads[0]["if"] == "always()"
