"""One search run: propose, screen, evaluate in the sandbox, record, repeat until the budget is spent.

Candidates are proposed in batches of `workers` from the database as it stood before the batch, and
their results are added in order, so a run is reproducible from its seed whatever the timing, and a
resumed run re-runs the pending candidates of the batch it was killed in before proposing new ones.
"""

from __future__ import annotations

import json
import os
import random
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import targets
from sandbox.base import Sandbox
from sandbox.job import Job, Limits, Result, Tuning
from targets.base import Target
from verifiers.program import Program
from verifiers.properties import Domain, Outcome
from verifiers.smt import Verifier
from verifiers.static import StaticError, check

from .database import ProgramDatabase
from .fingerprint import fingerprint
from .proposers.base import Entry, ProposalFailed, ProposalRequest, Proposer, TargetBrief
from .readmodel import mean_metrics
from .store import BASELINE, Candidate, Evaluation, Run, Store, Verification


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run; stored as JSON so the run can be resumed and reproduced."""

    target: str
    workload: str
    """A file (stored as an absolute path) or a generator spec the target understands."""
    options: dict[str, Any]
    """The target's options (its declared `Option`s), defaults filled in: what `instances()` is given."""
    budget: int = 300
    seed: int = 0
    trials: int = 32
    """Optuna trials per candidate: TPE engages after 10; the mean tuned score levels off by 32 (README)."""
    workers: int = 2
    islands: int = 4
    proposer: str = "evolve"
    time_budget_s: float | None = None
    gate_top_k: int = 8
    migrate_every: int = 25
    limits: dict[str, Any] = field(default_factory=dict)
    llm: dict[str, Any] = field(default_factory=dict)
    """The LLM proposer's settings (`search.proposers.llm.LLMConfig`) for the llm and mix proposers."""
    max_cost_usd: float | None = None
    """Stop (resumably) once the proposals have cost this much, failed ones included."""
    max_tokens: int | None = None
    """Stop (resumably) once the proposals have used this many tokens, failed ones included."""
    seeds: dict[str, str] = field(default_factory=dict)
    """More heuristics (name -> source) run like the baselines and seeding the islands (a CI champion)."""
    holdout: dict[str, Any] = field(default_factory=dict)
    """The time split of `--holdout` (search/holdout.py's Split: share, head and tail windows); {} for none."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunConfig:
        fields = dict(data)
        if "target_config" in fields:  # stored before options were declared by the targets
            fields["options"] = fields.pop("target_config")
        return cls(**fields)


class BaselineFailed(RuntimeError):
    """A baseline could not be evaluated on the run's workload: the run cannot be compared, so it fails."""


class Reporter:
    """Receives progress; the CLI draws it on stderr, tests stay silent."""

    def started(self, run_id: str, done: int, budget: int) -> None: ...

    def candidate(self, done: int, budget: int, best: float | None, status: str) -> None: ...

    def note(self, message: str) -> None: ...


def brief(target: Target) -> TargetBrief:
    return TargetBrief(
        name=target.name,
        description=target.description,
        signatures=target.signatures,
        registries={s.name: target.registry(s.name) for s in target.signatures},
        objective=target.objective.metric,
        direction=target.objective.direction,
    )


def domains(target: Target) -> dict[str, Domain]:
    """The input domain of each decision function, as the verifier reads it."""
    return {s.name: target.registry(s.name).domain() for s in target.signatures}


