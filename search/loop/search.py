"""One search run: propose, screen, evaluate in the sandbox, record, repeat until the budget is spent.

`workers` jobs are kept in flight and a freed slot takes the next candidate at once (the steady state of
search/loop/schedule.py). Candidate `seq` draws its randomness from the run's seed and `seq`, and is proposed
from the results of exactly the candidates its schedule names, so the run is the same whatever order the
jobs finish in, and a resumed run re-runs the pending candidates before proposing new ones.

Novelty is judged twice: before anything runs, a program that is an earlier one up to layout and
docstrings (its AST fingerprint) is discarded and proposed again; in the sandbox, a candidate that ranks
the target's behaviour sample as a program of its view already evaluated did (its behaviour signature) is a
behavioural duplicate: its job stops before tuning, and it is recorded as such and not scored. It spends
none of the candidate budget, but at most as many again as the budget are proposed in all.
"""

from __future__ import annotations

import json
import queue
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from dataclasses import asdict
from itertools import takewhile

import targets
from sandbox.base import Sandbox
from sandbox.job import Job, Limits, Result
from search.jobs import job, run, tuning
from search.loop.database import ProgramDatabase
from search.loop.journal import CandidateRecord, Journal
from search.loop.schedule import Schedule, schedule_for
from search.loop.selection import run_instances
from search.proposers.base import Entry, Exchange, ProposalFailed, ProposalRequest, Proposer, TargetBrief
from search.settings import RunConfig
from search.stats.means import mean_metrics
from search.terms import BASELINE
from targets.base import FeatureRegistry, Objective, Target, required
from verifiers.fingerprint import fingerprint
from verifiers.program import Program, Signature
from verifiers.properties import Domain, Outcome
from verifiers.smt import Verifier
from verifiers.static import StaticError, check


class BaselineFailed(RuntimeError):
    """A baseline could not be evaluated on the run's workload: the run cannot be compared, so it fails."""


class Reporter:
    """Receives progress; the CLI draws it on stderr, tests stay silent."""

    def started(self, run_id: str, done: int, budget: int) -> None: ...

    def candidate(self, done: int, budget: int, best: float | None, status: str) -> None: ...

    def note(self, message: str) -> None: ...


def brief(
    target: Target, objective: Objective | None = None, signatures: tuple[Signature, ...] | None = None
) -> TargetBrief:
    """What a proposer may know of the target, with what the run optimizes (the target's own objective
    unless an option chose another) and the decision functions it writes (the target's own unless a run
    narrowed them to what an engine exposes)."""
    chosen = objective or target.objective
    written = signatures or target.signatures
    return TargetBrief(
        name=target.name,
        description=target.description,
        signatures=written,
        registries={s.name: _registry(target, s) for s in written},
        objective=chosen.metric,
        direction=chosen.direction,
        knobs=target.knobs(),
    )


def _registry(target: Target, signature: Signature) -> FeatureRegistry:
    """The features a decision function reads: the target's registry, narrowed where the function is."""
    registry = target.registry(signature.name)
    return registry if set(registry.names) <= set(signature.features) else registry.only(signature.features)


