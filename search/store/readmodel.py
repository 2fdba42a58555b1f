"""What happened in a run, answered from the store alone: every front end (CLI `--json`, UI, CI) reads this.

Nothing here re-evaluates or writes; each answer is a frozen dataclass whose `to_json()` is what the CLI
prints. Derived figures (best, counts, spend, per-proposer statistics) are computed from the stored rows
each time, so they always agree with the rows they come from.
"""

from __future__ import annotations

import json
import os
import re
import socket
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import targets
from search.errors import UserError
from search.stats import pareto
from search.stats.importance import param_importances
from search.stats.means import mean_metrics
from search.store.store import TUNE, Store
from search.store.tables import Candidate, Evaluation, Event, Run
from search.terms import BASELINE, TAIL, TAIL_RETUNED, UNSEEN, WHOLE, Split
from targets.base import Objective, Target, timelines
from verifiers.static import StaticError, check, render

RAN = ("evaluated", "gated")
"""Candidate statuses of a candidate the sandbox scored (on every instance, or gated after training)."""
NOT_FAILED = (*RAN, "pending", "duplicate")


class _Record:
    """A read-model answer: plain data, printed by `--json` as it is."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload, no-any-return]


@dataclass(frozen=True)
class CandidateRef(_Record):
    candidate_id: int
    seq: int
    score: float
    label: str
    """How every front end names it: `#seq`, its number in the run."""


@dataclass(frozen=True)
class BaselineRef(_Record):
    name: str
    score: float | None


@dataclass(frozen=True)
class RunInfo(_Record):
    """One run as a list shows it: settings, state, progress, best against the best baseline, spend."""

    run_id: str
    kind: str
    """search | tune | ci | validate: which verb of the run service made the run."""
    target: str
    workload: str
    options: dict[str, Any]
    config: dict[str, Any]
    status: str
    """running | finished | stopped | failed | interrupted (stored as running, its process is gone)"""
    message: str
    resumable: bool
    created_at: str
    updated_at: str
    budget: int
    done: int
    """Candidates finished, behavioural duplicates aside (they spend none of the budget)."""
    counts: dict[str, int]
    objective: str
    direction: str
    best: CandidateRef | None
    best_baseline: BaselineRef | None
    """The best baseline a policy could be: the target's oracles (they read the future) are left out."""
    oracle: BaselineRef | None
    """The best oracle: the bound, not a baseline to beat (None for a target without one)."""
    tokens: int
    cost_usd: float


@dataclass(frozen=True)
class Verdict(_Record):
    property: str
    severity: str
    verdict: str
    seconds: float
    counterexample: dict[str, Any] | None
    message: str


@dataclass(frozen=True)
class EvaluationInfo(_Record):
    instance: str
    role: str
    metrics: dict[str, float]
    params: dict[str, float]
    seconds: float
    backend: str
    timelines: dict[str, list[list[float]]] = field(default_factory=dict)
    """Figures over time, where the target keeps them: series -> lane (a fleet's instance) -> points."""
    step_s: float = 0.0
    """Seconds between two points of a timeline."""


@dataclass(frozen=True)
class CandidateInfo(_Record):
    """One candidate with its lineage, verdicts, tuned PARAMS and metrics per instance."""

    candidate_id: int
    seq: int
    label: str
    """How every front end names it: a baseline (or a tune trial) by its name, a candidate as `#seq`."""
    name: str
    status: str
    message: str
    failure_class: str
    """Empty unless it failed: the status, and for a rejection the rule or property that rejected it."""
    parent_id: int | None
    inspirations: list[int]
    island: int
    proposer: str
    model: str
    note: str
    tokens: int
    cost_usd: float
    proposal: dict[str, Any]
    """How it was proposed: seconds, and where a model wrote it its tokens and each reply's fate."""
    source: str
    params: dict[str, float]
    trials: list[dict[str, Any]]
    """The Optuna study that tuned `params`: {number, params, value, state} per trial, in order."""
    train_score: float | None
    score: float | None
    metrics: dict[str, float]
    """Each metric averaged over the eval instances."""
    is_baseline: bool
    behaviour: str
    """How it ranked the target's behaviour sample, hashed: alike programs share it (empty if unmeasured)."""
    verdicts: list[Verdict]
    evaluations: list[EvaluationInfo]
    backend: str
    created_at: str
    finished_at: str | None


@dataclass(frozen=True)
class BaselineInfo(_Record):
    name: str
    kind: str
    """candidate (written in the candidate format, a row of the run) | builtin (a mechanism variant)"""
    evaluations: list[EvaluationInfo]
    metrics: dict[str, float]
    """Each metric averaged over the eval instances."""
    score: float | None
    oracle: bool = False
    """A built-in that reads the future (kv's Belady, batching's SRPT): a bound, not a policy to beat."""


