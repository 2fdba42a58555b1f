"""The CI job's steps for each champion: prove its properties, score it and the baselines on every workload,
gate it against its previous stored scores, search seeded with it, and judge what the search found on the
held-out workloads. Everything it measures is stored as runs, so the next job has a previous score."""

from __future__ import annotations

import difflib
import subprocess
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sandbox.base import Sandbox
from sandbox.job import Result
from search.ci.config import Champion, CIConfig, Workload
from search.ci.gate import Check, Level, judge, relative_change, worst
from search.errors import UserError
from search.evaluation import Planned, checked, evaluate_baselines, plan, verify
from search.jobs import job, run
from search.proposers.base import Proposer
from search.service import Reporter, RunService, load_target, proposer_kind
from search.service.records import Policy
from search.settings import RunConfig, default
from search.stats.means import mean_metrics
from targets.base import Target
from verifiers.fingerprint import fingerprint
from verifiers.program import Program

RECORD = "ci"
"""The kind of the runs that record a job's scores of a champion (its name their subject)."""
CHAMPION_ROW = "champion"
"""The name of the champion's row in the runs this job stores (its record and its seeded searches)."""


@dataclass(frozen=True)
class WorkloadResult:
    """One champion on one workload: its score now, the baselines', and the gate's checks."""

    workload: str
    held_out: bool
    instance: str
    score: float
    metrics: dict[str, float]
    baselines: dict[str, float]
    previous: float | None
    previous_run: str
    checks: list[Check]
    level: Level
    reason: str
    """Why the level: the worst check, or the refuted property, in one line."""


@dataclass(frozen=True)
class SearchResult:
    """The budgeted search seeded with the champion on one workload."""

    workload: str
    run_id: str
    status: str
    proposer: str
    models: list[str]
    seed: int
    budget: int
    done: int
    champion: float
    best: float | None
    best_candidate: str | None
    """How every front end names it (`#seq`)."""
    tokens: int
    cost_usd: float


@dataclass(frozen=True)
class Proposal:
    """The best heuristic a search found, judged against the champion on the held-out workloads."""

    run_id: str
    candidate: str
    """The found candidate as every front end names it (`#seq`)."""
    held_out: dict[str, dict[str, float]]
    """workload -> {"found", "champion", "change"}"""
    mean_change: float | None
    proposed: bool
    reason: str
    source: str = ""
    file: str = ""
    patch: str = ""


@dataclass(frozen=True)
class ChampionResult:
    name: str
    target: str
    file: str
    """Relative to the repository's root (as the patch names it)."""
    objective: str
    direction: str
    oracles: list[str]
    """The target's baselines that read the future: never the best baseline a report names."""
    properties: list[dict[str, Any]]
    refuted: list[str]
    workloads: list[WorkloadResult]
    searches: list[SearchResult]
    proposal: Proposal | None
    record_run: str
    level: Level

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Context:
    """What every step needs: the config, the run service, the sandbox, the proposer (made and checked
    before anything runs), the repository's root and commit, and where progress goes."""

    config: CIConfig
    service: RunService
    sandbox: Sandbox
    proposer: Proposer
    root: Path
    commit: str
    say: Callable[[str], None] = print


