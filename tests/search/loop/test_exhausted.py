"""A proposer that has nothing new left ends the run short of its budget, and the run says why."""

from __future__ import annotations

from pathlib import Path

from in_process import InProcess

from search.proposers.base import Proposal, ProposalRequest
from search.service.runs import RunService, prepare
from search.store.store import Store, open_engine

ONLY = '"""The one program it knows."""\n\n\ndef priority(b, p):\n    return b.hits - b.age\n'


class OneIdea:
    """A proposer that writes the same program every time: after the first, every proposal is a duplicate."""

    name = "one-idea"
    concurrency = 1

    def propose(self, request: ProposalRequest) -> Proposal:
        return Proposal(ONLY, self.name)


def test_a_run_whose_proposer_is_exhausted_finishes_early_and_says_so(tmp_path: Path) -> None:
    runs = RunService(Store(open_engine(f"sqlite:///{tmp_path / 'runs.db'}")))
    info = runs.record(prepare("kv", "gen:chat:1", {"capacity": 300}, budget=5, trials=2, workers=1))
    runs.execute(info.run_id, InProcess(), OneIdea())
    run = runs.read.run(info.run_id)
    assert (run.status, run.done) == ("finished", 1)
    assert run.message == "the proposer produced no new candidate after 1 of 5"
    events = [e.message for e in runs.read.events(info.run_id) if e.kind == "proposal-duplicate"]
    assert len(events) >= 20, "each slot tries twenty times before giving up"
