"""Behavioural duplicates in a search: a candidate that ranks the target's behaviour sample as a program
already evaluated (a baseline, or a candidate it was proposed after) is not tuned, is recorded as such, and
is counted where the budget went; a killed run resumes to the same outcome."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from in_process import InProcess
from test_steady_state import Interrupting, leaderboard, service

from search.cli.main import main
from search.proposers.base import Proposal, ProposalRequest, Proposer
from search.service.runs import RunService, prepare

KEYS = (
    "b.hits - 0.01 * b.age",  # new
    "-2.0 * b.age",  # LRU (b.last_access) doubled and shifted: the lru baseline's behaviour
    "2.0 * b.hits - 0.02 * b.age",  # candidate 0 doubled
    "b.hits + 1.0",  # the lfu baseline shifted
    "b.depth - b.age",  # new
    "b.accesses - b.age",  # new
)
BUDGET = 3
"""Behavioural duplicates spend none of it: the run writes every one of KEYS."""


@dataclass
class Scripted:
    """Writes KEYS in order from `start`, one per proposal, and keeps the requests it was given."""

    start: int = 0
    name: str = "scripted"
    concurrency: int = 1
    requests: list[ProposalRequest] = field(default_factory=list)

    def propose(self, request: ProposalRequest) -> Proposal:
        key = KEYS[(self.start + len(self.requests)) % len(KEYS)]
        self.requests.append(request)
        source = f'"""{key}"""\n\n\ndef priority(b, p):\n    return {key}\n'
        return Proposal(source, self.name, note=f"k: {key}")


def search(runs: RunService, sandbox: object, proposer: Proposer | None = None) -> str:
    settings = {"budget": BUDGET, "trials": 2, "workers": 1, "schedule": "batch"}
    info = runs.record(prepare("kv", "gen:chat:1", {"capacity": 300}, **settings))
    with ThreadPoolExecutor(max_workers=1) as pool:
        runs.execute(info.run_id, sandbox, proposer or Scripted(), executor=pool)  # type: ignore[arg-type]
    return info.run_id


def test_a_candidate_that_behaves_as_an_evaluated_program_is_not_tuned_and_is_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = service(tmp_path, "novelty")
    proposer = Scripted()
    run_id = search(runs, InProcess(), proposer)
    rows = [c for c in runs.read.candidates(run_id) if not c.is_baseline]
    assert [c.status for c in rows] == ["evaluated", *["duplicate"] * 3, "evaluated", "evaluated"]
    assert rows[1].message.startswith("behaves as baseline lru: ")
    assert rows[2].message.startswith("behaves as candidate #0: "), "named as every front end names it"
    assert rows[3].message.startswith("behaves as baseline lfu: ")
    assert all(c.score is None and not c.evaluations for c in rows if c.status == "duplicate")
    assert rows[2].behaviour == rows[0].behaviour != rows[4].behaviour
    budget = runs.read.budget(run_id)
    assert (budget.behaved_alike, budget.evaluated + budget.gated, budget.duplicates) == (3, 3, 0)
    assert (runs.read.run(run_id).done, runs.read.run(run_id).status) == (BUDGET, "finished")
    assert any("candidate 1: behaves as baseline lru" in f for f in proposer.requests[-1].failures)
    capsys.readouterr()
    main(["runs", "show", run_id, "--db", str(runs.store.engine.url)])
    assert "3 behaved as an evaluated program (not tuned)" in capsys.readouterr().out
    main(["runs", "show", run_id, "--db", str(runs.store.engine.url), "--json"])
    assert json.loads(capsys.readouterr().out)["budget"]["behaved_alike"] == 3


def test_a_killed_run_with_behavioural_duplicates_resumes_to_the_unbroken_run(tmp_path: Path) -> None:
    whole = service(tmp_path, "whole")
    unbroken = search(whole, InProcess())
    killed = service(tmp_path, "killed")
    with pytest.raises(KeyboardInterrupt):
        search(killed, Interrupting(allowed=3))  # the first tunes lfu_da, a baseline with a constant
    (run_id,) = [r.run_id for r in killed.read.runs()]
    written = [c for c in killed.read.candidates(run_id) if not c.is_baseline]
    assert written[-1].status == "pending" and "duplicate" in [c.status for c in written]
    killed.resume(run_id)
    with ThreadPoolExecutor(max_workers=1) as pool:
        killed.execute(run_id, InProcess(), Scripted(start=len(written)), executor=pool)  # type: ignore[arg-type]
    assert leaderboard(killed, run_id) == leaderboard(whole, unbroken)
    assert killed.read.budget(run_id) == whole.read.budget(unbroken)


@dataclass
class Rephrasing:
    """Writes LRU again and again, each time in new words: every candidate a behavioural duplicate."""

    name: str = "rephrasing"
    concurrency: int = 1
    written: int = 0

    def propose(self, request: ProposalRequest) -> Proposal:
        self.written += 1
        return Proposal(
            f'"""LRU."""\n\n\ndef priority(b, p):\n    return -{self.written}.0 * b.age\n', self.name
        )


def test_a_proposer_that_only_rephrases_stops_at_twice_the_budget(tmp_path: Path) -> None:
    runs = service(tmp_path, "rephrasing")
    run_id = search(runs, InProcess(), Rephrasing())
    rows = [c for c in runs.read.candidates(run_id) if not c.is_baseline]
    assert [c.status for c in rows] == ["duplicate"] * 2 * BUDGET
    assert runs.read.run(run_id).status == "finished"
