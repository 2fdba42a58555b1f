"""The CI job's outputs, all rendered from one CIReport: a Markdown summary, a JSON report, a benchmark file
github-action-benchmark charts, JUnit XML (one test case per champion x workload) and the proposed patches."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from search.ci.gate import Level
from search.ci.pipeline import ChampionResult
from search.errors import UserError

EXIT_OK, EXIT_REGRESSION, EXIT_INPUT = 0, 1, 2


@dataclass(frozen=True)
class CIReport:
    config: str
    commit: str
    informational: bool
    champions: list[ChampionResult]

    @property
    def level(self) -> Level:
        levels = [c.level for c in self.champions]
        return "fail" if "fail" in levels else "alert" if "alert" in levels else "ok"

    @property
    def exit_code(self) -> int:
        """1 when a champion regressed past a fail threshold or failed a hard property; 0 if informational."""
        return EXIT_REGRESSION if self.level == "fail" and not self.informational else EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "champions": [c.to_json() for c in self.champions],
            "level": self.level,
            "exit_code": self.exit_code,
        }


MARK = {"ok": "✅ ok", "alert": "⚠️ alert", "fail": "❌ fail"}


def markdown(report: CIReport) -> str:
    """The job summary: per champion and workload, its score against its previous one, the baselines and
    the best found; then the proofs, the search (cost, seed, model) and any proposed patch."""
    mode = " (informational: failures do not fail the job)" if report.informational else ""
    lines = [
        f"# Crucible CI: {MARK[report.level]}{mode}",
        "",
        f"Config `{report.config}`, commit `{report.commit[:12] or 'none'}`.",
        "",
    ]
    for c in report.champions:
        searched = {s.workload: s for s in c.searches}
        lines += [
            f"## {c.name} ({c.target}, `{c.file}`): {MARK[c.level]}",
            "",
            f"Objective: {c.objective} ({c.direction}).",
            "",
            "| workload | champion | previous | best baseline | best found | gate |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for w in c.workloads:
            previous = "-" if w.previous is None else f"{w.previous:.4f}"
            best_name = _best({n: s for n, s in w.baselines.items() if n not in c.oracles}, c.direction)
            baseline = f"{best_name} {w.baselines[best_name]:.4f}" if best_name else "-"
            found = searched.get(w.workload)
            best = "held out" if w.held_out else "-"
            if found and found.best is not None:
                best = f"{found.best:.4f} (run {found.run_id})"
            if c.proposal and w.workload in c.proposal.held_out:
                best = f"{c.proposal.held_out[w.workload]['found']:.4f} (held out)"
            gate = MARK[w.level] + (f": {w.reason}" if w.reason else "")
            lines.append(f"| {w.workload} | {w.score:.4f} | {previous} | {baseline} | {best} | {gate} |")
        lines.append("")
        verdicts = ", ".join(f"{p['property']} {p['verdict']}" for p in c.properties)
        lines += [f"Z3: {verdicts or 'no properties'}.", ""]
        for s in c.searches:
            models = ", ".join(s.models) or "none"
            lines.append(
                f"Search on {s.workload}: run `{s.run_id}` ({s.status}), {s.done}/{s.budget} candidates, "
                f"proposer {s.proposer}, model {models}, seed {s.seed}, {s.tokens} tokens, ${s.cost_usd:.4f}."
            )
        if c.proposal:
            lines += [
                "",
                f"Best found (run `{c.proposal.run_id}`, {c.proposal.candidate}): {c.proposal.reason}.",
            ]
            if c.proposal.proposed:
                lines.append(f"Patch: `patches/{c.name}.diff` (new file `patches/{c.name}.py`).")
        lines.append("")
    return "\n".join(lines)


def _best(scores: dict[str, float], direction: str) -> str:
    if not scores:
        return ""
    pick = max if direction == "maximize" else min
    return pick(scores, key=lambda name: scores[name])


def benchmark(report: CIReport) -> dict[str, list[dict[str, Any]]]:
    """github-action-benchmark's custom entries, by tool: each champion's objective on each workload."""
    tools: dict[str, list[dict[str, Any]]] = {"customBiggerIsBetter": [], "customSmallerIsBetter": []}
    for c in report.champions:
        tool = "customBiggerIsBetter" if c.direction == "maximize" else "customSmallerIsBetter"
        for w in c.workloads:
            extra = f"target {c.target}; instance {w.instance}; gate {w.level}"
            tools[tool].append(
                {"name": f"{c.name} / {w.workload}", "unit": c.objective, "value": w.score, "extra": extra}
            )
    return {tool: entries for tool, entries in tools.items() if entries}


def junit(report: CIReport) -> str:
    """One test suite per champion, one test case per workload; a fail-level gate is a failure."""
    suites = ElementTree.Element("testsuites", name="crucible ci")
    total = failures = 0
    for c in report.champions:
        suite = ElementTree.SubElement(suites, "testsuite", name=c.name)
        failed = 0
        for w in c.workloads:
            case = ElementTree.SubElement(suite, "testcase", classname=f"crucible.{c.name}", name=w.workload)
            if w.level == "fail":
                failed += 1
                failure = ElementTree.SubElement(case, "failure", message=w.reason, type="regression")
                failure.text = w.reason
            out = ElementTree.SubElement(case, "system-out")
            checks = "; ".join(check.describe() for check in w.checks) or "no reference yet"
            out.text = f"{c.objective} {w.score:.6g} on {w.instance}; {checks}; gate {w.level}"
        suite.set("tests", str(len(c.workloads)))
        suite.set("failures", str(failed))
        total, failures = total + len(c.workloads), failures + failed
    suites.set("tests", str(total))
    suites.set("failures", str(failures))
    ElementTree.indent(suites)
    return ElementTree.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def check_output(folder: Path) -> None:
    """Make sure the reports can be written into `folder` before any work starts, leaving nothing behind:
    one line (exit 2) where they cannot (a file in the way, a folder or a parent that is not writable)."""
    if folder.exists() and not folder.is_dir():
        raise UserError(f"--output {folder}: a file, not a folder for the reports")
    if folder.is_dir():
        try:
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".crucible-check-"):
                pass
        except OSError as exc:
            raise UserError(f"--output {folder}: reports cannot be written there ({exc.strerror})") from None
        return
    parent = next(p for p in folder.absolute().parents if p.exists())
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"--output {folder}: cannot be made in {parent} (not a writable folder)")


def write(report: CIReport, folder: Path) -> list[Path]:
    """Every output into `folder` (made if absent); the summary also onto $GITHUB_STEP_SUMMARY when set."""
    folder.mkdir(parents=True, exist_ok=True)
    summary = markdown(report)
    files = {
        "summary.md": summary,
        "report.json": json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n",
        "junit.xml": junit(report),
    }
    for tool, entries in benchmark(report).items():
        name = "benchmark.json" if tool == "customBiggerIsBetter" else "benchmark-smaller.json"
        files[name] = json.dumps(entries, indent=2) + "\n"
    for c in report.champions:
        if c.proposal and c.proposal.proposed:
            files[f"patches/{c.name}.py"] = c.proposal.source
            files[f"patches/{c.name}.diff"] = c.proposal.patch
    written = []
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    step = os.environ.get("GITHUB_STEP_SUMMARY")
    if step:
        with open(step, "a", encoding="utf-8") as out:
            out.write(summary + "\n")
    return written
