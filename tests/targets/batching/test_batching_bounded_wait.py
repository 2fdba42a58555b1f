"""`bounded-wait`: a request that has waited W seconds for its first token outranks every request that has
waited less than a share of W, proved by Z3 for a batching priority, and required of a run's candidates."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import targets
from sandbox.job import InstanceResult, Job, Result
from search.cli.main import main
from search.evaluation import domains
from search.loop.search import Search
from search.proposers.base import Proposal, ProposalRequest
from search.service import RunService
from search.settings import RunConfig
from search.store.store import Store, open_engine
from targets.base import OptionError, required
from targets.batching.properties import bounded_wait
from verifiers.smt import prove
from verifiers.static import check

BATCHING = targets.load("batching")
TTFT_SLO_S = 5.0


def _verdict(baseline: str, wait_s: float, share: float = 0.5):  # type: ignore[no-untyped-def]
    program = check(BATCHING.baselines()[baseline], BATCHING.signatures)
    (outcome,) = prove(program, domains(BATCHING), [bounded_wait(wait_s, share, TTFT_SLO_S)])
    return outcome


def test_first_come_first_served_bounds_every_wait() -> None:
    assert _verdict("fcfs", 30.0).verdict == "proved"
    assert _verdict("fcfs", 0.5, share=0.99).verdict == "proved"


def test_shortest_prompt_first_is_refuted_by_a_short_newcomer() -> None:
    outcome = _verdict("spf", 30.0)
    assert outcome.verdict == "counterexample" and outcome.rejects
    assert outcome.counterexample is not None
    waited, newcomer = outcome.counterexample["inputs"], outcome.counterexample["inputs_after"]
    assert waited["waiting"] >= 30.0 > 15.0 > newcomer["waiting"]
    assert waited["prompt"] >= newcomer["prompt"], "the newcomer's prompt is no longer: it goes first"


def test_earliest_deadline_first_bounds_a_wait_past_the_slo_over_the_share_left() -> None:
    """Before its first token a request's deadline is its arrival plus the TTFT SLO, and no deadline is
    before its request's arrival: EDF then bounds any wait W with W (1 - share) > the TTFT SLO."""
    assert _verdict("edf", 30.0).verdict == "proved", "30 s x (1 - 0.5) > 5 s"
    assert _verdict("edf", 6.0).verdict == "counterexample", "6 s x (1 - 0.5) < 5 s"


def test_a_run_names_what_it_may_require_and_refuses_a_malformed_value() -> None:
    options = {"ttft_slo_s": TTFT_SLO_S}
    (made,) = required(BATCHING, "bounded-wait=20:0.25", options)
    assert made.name == "bounded-wait" and "20 s" in made.statement and "5 s" in made.statement
    with pytest.raises(OptionError, match="offers bounded-wait=W"):
        required(BATCHING, "fairness=1", options)
    with pytest.raises(OptionError, match="SHARE within"):
        required(BATCHING, "bounded-wait=20:2", options)
    assert required(targets.load("kv"), None, {}) == ()


def test_search_refuses_a_bad_requirement_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["search", "--target", "batching", "--require", "bounded-wait=soon", "--budget", "1"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "expected W[:SHARE]" in err


@dataclass
class Scripted:
    sources: list[str]
    requests: list[ProposalRequest] = field(default_factory=list)
    name: str = "scripted"
    concurrency: int = 1

    def propose(self, request: ProposalRequest) -> Proposal:
        self.requests.append(request)
        return Proposal(source=self.sources[len(self.requests) - 1], proposer=self.name)


@dataclass
class Spy:
    """A sandbox that records every job and scores a candidate by the length of its source."""

    jobs: list[Job] = field(default_factory=list)
    name: str = "spy"

    def run(self, job: Job) -> Result:
        self.jobs.append(job)
        score = 0.5 if job.builtin else len(job.source) / 1000
        instances = tuple(
            InstanceResult(i.label, i.role, {"slo_attainment": score}, 0.0) for i in job.instances
        )
        return Result("ok", instances=instances, backend=self.name)


def test_a_run_that_requires_it_ranks_only_proved_programs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    least_pending = "def priority(r, p):\n    return -r.pending\n"
    late_first = "def priority(r, p):\n    return r.waiting - r.prompt / 1000\n"  # less a term W cannot bound
    doubled = "def priority(r, p):\n    return 2 * r.waiting + r.running\n"  # a bounded term: proved
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = Store(open_engine(url))
    config = RunConfig(
        target="batching",
        workload=BATCHING.default_config()["workload"],
        options={k: v for k, v in BATCHING.default_config().items() if k != "workload"},
        proposer="evolve",
        budget=3,
        workers=1,
        require="bounded-wait=30",
    )
    service = RunService(store)
    info = service.record(config)
    proposer, sandbox = Scripted([least_pending, late_first, doubled]), Spy()
    with ThreadPoolExecutor(max_workers=1) as pool:
        Search(service.journal(info.run_id), sandbox, proposer, executor=pool).execute()
    rows = {row.seq: row for row in store.candidates(info.run_id) if row.proposer == "scripted"}
    statuses = [rows[seq].status for seq in sorted(rows)]
    assert statuses == ["rejected", "rejected", "evaluated"], "a prompt term unbounded by W is refuted too"
    assert rows[min(rows)].message.startswith("verification: bounded-wait: at waiting ")
    assert any("bounded-wait" in f for f in proposer.requests[1].failures), "fed back to the proposer"
    refuted = [
        v for v in store.verifications(info.run_id) if v.property == "bounded-wait" and v.verdict != "proved"
    ]
    assert len(refuted) == 2 and all(json.loads(v.counterexample)["inputs"] for v in refuted)
    ran = {job.source for job in sandbox.jobs if not job.builtin}
    assert doubled in ran and not {least_pending, late_first} & ran