def repository(folder: Path) -> tuple[Path, str]:
    """The git repository's root holding `folder` and its HEAD commit; the folder itself outside git."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    root = git("rev-parse", "--show-toplevel")
    return (Path(root) if root else folder.resolve()), git("rev-parse", "HEAD")


def check_champion(ctx: Context, champion: Champion) -> ChampionResult:
    """Every step for one champion; UserError for input the user must fix."""
    target = load_target(champion.target)
    program = _program(ctx, target, champion)
    maximize = target.objective.direction == "maximize"
    ctx.say(f"{champion.name}: proving {len(target.properties())} properties with Z3")
    outcomes = verify(target, program)
    refuted = [o.property for o in outcomes if o.rejects]
    previous = _previous(ctx, champion, target.objective.metric)
    results: list[WorkloadResult] = []
    measured: dict[str, list[dict[str, Any]]] = {}
    planned: dict[str, Planned] = {}
    for workload in ctx.config.workloads_of(champion):
        ctx.say(f"{champion.name}: scoring it and the baselines on {workload.name}")
        planned[workload.name] = plan(target, workload.path or None, workload.options)
        with ThreadPoolExecutor(max_workers=1) as aside:  # the champion's job beside the baselines'
            mine = aside.submit(_score, ctx, target, program, planned[workload.name], workload.name)
            workers = ctx.config.search.get("workers", default("workers"))
            baselines = evaluate_baselines(target, planned[workload.name], ctx.sandbox, workers)
            evaluated = mine.result()
        measured[workload.name] = evaluated["instances"]
        scores = {n: m[target.objective.metric] for n, m in baselines.baselines.items()}
        score = evaluated["metrics"][target.objective.metric]
        before = previous.get(workload.name)
        checks = []
        if before is not None:
            checks.append(judge("previous", score, before[0], maximize, champion.thresholds))
        if champion.baseline:
            base = scores[champion.baseline]
            checks.append(judge(f"baseline {champion.baseline}", score, base, maximize, champion.thresholds))
        level = worst([c.level for c in checks])
        reason = next((c.describe() for c in checks if c.level == level and level != "ok"), "")
        if refuted:
            level, reason = "fail", f"hard property refuted by Z3: {', '.join(refuted)}"
        results.append(
            WorkloadResult(
                workload=workload.name,
                held_out=workload.held_out,
                instance=evaluated["label"],
                score=score,
                metrics=evaluated["metrics"],
                baselines=scores,
                previous=before[0] if before else None,
                previous_run=before[1] if before else "",
                checks=checks,
                level=level,
                reason=reason,
            )
        )
    record = _record(ctx, champion, target, program, planned, measured)
    searches = [
        _search(ctx, champion, target, program, w, measured[w.name])
        for w in ctx.config.workloads_of(champion)
        if not w.held_out
    ]
    proposal = _proposal(ctx, champion, target, searches, results, planned) if not refuted else None
    return ChampionResult(
        name=champion.name,
        target=champion.target,
        file=_relative(ctx, champion.file),
        objective=target.objective.metric,
        direction=target.objective.direction,
        oracles=list(target.oracles()),
        properties=[
            {"property": o.property, "severity": o.severity, "verdict": o.verdict, "message": o.message}
            for o in outcomes
        ],
        refuted=refuted,
        workloads=results,
        searches=searches,
        proposal=proposal,
        record_run=record,
        level=worst([r.level for r in results]),
    )


def _program(ctx: Context, target: Target, champion: Champion) -> Program:
    try:
        source = champion.file.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(
            f"{ctx.config.path}: champion {champion.name}: cannot read {champion.file}: {exc}"
        ) from None
    return checked(target, source, f"{ctx.config.path}: champion {champion.name} ({champion.file})")


def _score(ctx: Context, target: Target, program: Program, planned: Planned, name: str) -> dict[str, Any]:
    """A heuristic as written (its PARAMS at their defaults) on a workload's eval instances."""
    chosen = tuple(i for i in planned.instances if i.role == "eval")
    (result,) = run(ctx.sandbox, [job(target.name, program.source, chosen, params=program.defaults())])
    if result.status != "ok":
        raise UserError(f"evaluation on {name} {result.status}: {result.message}")
    return _scored(result)


def _scored(result: Result) -> dict[str, Any]:
    runs = [asdict(i) for i in result.instances if i.role == "eval"]
    return {
        "instances": runs,
        "label": runs[0]["label"],
        "metrics": mean_metrics([r["metrics"] for r in runs]),
        "backend": result.backend,
        "params": result.params,
    }


def _previous(ctx: Context, champion: Champion, metric: str) -> dict[str, tuple[float, str]]:
    """Per workload, the champion's score in the latest earlier job that scored it, and that run's id."""
    found: dict[str, tuple[float, str]] = {}
    read = ctx.service.read
    for info in reversed(read.runs(kind=RECORD, subject=champion.name)):
        if info.target != champion.target:
            continue
        row = next((c for c in read.candidates(info.run_id) if c.name == CHAMPION_ROW), None)
        for e in row.evaluations if row else []:
            workload = e.instance.split(": ", 1)[0]
            if workload not in found and metric in e.metrics:
                found[workload] = (e.metrics[metric], info.run_id)
    return found


def _record(
    ctx: Context,
    champion: Champion,
    target: Target,
    program: Program,
    planned: Mapping[str, Planned],
    measured: Mapping[str, list[dict[str, Any]]],
) -> str:
    """This job's scores of the champion, stored by the service as a run of kind ci: the next job's
    previous scores."""
    first = planned[ctx.config.workloads_of(champion)[0].name]
    config = {"target": target.name, "workload": first.workload, "options": first.options}
    marker = {"champion": champion.name, "file": _relative(ctx, champion.file), "commit": ctx.commit}
    results = [{**r, "label": f"{name}: {r['label']}"} for name, rs in measured.items() for r in rs]
    note = f"{marker['file']} at {ctx.commit[:12] or 'an uncommitted tree'}"
    row = Policy(CHAMPION_ROW, program.source, results, program.defaults(), note)
    return ctx.service.record_scores(
        RECORD, champion.name, target.name, config, [row], target.objective.metric, marker
    )


