"""Verification in the search loop: a candidate that fails a hard property never reaches the sandbox or a
leaderboard, its counterexample is stored and handed to the proposer, and `runs show` counts rejections
by property."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sandbox.job import InstanceResult, Job, Result
from search.cli.main import main
from search.loop.search import Search
from search.proposers.base import Proposal, ProposalRequest
from search.service import RunService
from search.settings import RunConfig
from search.store.store import Store, open_engine

FAULTY = {
    "divides": "def priority(b, p):\n    return b.hits / b.age\n",
    "logs": "def priority(b, p):\n    return log(b.hits) - b.age\n",
}
SAFE = {
    "recency": "def priority(b, p):\n    return b.last_access + b.depth\n",
    "frequency": "def priority(b, p):\n    return log1p(b.hits) - b.age / 60\n",
    "fewer-hits-first": "def priority(b, p):\n    return b.last_access - b.hits\n",  # breaks a soft one
}


@dataclass
class Scripted:
    """Proposes the given sources in order and keeps every request it was handed."""

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
            InstanceResult(i.label, i.role, {"block_hit_rate": score, "gap_closed": 0.0}, 0.0)
            for i in job.instances
        )
        return Result("ok", instances=instances, backend=self.name)


@pytest.fixture
def searched(tmp_path: Path) -> tuple[str, Store, Scripted, Spy]:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = Store(open_engine(url))
    order = [FAULTY["divides"], SAFE["recency"], FAULTY["logs"], SAFE["frequency"], SAFE["fewer-hits-first"]]
    config = RunConfig(
        target="kv", workload="gen:chat:1", options={"capacity": 300}, proposer="evolve", budget=5, workers=1
    )
    service = RunService(store)
    info = service.record(config)
    proposer, sandbox = Scripted(order), Spy()
    with ThreadPoolExecutor(max_workers=1) as pool:
        Search(service.journal(info.run_id), sandbox, proposer, executor=pool).execute()
    return url, store, proposer, sandbox


def test_a_candidate_that_fails_a_hard_property_never_runs_nor_ranks(
    searched: tuple[str, Store, Scripted, Spy], capsys: pytest.CaptureFixture[str]
) -> None:
    url, store, _, sandbox = searched
    ran = {job.source for job in sandbox.jobs}
    assert not ran & set(FAULTY.values())
    assert set(SAFE.values()) <= ran  # a soft counterexample is reported, not rejected
    rows = {row.source: row for row in store.candidates(store.runs()[0].id)}
    assert {rows[s].status for s in FAULTY.values()} == {"rejected"}
    assert rows[FAULTY["divides"]].message.startswith("verification: no-division-by-zero: 'b.hits / b.age'")
    main(["runs", "show", store.runs()[0].id, "--db", url, "--json"])
    shown = json.loads(capsys.readouterr().out)
    assert shown["best"]["score"] == max(len(s) for s in SAFE.values()) / 1000  # the leaderboard's top
    assert shown["counts"] == {"evaluated": 3, "rejected": 2}


def test_every_verdict_is_stored_with_its_time_and_counterexample(
    searched: tuple[str, Store, Scripted, Spy],
) -> None:
    _, store, _, _ = searched
    run_id = store.runs()[0].id
    rows = {row.id: row for row in store.candidates(run_id) if row.proposer == "scripted"}
    verdicts = store.verifications(run_id)
    assert {v.candidate_id for v in verdicts} == set(rows)
    assert all(v.seconds > 0 and v.created_at is not None for v in verdicts)
    divides = next(r.id for r in rows.values() if r.source == FAULTY["divides"])
    refuted = {v.property: v for v in verdicts if v.candidate_id == divides and v.verdict == "counterexample"}
    assert {"no-division-by-zero", "finite-bounded"} <= set(refuted)
    inputs = json.loads(refuted["no-division-by-zero"].counterexample)["inputs"]
    assert inputs["age"] == 0.0
    soft = [v for v in verdicts if v.property == "more-hits-never-lower" and v.verdict == "counterexample"]
    assert [rows[v.candidate_id].source for v in soft] == [SAFE["fewer-hits-first"]]  # type: ignore[index]


def test_the_counterexample_reaches_the_next_proposal(searched: tuple[str, Store, Scripted, Spy]) -> None:
    _, _, proposer, _ = searched
    after_first = proposer.requests[1].failures
    assert any("no-division-by-zero" in f and "age=0" in f for f in after_first)


def test_runs_show_counts_rejections_by_property(
    searched: tuple[str, Store, Scripted, Spy], capsys: pytest.CaptureFixture[str]
) -> None:
    url, store, _, _ = searched
    main(["runs", "show", store.runs()[0].id, "--db", url, "--json"])
    shown = json.loads(capsys.readouterr().out)
    assert shown["verification"]["rejected_by_property"] == {
        "no-division-by-zero": 1,
        "no-log-of-non-positive": 1,
    }
    assert shown["verification"]["verdicts"]["more-hits-never-lower"] == {"counterexample": 1, "proved": 4}
    main(["runs", "show", store.runs()[0].id, "--db", url])
    assert "rejected by property" in capsys.readouterr().out


def test_verify_prints_each_property_with_its_verdict_time_and_counterexample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(SAFE["frequency"])
    bad.write_text(FAULTY["divides"])
    main(["verify", str(good), "--target", "kv", "--json"])
    rows = json.loads(capsys.readouterr().out)["properties"]
    assert {r["property"]: r["verdict"] for r in rows} == dict.fromkeys(
        (
            "no-division-by-zero",
            "no-log-of-non-positive",
            "no-sqrt-of-negative",
            "no-overflow",
            "finite-bounded",
            "more-hits-never-lower",
        ),
        "proved",
    )
    assert all(r["seconds"] > 0 and r["statement"] and r["kind"] for r in rows)
    with pytest.raises(SystemExit) as failed:
        main(["verify", str(bad), "--json"])
    assert failed.value.code == 1
    refuted = {r["property"]: r for r in json.loads(capsys.readouterr().out)["properties"]}
    assert refuted["no-division-by-zero"]["counterexample"]["inputs"]["age"] == 0.0
    with pytest.raises(SystemExit):
        main(["verify", str(bad)])
    table = capsys.readouterr().out
    assert "counterexample" in table and "'b.hits / b.age' divides by zero" in table


def test_verify_rejects_a_file_outside_the_subset_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import os\ndef priority(b, p):\n    return 1\n")
    for path in (str(broken), str(tmp_path / "missing.py")):
        with pytest.raises(SystemExit) as failed:
            main(["verify", path])
        err = capsys.readouterr().err.strip().splitlines()
        assert failed.value.code == 2 and len(err) == 1 and err[0].startswith("crucible: error:")
