"""A run drawn as tables: its policies' metrics, the found candidate against each baseline, the held-out
tail, a study's front, where the budget went. Every figure is the read model's (`--json` prints the same)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from rich.console import RenderableType
from rich.table import Table

from search.cli.render import metrics_table, show
from search.settings import DEFAULT_STORE
from targets.base import Objective, Target

if TYPE_CHECKING:
    from search.service import Budget, HoldoutReport, ProposerStats, RunInfo, RunReport, StudyReport


def resume_command(run_id: str, db: str) -> str:
    """The command that resumes a run, with the store it lives in unless that is the default."""
    store = "" if db == DEFAULT_STORE else f" --db {db}"
    return f"crucible search --resume {run_id}{store}"


def status(info: RunInfo, db: str) -> str:
    """A run's status as lists show it; an interrupted run says how to resume it, in its own store."""
    if info.status == "interrupted":
        return f"interrupted (resume with: {resume_command(info.run_id, db)})"
    return info.status


def found_name(report: RunReport) -> str:
    """How every front end names the found candidate: by its number in the run."""
    assert report.best is not None
    return f"found {report.best.label}"


def result(report: RunReport, target: Target, db: str) -> list[RenderableType | str]:
    """The run's table, the found candidate's ratios, the tail and study tables, spend, what to do next."""
    run, best = report.run, report.best
    rows: dict[str, dict[str, float]] = {}
    if best:
        rows[found_name(report)] = best.metrics
    rows.update(report.baseline_metrics())
    objective = Objective(run.objective, run.direction)
    lines: list[RenderableType | str] = [
        metrics_table(f"run {run.run_id} ({run.status})", rows, target, objective)
    ]
    if best and best.score is not None:
        lines.append(ratios(report))
    if report.holdout:
        lines.append(holdout_table(report.holdout, run.objective))
    if report.study:
        lines.append(study_table(report.study))
    if run.tokens or run.cost_usd:
        lines.append(f"proposals used {run.tokens} tokens, ${run.cost_usd:.4f}")
    lines.extend(verdict(report, db))
    return lines


def verdict(report: RunReport, db: str) -> list[str]:
    """What the run found, in words, on the evidence that counts (the held-out tail where it has one):
    better than every non-oracle baseline there, or not (and by how much)."""
    run, judged = report.run, report.judgement()
    if judged is None:
        return []
    take = f"crucible runs best {run.run_id}{'' if db == DEFAULT_STORE else f' --db {db}'} --output best.py"
    there = "" if judged.on == "the workload" else f" on {judged.on}"
    engine = run.config.get("for_engine")
    into = [f"then into {engine}: crucible export best.py --to {engine}"] if engine else []
    if judged.rival is None:
        return [f"best heuristic: {take}", *into]
    if judged.better:
        return [f"best heuristic ({judged.found}, better than every baseline{there}): {take}", *into]
    return [
        f"found nothing better than the best baseline{there}: {judged.rival} {judged.rival_score:.4f} "
        f"against {judged.found} {judged.found_score:.4f} ({run.objective}, {run.direction}); the best "
        f"found is still {take.removeprefix('crucible ')}",
        *into,
    ]


def ratios(report: RunReport) -> str:
    """The found candidate's objective as a multiple of each baseline's (a baseline at 0 left out), on the
    held-out tail where it has one, the oracles apart: they are the bound, not baselines to beat."""
    run, judged = report.run, report.judgement()
    assert judged is not None

    def multiples(found: Mapping[str, float]) -> str:
        return ", ".join(f"{name} {ratio:.3f}x" for name, ratio in found.items())

    there = "" if judged.on == "the workload" else f" on {judged.on}"
    line = f"{run.objective} ({run.direction}) of found {judged.found}{there} against each baseline: "
    line += multiples(judged.ratios)
    return f"{line}; against the oracle: {multiples(judged.bounds)}" if judged.bounds else line


def holdout_table(holdout: HoldoutReport, metric: str) -> Table:
    """Each policy's objective on the head it was selected on, and on the held-out tail."""
    table = Table(title=f"{metric}, held-out tail")
    table.add_column("policy")
    tail = f"tail {holdout.tail}" + (" warm" if holdout.warm else "")
    for name in (holdout.head_label(), tail, "tail re-tuned", "found / this, tail"):
        table.add_column(name, justify="right")
    found = holdout.found_tail()
    for row in holdout.rows:
        cells = (row.head, row.tail, row.tail_retuned)
        ratio = f"{found / row.tail:.3f}" if found is not None and row.tail else "-"
        name = f"{row.name} (oracle)" if row.oracle else row.name
        table.add_row(name, *("-" if c is None else f"{c:.4f}" for c in cells), ratio)
    return table


