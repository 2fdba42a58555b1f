"""The batching target as the loop sees it: baselines are checked and proved candidates, bad traces and
configurations end in one line, the oracle bounds the others, and a search runs end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from targets.base import WorkloadError
from targets.batching.target import BatchingTarget, shipped_workload_path
from targets.batching.trace import load_azure
from verifiers.smt import prove
from verifiers.static import check

TARGET = BatchingTarget()
DOMAINS = {"priority": TARGET.registry("priority").domain()}
HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


@pytest.mark.parametrize("name", sorted(TARGET.baselines()))
def test_every_baseline_passes_the_static_check_and_its_hard_properties(name: str) -> None:
    program = check(TARGET.baselines()[name], TARGET.signatures)
    assert program.docstring, "a baseline says what it is"
    hard = [p for p in TARGET.properties() if p.severity == "hard"]
    assert {o.property: o.verdict for o in prove(program, DOMAINS, hard)} == {p.name: "proved" for p in hard}


@pytest.mark.parametrize(
    ("name", "verdict"), [("fcfs", "proved"), ("sarathi", "proved"), ("spf", "counterexample")]
)
def test_no_starvation_is_proved_where_priority_grows_with_waiting(name: str, verdict: str) -> None:
    [starvation] = [p for p in TARGET.properties() if p.name == "no-starvation"]
    assert starvation.severity == "soft"
    [outcome] = prove(check(TARGET.baselines()[name], TARGET.signatures), DOMAINS, [starvation])
    assert outcome.verdict == verdict


def test_a_candidate_cannot_read_the_oracle_feature() -> None:
    with pytest.raises(ValueError, match="remaining_output"):
        check("def priority(r, p):\n    return -r.remaining_output\n", TARGET.signatures)


def _trace(tmp_path: Path, body: str) -> str:
    path = tmp_path / "trace.csv"
    path.write_text(body)
    return str(path)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("when,in,out\n", "line 1: expected the header TIMESTAMP,ContextTokens,GeneratedTokens"),
        (HEAD, "the trace has no requests"),
        (HEAD + "2023-11-16 18:15:46.6805900,374\n", "line 2: expected 3 comma-separated fields, got 2"),
        (HEAD + "yesterday,374,44\n", "line 2: TIMESTAMP must look like"),
        (HEAD + "2023-11-16 18:15:46.6805900,374,0\n", "line 2: GeneratedTokens must be a whole number"),
        (HEAD + "2023-11-16 18:15:46.6805900,-5,4\n", "line 2: ContextTokens must be a whole number"),
    ],
)
def test_a_malformed_trace_is_one_line_naming_the_place(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(WorkloadError) as info:
        load_azure(_trace(tmp_path, body))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_trace_out_of_order_is_replayed_in_arrival_order(tmp_path: Path) -> None:
    rows = "2023-11-16 18:15:50.0,10,2\n2023-11-16 18:15:46.5,20,3\n"
    requests = load_azure(_trace(tmp_path, HEAD + rows))
    assert requests.arrival_s.tolist() == [0.0, 3.5] and requests.prompt_tokens.tolist() == [20, 10]


def test_bad_configurations_and_oversized_requests_are_workload_errors(tmp_path: Path) -> None:
    workload = str(shipped_workload_path())
    with pytest.raises(WorkloadError, match="capacity must be a positive whole number"):
        TARGET.instances(workload, {"capacity": 0})
    with pytest.raises(WorkloadError, match="more than the pool"):
        TARGET.instances(workload, {"capacity": 4})
    with pytest.raises(WorkloadError, match="no such trace file"):
        TARGET.instances(str(tmp_path / "missing.csv"), {})


def test_the_oracle_srpt_beats_fcfs_on_mean_ttft_and_load_hurts_fcfs() -> None:
    workload = str(shipped_workload_path())
    config = {"requests": [0, 400], "load": 0.6}
    [_, full] = TARGET.instances(workload, config)
    fcfs = TARGET.evaluate(check(TARGET.baselines()["fcfs"], TARGET.signatures), full, {})
    srpt = TARGET.evaluate_builtin("srpt", full)
    assert srpt["ttft_mean_ms"] < fcfs["ttft_mean_ms"]
    [_, light] = TARGET.instances(workload, {**config, "load": 0.1})
    calm = TARGET.evaluate(check(TARGET.baselines()["fcfs"], TARGET.signatures), light, {})
    assert calm["ttft_p99_ms"] < fcfs["ttft_p99_ms"] and calm["slo_attainment"] >= fcfs["slo_attainment"]


def test_the_token_budget_param_is_the_chunk_size() -> None:
    [_, full] = TARGET.instances(str(shipped_workload_path()), {"requests": [0, 100]})
    sarathi = check(TARGET.baselines()["sarathi"], TARGET.signatures)
    small = TARGET.evaluate(sarathi, full, {"token_budget": 64.0})
    large = TARGET.evaluate(sarathi, full, {"token_budget": 4096.0})
    assert small["iterations"] > large["iterations"]


def test_a_search_on_the_batching_target_runs_end_to_end(tmp_path: Path) -> None:
    head = shipped_workload_path().read_text().splitlines()[:121]
    workload = _trace(tmp_path, "\n".join(head) + "\n")
    command = [
        sys.executable, "-m", "search.cli", "search", "--target", "batching", "--workload", workload,
        "--budget", "4", "--trials", "1", "--seed", "1", "--sandbox", "process", "--json",
        "--db", f"sqlite:///{tmp_path / 'runs.db'}",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert summary["status"] == "finished"
    assert {"fcfs", "sarathi", "spf", "edf", "srpt"} <= {b["name"] for b in summary["baselines"]}