@dataclass(frozen=True)
class EventInfo(_Record):
    kind: str
    message: str
    at: str
    proposer: str
    model: str
    tokens: int
    cost_usd: float
    proposal: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ProposalInfo(_Record):
    """One proposal of a run, in the order made: a candidate, or a proposal that came to none."""

    at: str
    proposer: str
    model: str
    outcome: str
    """A candidate's status (evaluated, rejected...); `failed` (no program came out) or `duplicate` (a
    program the run already had) for a proposal that made no candidate."""
    message: str
    seq: int | None
    """The candidate it became; None when it became none."""
    tokens: int
    cost_usd: float
    seconds: float | None
    """None where the store predates these figures."""
    prompt_tokens: int
    completion_tokens: int
    replies: list[str]
    """What became of each reply of a model, in turn: `ok`, or why it was sent back or given up."""
    estimated: bool = False
    """The tokens are estimated: the server reported no usage."""


@dataclass(frozen=True)
class ProgressPoint(_Record):
    """One finished candidate in completion order, for best-against-candidates and against-cost plots."""

    done: int
    seq: int
    candidate_id: int
    island: int
    status: str
    score: float | None
    best_so_far: float | None
    cost_so_far: float
    at: str


@dataclass(frozen=True)
class ProposerStats(_Record):
    """One proposer (and model) in one run; `improved` counts evaluated children that beat their parent."""

    proposer: str
    model: str
    proposals: int = 0
    """Attempts: candidates written plus failed proposals."""
    failed: int = 0
    rejected: int = 0
    """Candidates that never ran to the end: the static check, the verifier or the sandbox stopped them."""
    ran: int = 0
    """Candidates the sandbox scored (evaluated on every instance, or gated after the training share)."""
    improved: int = 0
    best: float | None = None
    tokens: int = 0
    cost_usd: float = 0.0
    failures: dict[str, int] = field(default_factory=dict)
    """Failed proposals and rejected candidates by class (the text before the first colon)."""

    @property
    def success_rate(self) -> float:
        return self.ran / self.proposals if self.proposals else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "success_rate": self.success_rate}


@dataclass(frozen=True)
class VerificationCounts(_Record):
    verdicts: dict[str, dict[str, int]]
    """Per property, how many candidates got each verdict."""
    rejected_by_property: dict[str, int]
    """Per hard property, the candidates it rejected (the first refuted one of each)."""
    median_seconds_per_candidate: float | None


@dataclass(frozen=True)
class Budget(_Record):
    """Where a run's proposals went: thrown away before they were candidates, stopped before the sandbox,
    or run (to the end, or gated by the cascade after the train share). Baselines are not counted."""

    duplicates: int
    """Proposals whose program was already a candidate of the run (discarded, proposed again)."""
    failed_proposals: int
    """Proposals that produced no program (no valid mutation, no usable reply)."""
    static: int
    """Candidates the static check rejected."""
    refuted: int
    """Candidates the verifier refuted (a counterexample to a hard property)."""
    behaved_alike: int
    """Candidates whose job found them ranking the behaviour sample as an evaluated program: not tuned."""
    faulted: int
    """Candidates that failed in the sandbox (an error, a timeout, a lost job)."""
    gated: int
    evaluated: int
    pending: int


@dataclass(frozen=True)
class HoldoutRow(_Record):
    """One policy on a run's held-out tail: the objective on the head (where it was tuned and selected), on
    the tail as tuned on the head, and on the tail after re-tuning there (None where not measured)."""

    name: str
    kind: str
    """found (the best candidate) | candidate (a baseline in candidate form) | builtin"""
    head: float | None
    tail: float | None
    tail_retuned: float | None
    tail_metrics: dict[str, float]
    tail_retuned_metrics: dict[str, float]
    oracle: bool = False
    """A built-in that reads the future: the tail's bound, not a policy to beat."""


@dataclass(frozen=True)
class HoldoutReport(_Record):
    """Where the run's workload was cut in time (START:STOP windows of its requests); each policy's scores."""

    share: float
    head: str
    tail: str
    rows: list[HoldoutRow]
    warm: bool = False
    """The tail was replayed after the requests before it (uncounted), as in service, not from empty."""
    select: str = WHOLE
    """What the head figures score: the whole head, or (`unseen`) its part after the train share."""

    def head_label(self) -> str:
        """What the head column scores, as a table heads it."""
        return f"head {self.head}" + (", unseen part" if self.select == UNSEEN else "")

    def found_tail(self) -> float | None:
        """The found policy's objective on the tail as tuned on the head (None until it is scored)."""
        return next((r.tail for r in self.rows if r.kind == "found"), None)