def _search(
    ctx: Context,
    champion: Champion,
    target: Target,
    program: Program,
    workload: Workload,
    measured: list[dict[str, Any]],
) -> SearchResult:
    """A budgeted search on the workload with the champion seeded into the islands (run like a baseline;
    a champion that is a copy of a baseline is already there)."""
    known = {fingerprint(source) for source in target.baselines().values()}
    seeds = {} if fingerprint(program.source) in known else {f"champion {champion.name}": program.source}
    info = ctx.service.create(
        target.name, workload.path or None, workload.options, **ctx.config.search, seeds=seeds
    )
    settings = RunConfig.from_json(info.config)
    score = mean_metrics([r["metrics"] for r in measured])[target.objective.metric]
    ctx.say(f"{champion.name}: searching on {workload.name} (run {info.run_id}, budget {settings.budget})")
    ctx.service.execute(info.run_id, ctx.sandbox, ctx.proposer, _Quiet(ctx.say))
    done = ctx.service.read.run(info.run_id)
    best = done.best
    models = list(proposer_kind(settings.proposer).models(settings.proposer_settings))
    return SearchResult(
        workload=workload.name,
        run_id=info.run_id,
        status=done.status,
        proposer=settings.proposer,
        models=models,
        seed=settings.seed,
        budget=settings.budget,
        done=done.done,
        champion=score,
        best=best.score if best else None,
        best_candidate=best.label if best else None,
        tokens=done.tokens,
        cost_usd=done.cost_usd,
    )


class _Quiet(Reporter):
    """The search's notes go to the job's log; per-candidate progress stays out of it."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say

    def note(self, message: str) -> None:
        self.say(f"  {message}")


def _proposal(
    ctx: Context,
    champion: Champion,
    target: Target,
    searches: list[SearchResult],
    results: list[WorkloadResult],
    planned: Mapping[str, Planned],
) -> Proposal | None:
    """The found heuristic with the largest gain over the champion where it was searched, scored on the
    held-out workloads; proposed when its mean relative gain there reaches the margin."""
    maximize = target.objective.direction == "maximize"
    scored = [s for s in searches if s.best is not None and s.best_candidate is not None]
    if not scored:
        return None
    top = max(scored, key=lambda s: relative_change(s.best or 0.0, s.champion, maximize))
    assert top.best_candidate is not None
    source = ctx.service.read.best_file(top.run_id)
    found = checked(target, source, f"run {top.run_id}'s best")
    held = [w for w in ctx.config.workloads_of(champion) if w.held_out]
    if not held:
        return Proposal(
            top.run_id, top.best_candidate, {}, None, False, "no held-out workload to judge it on"
        )
    mine = {r.workload: r.score for r in results}
    figures: dict[str, dict[str, float]] = {}
    for workload in held:
        ctx.say(f"{champion.name}: scoring run {top.run_id}'s best on held-out {workload.name}")
        score = _score(ctx, target, found, planned[workload.name], workload.name)["metrics"][
            target.objective.metric
        ]
        change = relative_change(score, mine[workload.name], maximize)
        figures[workload.name] = {"found": score, "champion": mine[workload.name], "change": change}
    mean = sum(f["change"] for f in figures.values()) / len(figures)
    margin = champion.thresholds.margin
    if mean < margin:
        reason = f"mean gain {mean:+.2%} on the held-out workloads is below the margin {margin:.2%}"
        return Proposal(top.run_id, top.best_candidate, figures, mean, False, reason)
    old = champion.file.read_text()
    patch = unified_diff(old, source, _relative(ctx, champion.file))
    reason = f"mean gain {mean:+.2%} on the held-out workloads reaches the margin {margin:.2%}"
    return Proposal(
        top.run_id, top.best_candidate, figures, mean, True, reason, source, champion.file.name, patch
    )


def unified_diff(old: str, new: str, path: str) -> str:
    """A diff of `path` that `git apply` takes at the repository's root (missing final newlines marked)."""
    lines = list(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}"
        )
    )
    out = [f"diff --git a/{path} b/{path}\n"]
    for line in lines:
        out.append(line)
        if not line.endswith("\n"):
            out[-1] = line + "\n"
            out.append("\\ No newline at end of file\n")
    return "".join(out) if lines else ""


def _relative(ctx: Context, file: Path) -> str:
    try:
        return file.resolve().relative_to(ctx.root.resolve()).as_posix()
    except ValueError:
        return str(file)