def searched(target: Target, engine: str | None) -> tuple[Signature, ...]:
    """The decision functions a run writes: the target's, over the features `engine` exposes where the run
    is for one (`--for`), so that whatever it finds exports there."""
    if engine is None:
        return target.signatures
    export = target.exports()[engine]
    return tuple(export.narrowed(s) for s in target.signatures)


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
        journal: Journal,
        sandbox: Sandbox,
        proposer: Proposer,
        reporter: Reporter | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        executor: Executor,
    ) -> None:
        self.journal = journal
        self.run_id = journal.run_id
        self.config = RunConfig.from_json(journal.config())
        self.sandbox = sandbox
        self.proposer = proposer
        self.reporter = reporter or Reporter()
        self.clock = clock
        self.executor = executor
        self.target = targets.load(self.config.target)
        self.instances = run_instances(
            self.target, self.config.workload, self.config.options, self.config.select
        )
        self.objective = self.target.objective_for(self.config.options)
        self.maximize = self.objective.direction == "maximize"
        self.database = ProgramDatabase(islands=self.config.islands)
        self.domains = domains(self.target)
        self.signatures = searched(self.target, self.config.for_engine)
        self.required = required(self.target, self.config.require, self.config.options)
        self.properties = (*self.target.properties(), *self.required)
        self.verifier = Verifier()
        self.schedule: Schedule = schedule_for(self.config.schedule, self.config.workers)
        self.history: list[CandidateRecord] = []
        """The run's candidates by seq (baselines aside), each updated as its job finishes."""
        self.anchors: list[CandidateRecord] = []
        """The run's baselines (and seeds), evaluated before any candidate."""
        self.admitted = 0
        """How many of `history` the program database holds."""
        self.best: float | None = None
        self.done = 0
        self.deadline: float | None = None
        """When the time budget ends, on `clock`; None without one."""

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
        self.deadline = started + self.config.time_budget_s if self.config.time_budget_s else None
        self.journal.started()
        try:
            self._ensure_baselines(pool)
        except BaselineFailed as exc:
            self.journal.ended("failed", str(exc))
            self.journal.log("failed", str(exc))
            raise
        rows = list(self.journal.candidates())
        for row in rows:
            self._note_best(row)
            if row.proposer == BASELINE:
                self._admit(row)
        self.history = [row for row in rows if row.proposer != BASELINE]
        self.anchors = [row for row in rows if row.proposer == BASELINE]
        self.done = sum(row.status not in ("pending", "duplicate") for row in self.history)
        self.reporter.started(self.run_id, self.done, self.config.budget)
        running = {self._submit(pool, row): row for row in self.history if row.status == "pending"}
        seq = max((row.seq for row in rows), default=-1) + 1
        stop, exhausted = "", False
        while True:
            if not stop and self.config.time_budget_s and self.clock() - started > self.config.time_budget_s:
                stop = "time budget spent"
            free = min(self.schedule.workers - len(running), self._room())
            seqs = [] if stop or exhausted else list(takewhile(self._ready, range(seq, seq + max(free, 0))))
            if seqs and (stop := self._cap_reached()):
                seqs = []
            if seqs:
                proposed = self._propose_group(seqs)
                seq += len(seqs)
                if not proposed:
                    stop = self._cap_reached()
                    exhausted = not stop
                for row in proposed:  # in self.history already
                    if row.status == "pending":
                        running[self._submit(pool, row)] = row
                    else:
                        self._finished(row)
            if not running:
                if seqs:  # every one proposed was rejected before it ran: propose again
                    continue
                break
            timeout = None if stop else self._time_left(started)
            finished, _ = wait(running, timeout=timeout, return_when=FIRST_COMPLETED)
            for future in sorted(finished, key=lambda f: running[f].seq):
                row = running.pop(future)
                self._record(row, _outcome(future))
                self._finished(row)
        if exhausted:
            self.journal.log("stopped", "the proposer produced no new candidate")
        if stop:
            self.journal.ended("stopped", stop)
            self.journal.log("stopped", stop)
        else:  # an exhausted proposer ends the run short of its budget: the run says so
            short = f"the proposer produced no new candidate after {self.done} of {self.config.budget}"
            self.journal.ended("finished", short if exhausted else "")

    def _room(self) -> int:
        """How many more candidates the budget allows: a behavioural duplicate spends none of it (a pending
        candidate counts as spent), and no more than twice the budget are proposed in all."""
        alike = sum(row.status == "duplicate" for row in self.history)
        budget = self.config.budget
        return min(budget - (len(self.history) - alike), 2 * budget - len(self.history))

    def _finished(self, row: CandidateRecord) -> None:
        self.done += row.status != "duplicate"
        self._note_best(row)
        self.reporter.candidate(self.done, self.config.budget, self.best, row.status)

    def _note_best(self, row: CandidateRecord) -> None:
        """The best score of a proposed candidate so far, for the progress line: what the final table
        calls found (the baselines are its other rows)."""
        if row.status != "evaluated" or row.score is None or row.proposer == BASELINE:
            return
        if self.best is None or (row.score > self.best) == self.maximize:
            self.best = row.score

    def _time_left(self, started: float) -> float | None:
        """How long to wait for a job before the time budget is looked at again."""
        if not self.config.time_budget_s:
            return None
        return max(0.0, self.config.time_budget_s - (self.clock() - started)) + 0.01

    def _submit(self, pool: Executor, row: CandidateRecord) -> Future[Result]:
        return pool.submit(self.sandbox.run, self._job(row))

    def _ready(self, seq: int) -> bool:
        """Whether every candidate that candidate `seq` is proposed from has finished."""
        end = self.schedule.view_end(seq)
        return all(row.status != "pending" for row in self.history if row.seq < end)

    def _view(self, seq: int) -> list[CandidateRecord]:
        """The finished candidates that candidate `seq` is proposed (and gated) from, by seq."""
        end = self.schedule.view_end(seq)
        return [row for row in self.history if row.seq < end]

    def _advance(self, seq: int) -> None:
        """Admit to the program database, in seq order, every candidate of `seq`'s view not yet in it;
        islands migrate every `migrate_every` candidates, as the run grew."""
        for row in self._view(seq)[self.admitted :]:
            self._admit(row)
            self.admitted += 1
            if self.admitted % self.config.migrate_every == 0:
                self.database.migrate()

    def _ensure_baselines(self, pool: Executor) -> None:
        """Evaluate every baseline once per run; they seed the islands and anchor the report."""
        existing = {row.name: row for row in self.journal.candidates() if row.proposer == BASELINE}
        rows = []
        for i, (name, source) in enumerate({**self.target.baselines(), **self.config.seeds}.items()):
            row = existing.get(name) or self.journal.add(
                CandidateRecord(
                    run_id=self.run_id,
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
        done = {e.policy for e in self.journal.evaluations() if e.policy}
        builtins = [n for n in self.target.builtin_baselines() if n not in done]
        if not rows and not builtins:
            return
        self.reporter.note(f"evaluating {len(rows) + len(builtins)} baselines")
        eval_only = tuple(i for i in self.instances if i.role == "eval")
        tuned = self.target.tuned_baselines()  # constants a baseline fits on the train part
        jobs = [self._job(row, tune=row.name in tuned) for row in rows]
        jobs += [
            job(self.config.target, "", eval_only, builtin=name, limits=self.limits) for name in builtins
        ]
        results = run(self.sandbox, jobs, pool)
        names = [row.name for row in rows] + builtins
        for name, result in zip(names, results, strict=True):
            if result.status != "ok":
                raise BaselineFailed(f"baseline {name} failed: {result.status}: {result.message}")
        for row, result in zip(rows, results, strict=False):
            self._record(row, result)
        for name, result in zip(builtins, results[len(rows) :], strict=True):
            self.journal.scored(None, result, policy=name)

    def _propose_group(self, seqs: list[int]) -> list[CandidateRecord]:
        """New candidates for `seqs`; a proposer with concurrency > 1 writes several at the same time.

        Each draws its island, parent and inspirations from its own view, in seq order. One at a time,
        each also sees the rejections of those before it; side by side (an LLM endpoint's concurrency),
        all are drawn before any is written. Proposals are awaited, not joined (_awaited): a hanging call
        holds neither an interrupt nor the time budget.
        """
        taken = {row.fingerprint for row in self.journal.candidates()}
        lock = threading.Lock()
        width = min(self.proposer.concurrency, len(seqs))
        if width <= 1:
            rows = []
            for seq in seqs:
                draw = self._draw(seq)
                (row,) = self._awaited([lambda gone, draw=draw: self._propose(*draw, taken, lock, gone)])
                if row is not None:
                    self.history.append(row)
                    rows.append(row)
            return rows
        draws = [self._draw(seq) for seq in seqs]
        written = self._awaited(
            [lambda gone, draw=draw: self._propose(*draw, taken, lock, gone) for draw in draws], width
        )
        rows = [row for row in written if row is not None]
        self.history.extend(rows)
        return rows

    def _awaited(
        self, calls: list[Callable[[threading.Event], CandidateRecord | None]], width: int = 1
    ) -> list[CandidateRecord | None]:
        """Run the calls in daemon threads, `width` at a time, and wait for them until the time budget
        ends. An interrupt, or the end of the time budget, abandons those still out: their event is set,
        so they record nothing when their call returns, and a daemon thread is never joined at exit, so
        Ctrl-C ends the process at once however long an endpoint hangs. A call's error is raised here."""
        gone = threading.Event()
        answers: queue.SimpleQueue[tuple[int, CandidateRecord | None, BaseException | None]]
        answers = queue.SimpleQueue()
        slots = threading.Semaphore(width)

        def run(k: int) -> None:
            try:
                with slots:
                    answers.put((k, calls[k](gone), None))
            except BaseException as exc:  # handed to the waiting thread, which raises it
                answers.put((k, None, exc))

        for k in range(len(calls)):
            threading.Thread(target=run, args=(k,), daemon=True, name=f"proposal-{k}").start()
        results: list[CandidateRecord | None] = [None] * len(calls)
        try:
            for _ in calls:
                left = None if self.deadline is None else max(self.deadline - self.clock(), 0.0)
                k, row, error = answers.get(timeout=left)
                if error is not None:
                    raise error
                results[k] = row
        except queue.Empty:  # the time budget ended with calls out: the run stops without them
            gone.set()
        except BaseException:
            gone.set()
            raise
        return results

    def _draw(
        self, seq: int
    ) -> tuple[int, random.Random, tuple[int, Entry, tuple[Entry, ...]], tuple[str, ...]]:
        """What candidate `seq` is written from: its random stream, island, parent, inspirations and the
        failures to avoid."""
        self._advance(seq)
        rng = random.Random(f"{self.config.seed}:{seq}")
        return seq, rng, self.database.sample(rng), self._recent_failures(seq)

    def _propose(
        self,
        seq: int,
        rng: random.Random,
        drawn: tuple[int, Entry, tuple[Entry, ...]],
        failures: tuple[str, ...],
        taken: set[str],
        lock: threading.Lock,
        gone: threading.Event,
    ) -> CandidateRecord | None:
        """Propose until a new (unseen) program comes out, and record it before anything runs; nothing
        once the call is abandoned (`gone`)."""
        island, parent, inspirations = drawn
        for attempt in range(20):
            if gone.is_set() or self._cap_reached():
                return None
            request = ProposalRequest(
                target=brief(self.target, self.objective, self.signatures),
                parent=parent,
                inspirations=inspirations,
                failures=failures,
                seed=rng.randrange(2**31) + attempt,
                repeated=self._repeated(seq, parent.candidate_id),
                taken=frozenset(taken),
            )
            asked = time.monotonic()
            try:
                proposal = self.proposer.propose(request)
            except ProposalFailed as exc:
                if gone.is_set():
                    return None
                self.journal.log(
                    "proposal-failed",
                    str(exc),
                    proposer=exc.proposer or self.proposer.name,
                    model=exc.model,
                    tokens=exc.tokens,
                    cost_usd=exc.cost_usd,
                    proposal=_figures(time.monotonic() - asked, exc.exchange),
                )
                continue
            figures = _figures(time.monotonic() - asked, proposal.exchange)
            if gone.is_set():
                return None
            mark = fingerprint(proposal.source)
            with lock:
                duplicate = mark in taken
                taken.add(mark)
            if duplicate:  # counted where the budget went (`runs show`), then proposed again
                self.journal.log(
                    "proposal-duplicate",
                    f"the same program as an earlier candidate (parent {parent.name})",
                    proposer=proposal.proposer,
                    model=proposal.model,
                    tokens=proposal.tokens,
                    cost_usd=proposal.cost_usd,
                    proposal=figures,
                )
                continue
            row = CandidateRecord(
                run_id=self.run_id,
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
                proposal=figures,
            )
            rejection, outcomes = self._screen(proposal.source)
            if rejection:
                row.status, row.message = "rejected", rejection
            return self.journal.add(row, outcomes)
        return None

    def _screen(self, source: str) -> tuple[str, list[Outcome]]:
        """Checks that need no sandbox: the static check, then Z3 on the target's properties and the run's.

        An empty rejection means the candidate may run: a counterexample to a hard property rejects it, and
        so does any verdict but proved on a property the run requires; an unknown verdict on the target's
        own is recorded as unverified, never as proved.
        """
        try:
            program = self._program(source)
        except StaticError as exc:
            return f"static check: {exc}", []
        outcomes = self.verifier.verify(program, self.domains, self.properties)
        demanded = {p.name for p in self.required}
        failed = [o for o in outcomes if o.rejects or (o.property in demanded and o.verdict != "proved")]
        if not failed:
            return "", outcomes
        more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
        first = failed[0]
        unproved = "" if first.verdict == "counterexample" else "required, not proved: "
        return f"verification: {first.property}: {unproved}{first.message}{more}", outcomes

    def _writable(self, source: str) -> bool:
        """Whether the run could have written this program (it reads only the features searched)."""
        try:
            self._program(source)
        except StaticError:
            return False
        return True

    def _cap_reached(self) -> str:
        """Why the run must stop for its token or cost cap, or an empty string while under both."""
        cap_cost, cap_tokens = self.config.max_cost_usd, self.config.max_tokens
        if cap_cost is None and cap_tokens is None:
            return ""
        tokens, cost = self.journal.spend()
        if cap_cost is not None and cost >= cap_cost:
            return f"cost cap reached: ${cost:.4f} spent of ${cap_cost:g}"
        if cap_tokens is not None and tokens >= cap_tokens:
            return f"token cap reached: {tokens} tokens used of {cap_tokens}"
        return ""

    def _program(self, source: str) -> Program:
        return check(source, self.signatures)

    def _job(self, row: CandidateRecord, tune: bool = True) -> Job:
        tuned = None
        if tune:
            baseline = row.proposer == BASELINE  # never gated nor a duplicate: it anchors the report
            gate = None if baseline else self._gate(row.seq)
            seen = () if baseline else tuple(self._behaviours(row.seq))
            tuned = tuning(self.config.trials, self.config.seed, row.seq, gate, seen)
        return job(self.config.target, row.source, self.instances, tuning=tuned, limits=self.limits)

    def _gate(self, seq: int) -> float | None:
        """The cascade: a candidate reaches the full workload only if its train score makes the top k of
        its view."""
        scores = sorted(
            (
                row.train_score
                for row in self._view(seq)
                if row.status == "evaluated" and row.train_score is not None
            ),
            reverse=self.maximize,
        )
        return scores[self.config.gate_top_k - 1] if len(scores) >= self.config.gate_top_k else None

    def _behaviours(self, seq: int) -> dict[str, CandidateRecord]:
        """Each behaviour signature of the programs candidate `seq` may not repeat (the baselines and the
        scored candidates of its view), with the first program that showed it."""
        found: dict[str, CandidateRecord] = {}
        for row in [*self.anchors, *self._view(seq)]:
            if row.behaviour and row.status in ("evaluated", "gated"):
                found.setdefault(row.behaviour, row)
        return found

    def _repeated(self, seq: int, parent_id: int) -> tuple[str, ...]:
        """What the parent's children of `seq`'s view that turned out behavioural duplicates changed."""
        return tuple(
            row.note for row in self._view(seq) if row.status == "duplicate" and row.parent_id == parent_id
        )

    def _record(self, row: CandidateRecord, result: Result) -> None:
        metric = self.objective.metric
        train = [i.metrics[metric] for i in result.instances if i.role == "train" and metric in i.metrics]
        evals = [i.metrics[metric] for i in result.instances if i.role == "eval" and metric in i.metrics]
        row.train_score = sum(train) / len(train) if train else None
        row.params = json.dumps(result.params, sort_keys=True)
        row.trials = json.dumps([asdict(t) for t in result.study])
        row.message = result.message
        row.behaviour = result.behaviour
        if result.status != "ok":
            row.status = result.status
        elif result.repeated:
            first = self._behaviours(row.seq).get(result.behaviour)
            row.status = "duplicate"
            row.message = f"behaves as {_label(first)}: ranks the target's behaviour sample the same way"
        elif result.gated or not evals:
            row.status = "gated"
        else:
            row.status, row.score = "evaluated", sum(evals) / len(evals)
        self.journal.finish(row, result)

    def _admit(self, row: CandidateRecord) -> None:
        if row.status != "evaluated" or row.score is None or row.id is None:
            return
        if row.proposer == BASELINE and not self._writable(row.source):
            return  # an anchor of the report, not a parent: its children could not be what the run finds
        score = row.score if self.maximize else -row.score
        evals = [e.metrics for e in self.journal.evaluations(row.id) if e.role == "eval"]
        metrics, params = mean_metrics(evals), json.loads(row.params)
        entry = Entry(row.id, row.source, score, metrics, params, label=row.name or f"#{row.seq}")
        self.database.add(entry, row.island)

    def _recent_failures(self, seq: int) -> tuple[str, ...]:
        """The last failures shown to the proposer of `seq`: every earlier rejection (decided when it was
        proposed, so known at once) and the failed runs of its view."""
        end = self.schedule.view_end(seq)
        failed = [
            r
            for r in self.history
            if r.seq < seq
            and (
                r.status == "rejected" or (r.seq < end and r.status not in ("evaluated", "gated", "pending"))
            )
        ]
        return tuple(f"candidate {r.seq}: {r.message}" for r in failed[-5:])


def _figures(seconds: float, exchange: Exchange | None) -> str:
    """A proposal's stored figures: the seconds it took, and its exchange with a model where it had one."""
    had = asdict(exchange) if exchange is not None else {}
    return json.dumps({"seconds": round(seconds, 3), **had})


def _outcome(future: Future[Result]) -> Result:
    """A job's result; a job the executor lost for good (its retries spent) counts as crashed."""
    try:
        return future.result()
    except Exception as exc:
        return Result(status="crashed", message=f"the executor lost the job: {type(exc).__name__}: {exc}")


def _label(row: CandidateRecord | None) -> str:
    """How a message names a candidate: a baseline by name, a candidate by its number."""
    if row is None:
        return "an earlier program"
    return f"baseline {row.name}" if row.proposer == BASELINE else f"candidate #{row.seq}"