@dataclass(frozen=True)
class StudyPoint(_Record):
    """One trial of a `crucible tune` study: its knob values, its objectives on the train instances, and on
    the eval instances where it was scored there (the front the study ended with)."""

    trial: int
    candidate_id: int
    values: dict[str, float]
    train: dict[str, float]
    eval: dict[str, float]
    front: bool
    """No other trial of the study is at least as good on every objective and better on one (on train)."""


@dataclass(frozen=True)
class StudyReport(_Record):
    """A `crucible tune` study as its run recorded it: the objectives (the first is the run's score), the
    trials that ran with values, and the policy as configured on the eval instances."""

    study: str
    policy: str
    objectives: dict[str, str]
    """Metric -> maximize | minimize, in the order given."""
    points: list[StudyPoint]
    configured_values: dict[str, float]
    """The policy as configured: its PARAMS defaults and the options as given (the study's first trial)."""
    configured: dict[str, float]
    """Its objectives on the eval instances."""
    failed: int
    """Trials that ran without a value (their job failed): not on any chart."""

    def front(self) -> list[StudyPoint]:
        """The non-dominated trials, best first by the first objective."""
        first, direction = next(iter(self.objectives.items()))
        sign = -1.0 if direction == "maximize" else 1.0
        return sorted((p for p in self.points if p.front), key=lambda p: (sign * p.train[first], p.trial))


@dataclass(frozen=True)
class Judgement(_Record):
    """What a run found, judged on the evidence that counts: the held-out tail where the run held one out
    and it was scored, else the workload it searched. `ratios` are the found policy's objective as a
    multiple of each baseline's, `bounds` of each oracle's (the bound, not a baseline to beat)."""

    on: str
    """"the workload", "the requests after the train share" (what `--select unseen` ranks on) or "the
    held-out tail"."""
    found: str
    found_score: float
    rival: str | None
    """The best baseline there (oracles aside); None where there is none to compare with."""
    rival_score: float | None
    better: bool
    """Better than every baseline there, in the objective's direction."""
    ratios: dict[str, float]
    bounds: dict[str, float]


@dataclass(frozen=True)
class RunReport:
    """Everything `runs show --json` prints: the run, its best candidate, baselines and statistics."""

    run: RunInfo
    best: CandidateInfo | None
    baselines: list[BaselineInfo]
    proposers: list[ProposerStats]
    verification: VerificationCounts
    failures: dict[str, int]
    holdout: HoldoutReport | None = None
    """The held-out tail's scores, for a run made with `--holdout`."""
    budget: Budget | None = None
    study: StudyReport | None = None
    """The trials and the Pareto front, for a run made by `crucible tune`."""
    proposals: list[ProposalInfo] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The run's fields at the top level, `best` the whole best candidate."""
        return {
            **self.run.to_json(),
            "best": self.best.to_json() if self.best else None,
            "baselines": [b.to_json() for b in self.baselines],
            "proposers": [s.to_json() for s in self.proposers],
            "verification": self.verification.to_json(),
            "failures": self.failures,
            "holdout": self.holdout.to_json() if self.holdout else None,
            "budget": self.budget.to_json() if self.budget else None,
            "study": self.study.to_json() if self.study else None,
            "judgement": judged.to_json() if (judged := self.judgement()) else None,
            "proposals": [p.to_json() for p in self.proposals],
        }

    def judgement(self) -> Judgement | None:
        """The found policy against the baselines on the held-out tail once it was scored there, else on the
        run's workload; None before anything was found."""
        best, run = self.best, self.run
        if best is None or best.score is None:
            return None
        objective = Objective(run.objective, run.direction)
        tail = self.holdout.found_tail() if self.holdout else None
        if self.holdout is not None and tail is not None:
            on, found = "the held-out tail", tail
            scores = [(r.name, r.tail, r.oracle) for r in self.holdout.rows if r.kind != "found"]
        else:
            unseen = run.config.get("select") == UNSEEN
            on, found = "the requests after the train share" if unseen else "the workload", best.score
            scores = [(b.name, b.score, b.oracle) for b in self.baselines]
        rivals = [(name, score) for name, score, oracle in scores if score is not None and not oracle]
        pick = max if objective.direction == "maximize" else min
        rival = pick(rivals, key=lambda r: r[1]) if rivals else None
        better = rival is None or objective.better(found, rival[1])
        ranked = sorted(((score, name, oracle) for name, score, oracle in scores if score), reverse=True)
        ratio = {name: found / score for score, name, oracle in ranked if not oracle}
        bound = {name: found / score for score, name, oracle in ranked if oracle}
        rival_name, rival_score = rival if rival else (None, None)
        return Judgement(on, best.label, found, rival_name, rival_score, better, ratio, bound)

    def baseline_metrics(self) -> dict[str, dict[str, float]]:
        """Baseline name -> its averaged metrics, for a table."""
        return {b.name: b.metrics for b in self.baselines}