class Search:
    """Drives one run against a store, a sandbox and a proposer; holds no state the store lacks.

    Sandbox jobs go to the `executor` it is given (anything shaped like `concurrent.futures.Executor`: a
    local pool, a process pool, a cluster's client) and come back in order, so the results are the same
    whichever runs them. Jobs and results are plain picklable data; the sandbox must pickle too.
    """

    def __init__(
        self,
        store: Store,
        run: Run,
        sandbox: Sandbox,
        proposer: Proposer,
        reporter: Reporter | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        executor: Executor,
    ) -> None:
        self.store = store
        self.run = run
        self.config = RunConfig.from_json(json.loads(run.config))
        self.sandbox = sandbox
        self.proposer = proposer
        self.reporter = reporter or Reporter()
        self.clock = clock
        self.executor = executor
        self.target = targets.load(self.config.target)
        self.instances = self.target.instances(self.config.workload, self.config.options)
        self.maximize = self.target.objective.direction == "maximize"
        self.database = ProgramDatabase(islands=self.config.islands)
        self.domains = domains(self.target)
        self.verifier = Verifier()

    @property
    def limits(self) -> Limits:
        return Limits(**self.config.limits)

    def execute(self) -> None:
        """Run (or resume) until the candidate budget or the time budget is spent; the store has the rest.

        Raises BaselineFailed (the run is then marked failed with the reason) when a baseline cannot run.
        """
        with self.verifier:  # its child process ends with the run
            self._execute(self.executor)

    def _execute(self, pool: Executor) -> None:
        started = self.clock()
        self.store.start_run(self.run.id, os.getpid(), socket.gethostname())
        try:
            self._ensure_baselines(pool)
        except BaselineFailed as exc:
            self.store.set_run_status(self.run.id, "failed", str(exc))
            self.store.log(self.run.id, "failed", str(exc))
            raise
        rows = list(self.store.candidates(self.run.id))
        done = 0
        for row in rows:  # rebuild the database exactly as it grew, migrations included
            self._admit(row)
            if row.proposer != BASELINE and row.status != "pending":
                done += 1
                if done % self.config.migrate_every == 0:
                    self.database.migrate()
        self.reporter.started(self.run.id, done, self.config.budget)
        pending = [row for row in rows if row.status == "pending" and row.proposer != BASELINE]
        seq = max((row.seq for row in rows), default=-1) + 1
        while pending or done < self.config.budget:
            if self.config.time_budget_s and self.clock() - started > self.config.time_budget_s:
                self.store.set_run_status(self.run.id, "stopped", "time budget spent")
                self.store.log(self.run.id, "stopped", "time budget spent")
                return
            if not pending and (reason := self._cap_reached()):
                self.store.set_run_status(self.run.id, "stopped", reason)
                self.store.log(self.run.id, "stopped", reason)
                return
            batch = pending or self._propose_batch(seq, min(self.config.workers, self.config.budget - done))
            pending = []
            if not batch and self._cap_reached():
                continue
            if not batch:
                self.store.log(self.run.id, "stopped", "the proposer produced no new candidate")
                break
            seq = max(seq, max(row.seq for row in batch) + 1)
            jobs = [row for row in batch if row.status == "pending"]
            results = list(pool.map(self.sandbox.run, [self._job(row) for row in jobs]))
            for row, result in zip(jobs, results, strict=True):
                self._record(row, result)
            for row in batch:
                self._admit(row)
                done += 1
                self.reporter.candidate(done, self.config.budget, self._best_score(), row.status)
                if done % self.config.migrate_every == 0:
                    self.database.migrate()
        self.store.set_run_status(self.run.id, "finished")

    def _ensure_baselines(self, pool: Executor) -> None:
        """Evaluate every baseline once per run; they seed the islands and anchor the report."""
        existing = {row.name: row for row in self.store.candidates(self.run.id) if row.proposer == BASELINE}
        rows = []
        for i, (name, source) in enumerate({**self.target.baselines(), **self.config.seeds}.items()):
            row = existing.get(name) or self.store.add_candidate(
                Candidate(
                    run_id=self.run.id,
                    seq=-1 - i,
                    name=name,
                    source=source,
                    fingerprint=fingerprint(source),
                    island=i % self.config.islands,
                    proposer=BASELINE,
                )
            )
            if row.status == "pending":
                rows.append(row)
        done = {e.policy for e in self.store.evaluations(self.run.id) if e.policy}
        builtins = [n for n in self.target.builtin_baselines() if n not in done]
        if not rows and not builtins:
            return
        self.reporter.note(f"evaluating {len(rows) + len(builtins)} baselines")
        eval_only = tuple(i for i in self.instances if i.role == "eval")
        jobs = [self._job(row, tune=False) for row in rows]
        jobs += [
            Job(self.config.target, "", eval_only, builtin=name, limits=self.limits) for name in builtins
        ]
        results = list(pool.map(self.sandbox.run, jobs))
        names = [row.name for row in rows] + builtins
        for name, result in zip(names, results, strict=True):
            if result.status != "ok":
                raise BaselineFailed(f"baseline {name} failed: {result.status}: {result.message}")
        for row, result in zip(rows, results, strict=False):
            self._record(row, result)
        for name, result in zip(builtins, results[len(rows) :], strict=True):
            self.store.add_evaluations(self._evaluations(None, result, policy=name))

    def _propose_batch(self, seq: int, size: int) -> list[Candidate]:
        """Up to `size` new candidates; a proposer with concurrency > 1 writes several at the same time.

        These threads only wait on a proposer's calls (an LLM endpoint); sandbox jobs go to the executor.
        """
        taken = {row.fingerprint for row in self.store.candidates(self.run.id)}
        lock = threading.Lock()
        seqs = range(seq, seq + size)
        width = min(self.proposer.concurrency, size)
        if width <= 1:
            rows = [self._propose(s, taken, lock) for s in seqs]
        else:
            with ThreadPoolExecutor(max_workers=width) as pool:
                rows = list(pool.map(lambda s: self._propose(s, taken, lock), seqs))
        return [row for row in rows if row is not None]

    def _propose(self, seq: int, taken: set[str], lock: threading.Lock) -> Candidate | None:
        """Propose until a new (unseen) program comes out, and record it before anything runs."""
        rng = random.Random(f"{self.config.seed}:{seq}")
        island, parent, inspirations = self.database.sample(rng)
        for attempt in range(20):
            if self._cap_reached():
                return None
            request = ProposalRequest(
                target=brief(self.target),
                parent=parent,
                inspirations=inspirations,
                failures=self._recent_failures(),
                seed=rng.randrange(2**31) + attempt,
            )
            try:
                proposal = self.proposer.propose(request)
            except ProposalFailed as exc:
                self.store.log(
                    self.run.id,
                    "proposal-failed",
                    str(exc),
                    proposer=exc.proposer or self.proposer.name,
                    model=exc.model,
                    tokens=exc.tokens,
                    cost_usd=exc.cost_usd,
                )
                continue
            mark = fingerprint(proposal.source)
            with lock:
                if mark in taken:
                    continue
                taken.add(mark)
            row = Candidate(
                run_id=self.run.id,
                seq=seq,
                source=proposal.source,
                fingerprint=mark,
                parent_id=parent.candidate_id,
                inspirations=json.dumps([e.candidate_id for e in inspirations]),
                island=island,
                proposer=proposal.proposer,
                model=proposal.model,
                note=proposal.note,
                tokens=proposal.tokens,
                cost_usd=proposal.cost_usd,
            )
            rejection, outcomes = self._screen(proposal.source)
            if rejection:
                row.status, row.message = "rejected", rejection
            return self.store.add_candidate(row, [_verification(self.run.id, o) for o in outcomes])
        return None

    def _screen(self, source: str) -> tuple[str, list[Outcome]]:
        """Checks that need no sandbox: the static check, then Z3 on the target's properties.

        An empty rejection means the candidate may run: only a counterexample to a hard property rejects
        it; an unknown verdict is recorded as unverified, never as proved.
        """
        try:
            program = self._program(source)
        except StaticError as exc:
            return f"static check: {exc}", []
        outcomes = self.verifier.verify(program, self.domains, self.target.properties())
        failed = [o for o in outcomes if o.rejects]
        if not failed:
            return "", outcomes
        more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
        return f"verification: {failed[0].property}: {failed[0].message}{more}", outcomes

    def _cap_reached(self) -> str:
        """Why the run must stop for its token or cost cap, or an empty string while under both."""
        cap_cost, cap_tokens = self.config.max_cost_usd, self.config.max_tokens
        if cap_cost is None and cap_tokens is None:
            return ""
        tokens, cost = self.store.spend(self.run.id)
        if cap_cost is not None and cost >= cap_cost:
            return f"cost cap reached: ${cost:.4f} spent of ${cap_cost:g}"
        if cap_tokens is not None and tokens >= cap_tokens:
            return f"token cap reached: {tokens} tokens used of {cap_tokens}"
        return ""

    def _program(self, source: str) -> Program:
        return check(source, self.target.signatures)

    def _job(self, row: Candidate, tune: bool = True) -> Job:
        tuning = None
        if tune:
            tuning = Tuning(
                trials=self.config.trials, seed=self.config.seed * 100_003 + row.seq, gate=self._gate()
            )
        return Job(self.config.target, row.source, tuple(self.instances), tuning=tuning, limits=self.limits)

    def _gate(self) -> float | None:
        """The cascade: a candidate reaches the full workload only if its train score makes the top k."""
        scores = sorted(
            (row.train_score for row in self._evaluated() if row.train_score is not None),
            reverse=self.maximize,
        )
        return scores[self.config.gate_top_k - 1] if len(scores) >= self.config.gate_top_k else None

    def _evaluated(self) -> list[Candidate]:
        return [row for row in self.store.candidates(self.run.id) if row.status == "evaluated"]

    def _record(self, row: Candidate, result: Result) -> None:
        metric = self.target.objective.metric
        train = [i.metrics[metric] for i in result.instances if i.role == "train" and metric in i.metrics]
        evals = [i.metrics[metric] for i in result.instances if i.role == "eval" and metric in i.metrics]
        row.train_score = sum(train) / len(train) if train else None
        row.params = json.dumps(result.params, sort_keys=True)
        row.trials = json.dumps([asdict(t) for t in result.study])
        row.message = result.message
        if result.status != "ok":
            row.status = result.status
        elif result.gated or not evals:
            row.status = "gated"
        else:
            row.status, row.score = "evaluated", sum(evals) / len(evals)
        self.store.finish_candidate(row, self._evaluations(row.id, result))

    def _evaluations(self, candidate_id: int | None, result: Result, policy: str = "") -> list[Evaluation]:
        return [
            Evaluation(
                run_id=self.run.id,
                candidate_id=candidate_id,
                policy=policy,
                instance=i.label,
                role=i.role,
                params=json.dumps(result.params, sort_keys=True),
                metrics=json.dumps(i.metrics, sort_keys=True),
                seconds=i.seconds,
                backend=result.backend,
            )
            for i in result.instances
        ]

    def _admit(self, row: Candidate) -> None:
        if row.status != "evaluated" or row.score is None or row.id is None:
            return
        score = row.score if self.maximize else -row.score
        evals = [
            json.loads(e.metrics) for e in self.store.evaluations(self.run.id, row.id) if e.role == "eval"
        ]
        entry = Entry(row.id, row.source, score, metrics=mean_metrics(evals), params=json.loads(row.params))
        self.database.add(entry, row.island)

    def _best_score(self) -> float | None:
        best = self.database.best()
        if best is None:
            return None
        return best.score if self.maximize else -best.score

    def _recent_failures(self) -> tuple[str, ...]:
        failed = [
            r for r in self.store.candidates(self.run.id) if r.status not in ("evaluated", "gated", "pending")
        ]
        return tuple(f"candidate {r.seq}: {r.message}" for r in failed[-5:])


def _verification(run_id: str, outcome: Outcome) -> Verification:
    cex = json.dumps(outcome.counterexample, sort_keys=True) if outcome.counterexample else ""
    return Verification(
        run_id=run_id,
        property=outcome.property,
        severity=outcome.severity,
        verdict=outcome.verdict,
        seconds=outcome.seconds,
        counterexample=cex,
        message=outcome.message,
    )
