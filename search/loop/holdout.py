"""Holding out the tail of a workload: a run tunes and selects on the head, and is judged on the tail after.

`--holdout 0.33` cuts the workload's requests in time order (inside the run's own `requests` window, if
any): the run's options window the head, so the loop never sees the tail. The tail is scored warm where
the target can replay what came before it uncounted (kv: a cache in service does not empty itself at the
cut, and an emptied one would lose the reuse that crosses it and every feature's history). After the
search, the best candidate and every baseline are scored on the tail twice: with the constants tuned on
the head (a forecast), and after re-tuning them on the whole tail (instance specialization, as Vulcan
does: how well the program's form fits that traffic, not a forecast), starting from the head's constants
so re-tuning can only keep or improve the tail's score. The scores are evaluations of the run (roles
"tail" and "tail-retuned"), so the read model reports them from the store alone.
"""

from __future__ import annotations

import json
import math
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from typing import Any

import targets
from sandbox.base import Sandbox
from sandbox.job import Job, Limits, Tuning
from search.errors import UserError
from search.jobs import job, run, tuning
from search.loop.journal import CandidateRecord, Journal
from search.terms import BASELINE, TAIL, TAIL_RETUNED, Split
from targets.base import WARM, WINDOW, Instance, OptionError, Target, WorkloadError, request_window, windowed
from verifiers.static import check, render

WINDOW_OPTION = WINDOW.name
"""The option (START:STOP over the workload's requests in time order) a windowed target declares."""
WARM_OPTION = WARM.name
"""Where a target declares it, the tail is scored warm: it meets the state the head left, as in service."""


def check_share(value: Any) -> float:
    """A holdout share: a number strictly between 0 and 1 (text from a flag is parsed); one line if not."""
    try:
        share = float(value)
    except (TypeError, ValueError):
        raise UserError(f"--holdout must be a number between 0 and 1, got {value!r}") from None
    if isinstance(value, bool) or not (math.isfinite(share) and 0.0 < share < 1.0):
        raise UserError(f"--holdout must be between 0 and 1 (exclusive), got {value!r}")
    return share


def split(target: Target, workload: str, options: dict[str, Any], share: float) -> Split:
    """Cut the workload (within the options' window) so the last `share` of its requests are the tail."""
    if not windowed(target):
        raise UserError(f"target {target.name} cannot hold out a tail: its workloads have no request window")
    try:
        n = target.requests(workload)
        assert n is not None, f"target {target.name} declares a request window but counts no requests"
        window = options.get(WINDOW_OPTION)
        lo, hi = request_window(window, n) if window else (0, n)
    except (WorkloadError, OptionError) as exc:
        raise UserError(str(exc)) from None
    cut = hi - round((hi - lo) * share)
    if not lo < cut < hi:
        raise UserError(f"--holdout {share:g} of {hi - lo} requests leaves the head or the tail empty")
    warm = WARM in target.options
    return Split(share, f"{lo}:{cut}", f"{cut}:{hi}", warm)


def tail_scoring(target: Target, workload: str, options: dict[str, Any], cut: Split) -> tuple[Instance, ...]:
    """The target's instances that score the whole tail window (role "eval")."""
    try:
        warm = {WARM_OPTION: True} if cut.warm else {}
        instances = target.instances(workload, {**options, WINDOW_OPTION: cut.tail, **warm})
        return tuple(i for i in instances if i.role == "eval")
    except (WorkloadError, OptionError) as exc:
        raise UserError(str(exc)) from None


def retune_job(
    target: Target,
    source: str,
    params: dict[str, float],
    scoring: tuple[Instance, ...],
    tuning: Tuning,
    limits: Limits | None = None,
) -> Job:
    """A job that fits the constants on the very instances it scores (the tail), starting from `params`."""
    fitting = tuple(replace(i, role="train") for i in scoring)
    start = render(check(source, target.signatures), params)  # the first trial: the values given
    return job(target.name, start, fitting + scoring, tuning=tuning, limits=limits)


@dataclass(frozen=True)
class _Subject:
    """One policy the tail report scores: a candidate row of the run, or a built-in baseline by name."""

    row: CandidateRecord | None
    builtin: str = ""


def measure_tail(
    journal: Journal,
    best_id: int | None,
    sandbox: Sandbox,
    executor: Executor,
    trials: int,
    seed: int,
    limits: Limits,
) -> int:
    """Score the best candidate (`best_id`) and every baseline on the run's held-out tail and store it;
    policies already scored are skipped, so a resumed run finishes the report. Returns how many ran."""
    config = journal.config()
    cut = Split.from_json(config["holdout"])
    target = targets.load(journal.target())
    options = {k: v for k, v in config["options"].items() if k != WINDOW_OPTION}
    scoring = tail_scoring(target, config["workload"], options, cut)
    done = {(e.candidate_id, e.policy) for e in journal.evaluations() if e.role in (TAIL, TAIL_RETUNED)}
    rows = [r for r in journal.candidates() if r.status == "evaluated"]
    subjects = [_Subject(r) for r in rows if r.proposer == BASELINE or r.id == best_id]
    builtins = {e.policy for e in journal.evaluations() if e.policy and e.role == "eval"}
    subjects += [_Subject(None, name) for name in target.builtin_baselines() if name in builtins]
    subjects = [s for s in subjects if ((s.row.id if s.row else None), s.builtin) not in done]
    jobs: list[tuple[_Subject, str, Job]] = []
    for s in subjects:
        if s.row is None:
            jobs.append((s, TAIL, job(target.name, "", scoring, builtin=s.builtin, limits=limits)))
            continue
        params = json.loads(s.row.params or "{}")
        jobs.append((s, TAIL, job(target.name, s.row.source, scoring, params=params, limits=limits)))
        retune = tuning(trials, seed, s.row.seq)
        jobs.append((s, TAIL_RETUNED, retune_job(target, s.row.source, params, scoring, retune, limits)))
    results = run(sandbox, [j for _, _, j in jobs], executor)
    for (s, role, _), result in zip(jobs, results, strict=True):
        name = s.builtin if s.row is None else s.row.name or f"#{s.row.seq}"
        if result.status != "ok":
            journal.log("holdout-failed", f"{name} on the tail ({role}): {result.status}: {result.message}")
            continue
        journal.scored(s.row.id if s.row else None, result, policy=s.builtin, role=role)
    if jobs:
        journal.log("holdout", f"tail {cut.tail} scored: {len(subjects)} policies, head {cut.head}")
    return len(subjects)