def study_table(study: StudyReport) -> Table:
    """A tune study's front, best first by its first objective: knobs, and each objective on train and
    on eval; the policy as configured first (eval only)."""
    points, configured_values = study.points, study.configured_values
    objectives = study.objectives
    knobs = sorted({k for p in points for k in p.values} | set(configured_values))
    table = Table(title=f"study {study.study}: Pareto front of {len(points)} trials")
    for column in ("point", *knobs, *(f"{m} ({r})" for r in ("train", "eval") for m in objectives)):
        table.add_column(column, justify="left" if column == "point" else "right")

    def row(
        name: str, values: Mapping[str, float], train: Mapping[str, float], held: Mapping[str, float]
    ) -> None:
        figures = [f.get(m) for f in (train, held) for m in objectives]
        table.add_row(
            name, *(f"{values[k]:.6g}" if k in values else "-" for k in knobs),
            *("-" if f is None else f"{f:.4f}" for f in figures),
        )  # fmt: skip

    row("as configured", configured_values, {}, study.configured)
    for point in study.front():
        row(f"trial {point.trial}", point.values, point.train, point.eval)
    return table


def runs_table(runs: Sequence[RunInfo], db: str) -> Table:
    table = Table(title=f"runs in {db}")
    for col in ("run", "kind", "target", "status", "created", "candidates", "best", "best baseline"):
        table.add_column(col, justify="right" if col in ("candidates", "best") else "left")
    for r in runs:
        best = "-" if r.best is None else f"{r.best.score:.4f}"
        rival = r.best_baseline
        baseline = "-" if rival is None or rival.score is None else f"{rival.name} {rival.score:.4f}"
        table.add_row(
            r.run_id,
            r.kind,
            r.target,
            status(r, db),
            r.created_at[:16].replace("T", " "),
            f"{r.done}/{r.budget}",
            best,
            baseline,
        )
    return table


def stats_table(stats: Sequence[ProposerStats]) -> Table:
    table = Table(title="by proposer and model")
    columns = (
        "proposer",
        "model",
        "proposals",
        "failed",
        "rejected",
        "ran",
        "improved",
        "best",
        "tokens",
        "cost",
    )
    for name in columns:
        table.add_column(name, justify="left" if name in ("proposer", "model") else "right")
    for s in stats:
        best = "-" if s.best is None else f"{s.best:.4f}"
        counts = (s.proposals, s.failed, s.rejected, s.ran, s.improved)
        table.add_row(
            s.proposer,
            s.model or "-",
            *(str(n) for n in counts),
            best,
            str(s.tokens),
            f"${s.cost_usd:.4f}",
        )
    return table


def budget_line(b: Budget) -> str:
    """Where the proposals went, in one line: discarded, stopped before the sandbox, run."""
    line = (
        f"budget: {b.duplicates} duplicates and {b.failed_proposals} failed proposals discarded; "
        f"{b.static} rejected by the static check, {b.refuted} refuted by the verifier, "
        f"{b.behaved_alike} behaved as an evaluated program (not tuned), {b.faulted} failed in the sandbox, "
        f"{b.gated} gated by the cascade, {b.evaluated} evaluated"
    )
    return line + (f", {b.pending} pending" if b.pending else "")


def whole_run(report: RunReport, target: Target, db: str) -> None:
    """`runs show`: the run's state, settings, where its budget went, its proposers, then its result."""
    info = report.run
    lines: list[RenderableType | str] = [
        f"run {info.run_id} ({info.kind}): {status(info, db)} {info.message}".rstrip(),
        f"config: {json.dumps(info.config, sort_keys=True)}",
        f"candidates: {json.dumps(info.counts, sort_keys=True)}",
    ]
    if report.budget:
        lines.append(budget_line(report.budget))
    if report.failures:
        lines.append(f"failed, by class: {json.dumps(report.failures, sort_keys=True)}")
    refuted = report.verification.rejected_by_property
    if refuted:
        lines.append(f"rejected by property: {json.dumps(refuted, sort_keys=True)}")
    if report.proposers:
        lines.append(stats_table(report.proposers))
    show(*lines, *result(report, target, db))