class ReadModel:
    """Answers about runs from a store; holds nothing but the store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def runs(self, kind: str | None = None, subject: str | None = None) -> list[RunInfo]:
        """Every run, oldest first; with `kind` (and `subject`), only those: "this champion's CI runs"
        (kind ci, the champion's name) or "this study's run" (kind tune, the study's name)."""
        return [self._info(run) for run in self.store.runs(kind, subject)]

    def run(self, run_id: str) -> RunInfo:
        return self._info(self._run(run_id))

    def candidates(self, run_id: str) -> list[CandidateInfo]:
        run = self._run(run_id)
        rows = self.store.candidates(run.id)
        evaluations = _by_candidate(self.store.evaluations(run.id))
        verdicts: dict[int, list[Verdict]] = {}
        for v in self.store.verifications(run.id):
            if v.candidate_id is not None:
                cex = json.loads(v.counterexample) if v.counterexample else None
                verdict = Verdict(v.property, v.severity, v.verdict, v.seconds, cex, v.message)
                verdicts.setdefault(v.candidate_id, []).append(verdict)
        return [_candidate(row, evaluations.get(row.id, []), verdicts.get(row.id, [])) for row in rows]  # type: ignore[arg-type]

    def candidate_by_seq(self, run_id: str, seq: int) -> CandidateInfo:
        """The candidate the front ends name `#seq` in the run."""
        for info in self.candidates(run_id):
            if info.seq == seq:
                return info
        raise UserError(f"no candidate #{seq} in run {run_id}")

    def candidate(self, run_id: str, candidate_id: int) -> CandidateInfo:
        for info in self.candidates(run_id):
            if info.candidate_id == candidate_id:
                return info
        raise UserError(f"no candidate {candidate_id} in run {run_id}")

    def baselines(self, run_id: str) -> list[BaselineInfo]:
        run = self._run(run_id)
        target = _installed(run)
        metric = self._objective(run).metric
        oracles = target.oracles() if target is not None else ()
        names = {row.id: row.name for row in self.store.candidates(run.id) if row.proposer == BASELINE}
        found: dict[tuple[str, str], list[EvaluationInfo]] = {}
        for e in self.store.evaluations(run.id):
            if e.policy:
                found.setdefault((e.policy, "builtin"), []).append(_evaluation(e))
            elif e.candidate_id in names:
                found.setdefault((names[e.candidate_id], "candidate"), []).append(_evaluation(e))
        out = []
        for (name, kind), evaluations in found.items():
            metrics = mean_metrics([e.metrics for e in evaluations if e.role == "eval"])
            oracle = kind == "builtin" and name in oracles
            out.append(BaselineInfo(name, kind, evaluations, metrics, metrics.get(metric), oracle))
        return out

    def events(self, run_id: str) -> list[EventInfo]:
        run = self._run(run_id)
        return [
            EventInfo(
                e.kind, e.message, _iso(e.at), e.proposer, e.model, e.tokens, e.cost_usd, _json(e.proposal)
            )
            for e in self.store.events(run.id)
        ]

    def proposals(self, run_id: str) -> list[ProposalInfo]:
        """Every proposal of the run in the order made: its candidates, and the proposals that made none."""
        run = self._run(run_id)
        made = [
            _proposal(r, r.created_at, r.status, r.seq)
            for r in self.store.candidates(run.id)
            if r.proposer != BASELINE
        ]
        none = [
            _proposal(e, e.at, e.kind.removeprefix("proposal-"), None)
            for e in self.store.events(run.id)
            if e.kind in ("proposal-failed", "proposal-duplicate")
        ]
        return sorted(made + none, key=lambda p: p.at)

    def progress(self, run_id: str) -> list[ProgressPoint]:
        run = self._run(run_id)
        objective = self._objective(run)
        rows = [r for r in self.store.candidates(run.id) if r.proposer != BASELINE and r.status != "pending"]
        rows.sort(key=lambda r: (_finished(r), r.seq))
        spent = sorted((e.at, e.cost_usd) for e in self.store.events(run.id) if e.cost_usd)
        points, best, cost, taken = [], None, 0.0, 0
        for done, row in enumerate(rows, start=1):
            at = _finished(row)
            while taken < len(spent) and _aware(spent[taken][0]) <= at:
                cost += spent[taken][1]
                taken += 1
            cost += row.cost_usd
            improves = best is None or (row.score is not None and objective.better(row.score, best))
            if row.status == "evaluated" and row.score is not None and improves:
                best = row.score
            score = row.score if row.status == "evaluated" else None
            points.append(
                ProgressPoint(done, row.seq, row.id, row.island, row.status, score, best, cost, _iso(at))  # type: ignore[arg-type]
            )
        return points

    def proposer_stats(self, run_id: str) -> list[ProposerStats]:
        """Per (proposer, model): proposals, failures by class, candidates run and improved, best, spend."""
        run = self._run(run_id)
        objective = self._objective(run)
        rows = list(self.store.candidates(run.id))
        return _proposer_stats(rows, self.store.events(run.id), objective)

    def failures(self, run_id: str) -> dict[str, int]:
        """Proposed candidates that failed, by failure class."""
        run = self._run(run_id)
        counts: dict[str, int] = {}
        for row in self.store.candidates(run.id):
            if row.proposer != BASELINE and (kind := failure_class(row)):
                counts[kind] = counts.get(kind, 0) + 1
        return counts

    def budget(self, run_id: str) -> Budget:
        """Where the run's proposals went, from its candidates' statuses and its proposal events."""
        run = self._run(run_id)
        stages = ("static", "refuted", "behaved_alike", "faulted", "gated", "evaluated", "pending")
        counts = dict.fromkeys(stages, 0)
        for row in self.store.candidates(run.id):
            if row.proposer == BASELINE:
                continue
            if row.status == "rejected":
                kind = "refuted" if row.message.startswith("verification: ") else "static"
            elif row.status == "duplicate":
                kind = "behaved_alike"
            else:
                kind = row.status if row.status in counts else "faulted"
            counts[kind] += 1
        events = [e.kind for e in self.store.events(run.id)]
        return Budget(events.count("proposal-duplicate"), events.count("proposal-failed"), **counts)

    def verification(self, run_id: str) -> VerificationCounts:
        """Verdicts per property, the hard property that rejected each candidate, and time per candidate."""
        run = self._run(run_id)
        rejected = {row.id for row in self.store.candidates(run.id) if row.status == "rejected"}
        verdicts: dict[str, dict[str, int]] = {}
        first: dict[int, str] = {}
        seconds: dict[int, float] = {}
        for v in self.store.verifications(run.id):
            counts = verdicts.setdefault(v.property, {})
            counts[v.verdict] = counts.get(v.verdict, 0) + 1
            if v.candidate_id is not None:
                seconds[v.candidate_id] = seconds.get(v.candidate_id, 0.0) + v.seconds
                if v.candidate_id in rejected and v.severity == "hard" and v.verdict == "counterexample":
                    first.setdefault(v.candidate_id, v.property)
        by_property: dict[str, int] = {}
        for name in first.values():
            by_property[name] = by_property.get(name, 0) + 1
        median = statistics.median(seconds.values()) if seconds else None
        return VerificationCounts(verdicts, by_property, median)

    def best(self, run_id: str) -> CandidateInfo | None:
        """The best evaluated proposed candidate (baselines excluded), or None before one is evaluated."""
        ref = self.run(run_id).best
        return None if ref is None else self.candidate(run_id, ref.candidate_id)

    def report(self, run_id: str) -> RunReport:
        info = self.run(run_id)
        return RunReport(
            run=info,
            best=self.best(info.run_id),
            baselines=self.baselines(info.run_id),
            proposers=self.proposer_stats(info.run_id),
            verification=self.verification(info.run_id),
            failures=self.failures(info.run_id),
            holdout=self.holdout(info.run_id),
            budget=self.budget(info.run_id),
            study=self.study(info.run_id),
            proposals=self.proposals(info.run_id),
        )

    def holdout(self, run_id: str) -> HoldoutReport | None:
        """The run's head and tail scores per policy; None for a run without a holdout."""
        run = self._run(run_id)
        cut = json.loads(run.config).get("holdout")
        if not cut:
            return None
        target = _target(run)
        metric, oracles = self._objective(run).metric, target.oracles()
        rows = {r.id: r for r in self.store.candidates(run.id)}
        found: dict[tuple[int | None, str], dict[str, list[dict[str, float]]]] = {}
        for e in self.store.evaluations(run.id):
            found.setdefault((e.candidate_id, e.policy), {}).setdefault(e.role, []).append(
                _figures(e.metrics)
            )
        out = []
        for (candidate_id, policy), roles in found.items():
            if TAIL not in roles and TAIL_RETUNED not in roles:
                continue
            row = rows.get(candidate_id) if candidate_id is not None else None
            kind = "builtin" if row is None else "candidate" if row.proposer == BASELINE else "found"
            name = policy if row is None else row.name if kind == "candidate" else f"found {label(row)}"
            head, tail, retuned = (mean_metrics(roles.get(r, [])) for r in ("eval", TAIL, TAIL_RETUNED))
            scores = [m.get(metric) for m in (head, tail, retuned)]
            out.append(HoldoutRow(name, kind, *scores, tail, retuned, kind == "builtin" and name in oracles))
        out.sort(key=lambda r: ("found", "candidate", "builtin").index(r.kind))
        split = Split.from_json(cut)
        select = json.loads(run.config).get("select", WHOLE)
        return HoldoutReport(split.share, split.head, split.tail, out, split.warm, select)

    def study(self, run_id: str) -> StudyReport | None:
        """The run's Optuna study, trial by trial, with its Pareto front; None for a run not made by tune."""
        run = self._run(run_id)
        tune = json.loads(run.config).get("tune")
        if run.kind != "tune" or not tune:
            return None
        objectives = {g["metric"]: g["direction"] for g in tune["objectives"]}
        scored: dict[int | None, dict[str, list[dict[str, float]]]] = {}
        settings: dict[int | None, dict[str, float]] = {}
        for e in self.store.evaluations(run.id):
            scored.setdefault(e.candidate_id, {}).setdefault(e.role, []).append(_figures(e.metrics))
            settings[e.candidate_id] = json.loads(e.params)

        def means(row: Candidate, role: str) -> dict[str, float]:
            found = mean_metrics(scored.get(row.id, {}).get(role, []))
            return {m: found[m] for m in objectives if m in found}

        rows = self.store.candidates(run.id)
        trials = [r for r in rows if r.proposer == TUNE]
        valued = [r for r in trials if len(means(r, "train")) == len(objectives)]
        maximize = [d == "maximize" for d in objectives.values()]
        on_front = set(pareto.front([list(means(r, "train").values()) for r in valued], maximize))
        points = []
        for i, r in enumerate(valued):
            train, held = means(r, "train"), means(r, "eval")
            points.append(StudyPoint(r.seq, r.id or 0, json.loads(r.params), train, held, i in on_front))
        base = next((r for r in rows if r.proposer == BASELINE), None)
        configured, values = (means(base, "eval"), settings.get(base.id, {})) if base else ({}, {})
        failed = len(trials) - len(valued)
        return StudyReport(tune["study"], tune["policy"], objectives, points, values, configured, failed)

    def _objective(self, run: Run) -> Objective:
        """What the run's scores measure: the target's objective, or a tune study's first objective."""
        tune = json.loads(run.config).get("tune")
        if run.kind == "tune" and tune:
            first = tune["objectives"][0]
            return Objective(first["metric"], first["direction"])
        target = _installed(run)
        if target is None:  # its scores stay as stored; which way is better is the target's to say
            return UNKNOWN_OBJECTIVE
        return target.objective_for(json.loads(run.config).get("options", {}))

    def best_file(self, run_id: str) -> str:
        """The best candidate as a self-contained heuristic file: its source with the tuned PARAMS."""
        best = self.best(run_id)
        if best is None:
            raise UserError(f"run {run_id} has no evaluated candidate yet")
        return self.heuristic_file(run_id, best.candidate_id)

    def heuristic_file(self, run_id: str, candidate_id: int) -> str:
        """A candidate as a self-contained heuristic file: its source with its tuned PARAMS as defaults."""
        found = self.candidate(run_id, candidate_id)
        target = targets.load(self.run(run_id).target)
        try:
            program = check(found.source, target.signatures)
        except StaticError as exc:  # stored by an older checker that has since tightened
            raise UserError(f"candidate {candidate_id} no longer passes the static check: {exc}") from None
        return render(program, found.params).rstrip("\n") + "\n"

    def param_importances(self, run_id: str, candidate_id: int) -> dict[str, float]:
        """Which of a candidate's tuned constants mattered, from its stored study alone (PED-ANOVA): each
        PARAM's share, most important first. NoImportance says in one line why there is no answer."""
        found = self.candidate(run_id, candidate_id)
        run = self.run(run_id)
        return param_importances(run.target, found.source, found.trials, run.direction)

    def _run(self, run_id: str) -> Run:
        run = self.store.run(run_id)
        if run is None:
            raise UserError(f"no run {run_id!r} in {self.store.engine.url.render_as_string()}")
        return run

    def _info(self, run: Run) -> RunInfo:
        config = json.loads(run.config)
        objective = self._objective(run)
        rows = self.store.candidates(run.id)
        counts: dict[str, int] = {}
        for r in rows:
            if r.proposer != BASELINE:
                counts[r.status] = counts.get(r.status, 0) + 1
        scored = [
            r for r in rows if r.proposer != BASELINE and r.status == "evaluated" and r.score is not None
        ]
        best = None
        if scored:
            top = max(scored, key=lambda r: r.score if objective.direction == "maximize" else -r.score)  # type: ignore[operator]
            best = CandidateRef(top.id, top.seq, top.score, label(top))  # type: ignore[arg-type]
        baselines = [b for b in self.baselines(run.id) if b.score is not None]
        best_baseline = _best_of([b for b in baselines if not b.oracle], objective)
        oracle = _best_of([b for b in baselines if b.oracle], objective)
        status = run_status(run)
        tokens, cost = self.store.spend(run.id)
        message = run.message
        if _installed(run) is None:
            missing = f"target {run.target!r} is not installed here: its scores are shown as stored"
            message = f"{missing}; {message}" if message else missing
        return RunInfo(
            run_id=run.id,
            kind=run.kind,
            target=run.target,
            workload=config.get("workload", ""),
            options=dict(config.get("options", config.get("target_config", {}))),
            config=config,
            status=status,
            message=message,
            resumable=status in ("stopped", "interrupted"),
            created_at=_iso(run.created_at),
            updated_at=_iso(run.updated_at),
            budget=int(config.get("budget", 0)),
            done=sum(n for s, n in counts.items() if s not in ("pending", "duplicate")),
            counts=counts,
            objective=objective.metric,
            direction=objective.direction,
            best=best,
            best_baseline=best_baseline,
            oracle=oracle,
            tokens=tokens,
            cost_usd=cost,
        )


def label(row: Candidate) -> str:
    """How every front end names a candidate: a baseline (or a trial) by its name, any other as `#seq`."""
    return row.name or f"#{row.seq}"


def run_status(run: Run) -> str:
    """The stored status, except a run stored as running whose process on this machine is gone:
    "interrupted" (killed, or its machine went down), which a resume continues."""
    if run.status != "running" or run.pid is None or run.host != socket.gethostname():
        return run.status
    try:
        os.kill(run.pid, 0)
    except ProcessLookupError:
        return "interrupted"
    except PermissionError:  # alive, someone else's
        return run.status
    return run.status


def failure_class(row: Candidate) -> str:
    """Why a candidate failed, in a few words that group alike failures: its status, and for a rejection
    the static rule or the property that rejected it; empty unless it failed."""
    if row.status in NOT_FAILED:
        return ""
    if row.status == "rejected":
        if row.message.startswith("verification: "):
            return f"rejected: {row.message.removeprefix('verification: ').split(':')[0]}"
        rule = re.search(r"\[([\w-]+)\]", row.message)
        return f"rejected: {rule.group(1)}" if rule else "rejected"
    return row.status


UNKNOWN_OBJECTIVE = Objective("score", "maximize")
"""The objective of a run whose target is not installed: its stored scores, shown as they are."""


def _installed(run: Run) -> Target | None:
    """The run's target, or None where it is not installed here (a plugin since removed)."""
    try:
        return targets.load(run.target)
    except (KeyError, targets.TargetUnavailable):
        return None


def _target(run: Run) -> Target:
    """The run's target, for an answer that needs it; one line where it is not installed."""
    try:
        return targets.load(run.target)
    except KeyError as exc:
        raise UserError(f"run {run.id}: {exc.args[0]}") from None
    except targets.TargetUnavailable as exc:
        raise UserError(f"run {run.id}: {exc}") from None


def _best_of(baselines: Sequence[BaselineInfo], objective: Objective) -> BaselineRef | None:
    """The baseline with the best score (each has one), by the objective's direction."""
    if not baselines:
        return None
    top = max(baselines, key=lambda b: b.score if objective.direction == "maximize" else -b.score)  # type: ignore[operator]
    return BaselineRef(top.name, top.score)


def _by_candidate(evaluations: Sequence[Evaluation]) -> dict[int, list[Evaluation]]:
    out: dict[int, list[Evaluation]] = {}
    for e in evaluations:
        if e.candidate_id is not None:
            out.setdefault(e.candidate_id, []).append(e)
    return out


def _figures(text: str) -> dict[str, float]:
    """An evaluation's metrics without its timelines (targets.base.TIMELINE)."""
    return timelines(json.loads(text))[0]


def _evaluation(e: Evaluation) -> EvaluationInfo:
    metrics, lanes, step_s = timelines(json.loads(e.metrics))
    return EvaluationInfo(
        e.instance, e.role, metrics, json.loads(e.params), e.seconds, e.backend, lanes, step_s
    )


def _candidate(row: Candidate, evaluations: list[Evaluation], verdicts: list[Verdict]) -> CandidateInfo:
    infos = [_evaluation(e) for e in evaluations]
    return CandidateInfo(
        candidate_id=row.id,  # type: ignore[arg-type]
        seq=row.seq,
        label=label(row),
        name=row.name,
        status=row.status,
        message=row.message,
        failure_class=failure_class(row),
        parent_id=row.parent_id,
        inspirations=list(json.loads(row.inspirations or "[]")),
        island=row.island,
        proposer=row.proposer,
        model=row.model,
        note=row.note,
        tokens=row.tokens,
        cost_usd=row.cost_usd,
        proposal=_json(row.proposal),
        source=row.source,
        params=json.loads(row.params),
        trials=list(json.loads(row.trials or "[]")),
        train_score=row.train_score,
        score=row.score,
        metrics=mean_metrics([e.metrics for e in infos if e.role == "eval"]),
        is_baseline=row.proposer == BASELINE,
        behaviour=row.behaviour,
        verdicts=verdicts,
        evaluations=infos,
        backend=infos[0].backend if infos else "",
        created_at=_iso(row.created_at),
        finished_at=_iso(row.finished_at) if row.finished_at else None,
    )


def _proposal(row: Candidate | Event, at: datetime, outcome: str, seq: int | None) -> ProposalInfo:
    """A candidate or a proposal event as a proposal: both carry who proposed, what it cost and how."""
    figures = _json(row.proposal)
    return ProposalInfo(
        at=_iso(at),
        proposer=row.proposer,
        model=row.model,
        outcome=outcome,
        message=row.message,
        seq=seq,
        tokens=row.tokens,
        cost_usd=row.cost_usd,
        seconds=figures.get("seconds"),
        prompt_tokens=figures.get("prompt_tokens", 0),
        completion_tokens=figures.get("completion_tokens", 0),
        replies=list(figures.get("replies", [])),
        estimated=bool(figures.get("estimated", False)),
    )


def _proposer_stats(
    rows: list[Candidate], events: Sequence[Event], objective: Objective
) -> list[ProposerStats]:
    """Nothing is stored twice: candidates carry their proposer, model, tokens and cost, failed proposals
    are events carrying the same (as is the event of a run stopped in the middle of a proposal)."""
    scores = {r.id: r.score for r in rows if r.status == "evaluated" and r.score is not None}
    table: dict[tuple[str, str], dict[str, Any]] = {}

    def slot(proposer: str, model: str) -> dict[str, Any]:
        return table.setdefault((proposer, model), {"failures": {}})

    def bump(counts: dict[str, Any], key: str, by: float = 1) -> None:
        counts[key] = counts.get(key, 0) + by

    for row in rows:
        if row.proposer == BASELINE:
            continue
        counts = slot(row.proposer, row.model)
        bump(counts, "proposals")
        bump(counts, "tokens", row.tokens)
        bump(counts, "cost_usd", row.cost_usd)
        if row.status in RAN:
            bump(counts, "ran")
        elif row.status != "pending":
            bump(counts, "rejected")
            bump(counts["failures"], (row.message or row.status).split(":")[0])
        score, parent = scores.get(row.id), scores.get(row.parent_id)
        if score is not None:
            best = counts.get("best")
            counts["best"] = score if best is None or objective.better(score, best) else best
            if parent is not None and objective.better(score, parent):
                bump(counts, "improved")
    for event in events:
        if event.kind == "proposal-failed":
            counts = slot(event.proposer, event.model)
            bump(counts, "proposals")
            bump(counts, "failed")
            bump(counts["failures"], event.message.split(":")[0])
        elif event.tokens or event.cost_usd:  # a proposal cut off when the endpoint went away
            counts = slot(event.proposer, event.model)
        else:
            continue
        bump(counts, "tokens", event.tokens)
        bump(counts, "cost_usd", event.cost_usd)
    return [ProposerStats(proposer, model, **counts) for (proposer, model), counts in sorted(table.items())]


def _json(text: str) -> dict[str, Any]:
    """A stored JSON object; {} for a row stored before its column had one."""
    return dict(json.loads(text or "{}"))


def _aware(at: datetime) -> datetime:
    """SQLite hands back naive datetimes; every stored time is UTC."""
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _finished(row: Candidate) -> datetime:
    return _aware(row.finished_at or row.created_at)


def _iso(at: datetime) -> str:
    return _aware(at).isoformat()
