"""The LLM proposer end to end: the real `openai` client over real HTTP to a scripted server on 127.0.0.1.

What these tests show: how the proposer and the loop handle every kind of reply and failure an
OpenAI-compatible endpoint can give, what is stored, what the server received, and that the money adds up.
What they do not show: that any real model writes good heuristics, or that a particular vendor's server
(OpenAI, vLLM, llama.cpp, Ollama) answers exactly as this one does beyond the chat-completions shape.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import re
import socket
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from interrupt import interrupted
from scripted_llm import Received, Reply, ScriptedLLM, error, parent_source, program

from search.cli.main import main
from search.proposers.base import Entry, Proposal, ProposalFailed, ProposalRequest
from search.proposers.llm.config import LLMConfig, ModelChoice, Price, Usage
from search.proposers.llm.prompting import estimated_tokens
from search.proposers.mix.proposer import MixProposer
from targets.kv.features import BLOCK_FEATURES

WORKLOAD = ["--workload", "gen:chat:1", "--capacity", "300", "--trials", "1", "--workers", "1"]
PRICES = {"alpha": Price(1.0, 2.0), "beta": Price(3.0, 4.0)}
"""USD per million prompt and completion tokens."""


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str

    @property
    def last_line(self) -> str:
        lines = self.err.strip().splitlines()
        return lines[-1] if lines else ""


def crucible(*args: str) -> Outcome:
    """The command line in this process (so it reaches the server thread), its output captured."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = int(exc.code or 0)
    return Outcome(code, out.getvalue(), err.getvalue())


def llm_search(llm: ScriptedLLM, db: Path, *extra: str) -> Outcome:
    args = ["search", *WORKLOAD, "--proposer", "llm", "--base-url", llm.url, "--seed", "2"]
    return crucible(
        *args, "--llm-timeout", "1", "--llm-retries", "1", "--db", f"sqlite:///{db}", "--json", *extra
    )


def rows(db: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


def candidates(db: Path) -> list[tuple[Any, ...]]:
    """(seq, status, model, tokens, cost, note, message, source) of every proposed candidate."""
    query = "select seq, status, model, tokens, cost_usd, note, message, source from candidate"
    return rows(db, f"{query} where proposer != 'baseline' order by seq")


def failed_proposals(db: Path) -> list[tuple[Any, ...]]:
    """(message, model, tokens, cost) of every failed proposal."""
    return rows(
        db, "select message, model, tokens, cost_usd from event where kind = 'proposal-failed' order by id"
    )


def counter_programs(start: int = 100) -> Any:
    """A fallback that answers every request with a new valid program."""
    numbers = itertools.count(start)
    return lambda body: Reply(program(next(numbers)))


def diff_against_parent(body: dict[str, Any]) -> Reply:
    """A SEARCH/REPLACE block built from the parent the prompt shows, so it applies."""
    last = [line for line in parent_source(body).splitlines() if line.strip().startswith("return")][-1]
    return Reply(
        f"A branch-point bonus:\n<<<<<<< SEARCH\n{last}\n=======\n{last} + 0.5 * b.fanout\n>>>>>>> REPLACE\n"
    )


NOT_IN_PARENT = "<<<<<<< SEARCH\n    return b.nothing_like_this\n=======\n    return 0\n>>>>>>> REPLACE\n"
OUTSIDE_SUBSET = "import os\n\n\ndef priority(b, p):\n    return os.getpid()\n"
FAILS_Z3 = '"""Age per hit."""\n\n\ndef priority(b, p):\n    return b.age / b.hits\n'
"""Inside the subset, but Z3 finds a division by zero (hits = 0 is in the domain)."""

SCRIPT = [
    Reply(program(1)),  # 0: bare code
    Reply(f"Keep hot blocks longer:\n\n```python\n{program(2)}```\n\nThis should beat LRU."),  # 1: fenced
    diff_against_parent,  # 2: a diff that applies
    Reply(NOT_IN_PARENT),  # 3: a diff that does not apply ...
    Reply(NOT_IN_PARENT),  # 4: ... nor after a repair turn ...
    Reply(NOT_IN_PARENT),  # 5: ... nor after the second: a failed proposal
    Reply("I would evict the blocks that were used least."),  # 6: prose ...
    Reply(f"```python\n{program(5)}```"),  # 7: ... repaired
    Reply(OUTSIDE_SUBSET),  # 8: outside the subset ...
    Reply(OUTSIDE_SUBSET),  # 9: ... after a repair turn quoting the checker ...
    Reply(OUTSIDE_SUBSET),  # 10: ... and after the second: rejected and stored
    Reply(FAILS_Z3),  # 11
    error(429, "Rate limit reached"),  # 12: retried by the client ...
    Reply(program(8)),  # 13: ... and answered
    error(500, "upstream crashed"),  # 14
    error(500, "upstream crashed"),  # 15: out of retries: a failed proposal
    Reply(hang_s=2.0),  # 16: past the 1 s timeout, retried ...
    Reply(program(10)),  # 17: ... and answered
    Reply(hang_s=2.0),  # 18
    Reply(hang_s=2.0),  # 19: out of retries: a failed proposal
    Reply(body=b'{"id": "chatcmpl-1", "choices": [{"message": '),  # 20: malformed JSON, no stream event ...
    Reply("ok"),  # 21: ... so the request is sent once more unstreamed, and accepted: a bad response
    Reply(f"```python\nimport os\n\nPID = os.getpid()\n{program(11)}```"),  # 22: outside the subset ...
    Reply(f"```python\n{program(11)}```"),  # 23: ... repaired from the checker's message
]
BUDGET = 10  # 9 scripted candidates and one from the fallback


@dataclass(frozen=True)
class ScriptedRun:
    db: Path
    outcome: Outcome
    received: list[Received]
    delivered: list[tuple[str, int, int]]


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScriptedRun]:
    db = tmp_path_factory.mktemp("llm") / "runs.db"
    prices = ["--price", "alpha=1,2", "--price", "beta=3,4"]
    with ScriptedLLM(SCRIPT, counter_programs()) as llm:
        done = llm_search(
            llm, db, "--budget", str(BUDGET), "--model", "alpha", "--model", "beta:0.5", *prices
        )
    yield ScriptedRun(db, done, llm.received, llm.delivered)


def test_a_full_search_completes_through_every_kind_of_reply(scripted: ScriptedRun) -> None:
    assert scripted.outcome.code == 0, scripted.outcome.err
    summary = json.loads(scripted.outcome.out)
    assert summary["status"] == "finished"
    assert sum(summary["counts"].values()) == BUDGET
    assert summary["counts"]["rejected"] == 2
    assert summary["best"] is not None


def test_each_reply_becomes_the_candidate_it_means(scripted: ScriptedRun) -> None:
    rows = candidates(scripted.db)
    notes = [note for _, _, _, _, _, note, _, _ in rows]
    assert notes[0].startswith("rewrite: Recency plus a tuned hit bonus (1)")
    assert notes[1].startswith("rewrite: Recency plus a tuned hit bonus (2)")
    assert notes[2].startswith("diff of 1 block")
    assert rows[2][7].rstrip().endswith("+ 0.5 * b.fanout")
    assert notes[3].startswith("rewrite, repaired after no-code: Recency plus a tuned hit bonus (5)")
    assert notes[8].startswith("rewrite, repaired after static-check: Recency plus a tuned hit bonus (11)")


def test_every_failure_is_classified_and_stored(scripted: ScriptedRun) -> None:
    rejected = {
        source: message
        for _, status, _, _, _, _, message, source in candidates(scripted.db)
        if status == "rejected"
    }
    assert set(rejected) == {OUTSIDE_SUBSET, FAILS_Z3}
    assert rejected[OUTSIDE_SUBSET].startswith("static check: line 1: [no-imports]")
    assert rejected[FAILS_Z3].startswith(
        "verification: no-division-by-zero: 'b.age / b.hits' divides by zero at"
    )
    failures = [message for message, _, _, _ in failed_proposals(scripted.db)]
    assert [m.split(":")[0] for m in failures] == ["diff-mismatch", "server-error", "timeout", "bad-response"]
    assert "(after 2 repair turns for diff-mismatch, diff-mismatch)" in failures[0]
    assert "answered 500 after 1 retry: upstream crashed" in failures[1]
    assert "within 1 s, 1 retry" in failures[2]
    assert "not a chat completion" in failures[3]


def test_retries_happen_as_the_client_is_configured(scripted: ScriptedRun) -> None:
    retries = [r.retry_count for r in scripted.received[: len(SCRIPT)]]
    #           0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15 16 17 18 19 20 21 22 23  (the script's steps)
    assert retries == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 0, 0, 0]
    probe = scripted.received[21].body
    assert probe.get("stream") is not True and probe["max_tokens"] == 1
    repair = scripted.received[5].body["messages"]
    assert [m["role"] for m in repair] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert repair[2]["content"] == NOT_IN_PARENT and "could not be used" in repair[3]["content"]


def test_a_reply_outside_the_subset_is_repaired_from_the_checkers_message(scripted: ScriptedRun) -> None:
    repair = scripted.received[9].body["messages"]
    assert repair[-2]["content"] == OUTSIDE_SUBSET
    assert "line 1: [no-imports]" in repair[-1]["content"]


def test_runs_show_lists_every_proposal_with_its_outcome_seconds_tokens_and_replies(
    scripted: ScriptedRun,
) -> None:
    run_id = json.loads(scripted.outcome.out)["run_id"]
    shown = crucible("runs", "show", run_id, "--db", f"sqlite:///{scripted.db}", "--json")
    proposals = json.loads(shown.out)["proposals"]
    made = [p for p in proposals if p["seq"] is not None]
    assert len(made) == BUDGET and len(proposals) == BUDGET + len(failed_proposals(scripted.db))
    assert all(p["seconds"] > 0 and p["proposer"] == "llm" for p in proposals)
    assert sum(p["prompt_tokens"] + p["completion_tokens"] for p in proposals) == sum(
        prompt + completion for _, prompt, completion in scripted.delivered
    )
    fates = [(p["outcome"], p["replies"]) for p in proposals]
    assert fates[:6] == [
        ("evaluated", ["ok"]),
        ("evaluated", ["ok"]),
        ("evaluated", ["ok"]),
        ("failed", ["diff-mismatch"] * 3),
        ("evaluated", ["no-code", "ok"]),
        ("rejected", ["static-check"] * 3),
    ]
    assert ("failed", ["server-error"]) in fates and ("failed", ["timeout"]) in fates
    assert ("failed", ["bad-response"]) in fates


def test_tokens_and_cost_add_up_to_what_the_server_reported(scripted: ScriptedRun) -> None:
    reported = sum(p + c for _, p, c in scripted.delivered)
    cost = sum(PRICES[m].cost(Usage(p, c)) for m, p, c in scripted.delivered)
    stored = candidates(scripted.db)
    failed = failed_proposals(scripted.db)
    assert sum(r[3] for r in stored) + sum(f[2] for f in failed) == reported
    assert sum(r[4] for r in stored) + sum(f[3] for f in failed) == pytest.approx(cost)
    summary = json.loads(scripted.outcome.out)
    assert (summary["tokens"], summary["cost_usd"]) == (reported, pytest.approx(cost))
    assert failed[0][2] == 360, "the failed diff paid for its call and its two repair turns"
    assert stored[3][3] == 240, "so did the repaired candidate"
    seen_models = {m for m, _, _ in scripted.delivered}
    assert seen_models == {"alpha", "beta"}, "both models were drawn"


def test_runs_show_gives_success_statistics_per_model(scripted: ScriptedRun) -> None:
    (run_id,) = rows(scripted.db, "select id from run")[0]
    shown = crucible("runs", "show", run_id, "--db", f"sqlite:///{scripted.db}", "--json")
    stats = {s["model"]: s for s in json.loads(shown.out)["proposers"]}
    assert set(stats) == {"alpha", "beta"} and {s["proposer"] for s in stats.values()} == {"llm"}
    assert sum(s["proposals"] for s in stats.values()) == BUDGET + 4
    assert sum(s["failed"] for s in stats.values()) == 4
    assert sum(s["rejected"] for s in stats.values()) == 2
    assert sum(s["ran"] for s in stats.values()) == BUDGET - 2
    assert sum(s["tokens"] for s in stats.values()) == sum(p + c for _, p, c in scripted.delivered)
    text = crucible("runs", "show", run_id, "--db", f"sqlite:///{scripted.db}")
    assert "by proposer and model" in text.out


def test_the_kv_prompt_holds_every_feature_and_the_previous_failure(scripted: ScriptedRun) -> None:
    first = scripted.received[0].prompt
    for feature in BLOCK_FEATURES.features:
        unit = f"{feature.unit}, clock" if feature.clock else feature.unit
        assert f"b.{feature.name} ({unit}, in [{feature.low:g}, {feature.high:g}]): {feature.doc}" in first
    refuted = next(r for r in candidates(scripted.db) if r[7] == FAILS_Z3)
    after = scripted.received[12].prompt  # the request that followed the reply Z3 refuted
    assert f"candidate {refuted[0]}: {refuted[6]}" in after
    assert "divides by zero at age=0, hits=0" in after, "the counterexample itself"


def test_the_cost_and_token_caps_stop_the_run_and_a_resume_raises_them(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    every_call = ["--model", "alpha", "--price", "alpha=10,0", "--budget", "6"]  # 100 prompt tokens: $0.001
    with ScriptedLLM([], counter_programs()) as llm:
        capped = llm_search(llm, db, *every_call, "--max-tokens", "250")
        assert capped.code == 0, capped.err
        assert json.loads(capped.out)["status"] == "stopped"
        ((run_id, message),) = rows(db, "select id, message from run")
        assert message == "token cap reached: 360 tokens used of 250"
        assert len(candidates(db)) == 3 and len(llm.received) == 3
        stopped = "stopped: token cap reached: 360 tokens used of 250; resume with: crucible search --resume"
        assert f"{stopped} {run_id}" in capped.err

        again = crucible(
            "search",
            "--resume",
            run_id,
            "--db",
            f"sqlite:///{db}",
            "--max-tokens",
            "10000",
            "--max-cost-usd",
            "0.0045",
            "--json",
        )
        assert again.code == 0, again.err
        assert rows(db, "select message from run") == [("cost cap reached: $0.0050 spent of $0.0045",)]
        assert len(candidates(db)) == 5

        finished = crucible(
            "search", "--resume", run_id, "--db", f"sqlite:///{db}", "--max-cost-usd", "1", "--json"
        )
        assert finished.code == 0, finished.err
        summary = json.loads(finished.out)
    assert summary["status"] == "finished" and sum(summary["counts"].values()) == 6
    assert summary["cost_usd"] == pytest.approx(0.006) and summary["tokens"] == 6 * 120
    assert len(llm.received) == 6, "no call was made past a cap"
    config = json.loads(rows(db, "select config from run")[0][0])
    assert (config["max_cost_usd"], config["max_tokens"]) == (1, 10000)
    assert len(rows(db, "select * from event where kind = 'config'")) == 2


def test_resume_after_the_endpoint_goes_away_mid_run_loses_nothing(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    answered = itertools.count()

    def three_then_gone(body: dict[str, Any]) -> Reply:
        n = next(answered)
        if n < 3:
            return Reply(program(n))
        if n == 3:  # a reply that needs a repair turn, which never gets an answer
            threading.Thread(target=llm.stop, daemon=True).start()
            return Reply("Evict the blocks nobody came back for.")
        return Reply(hang_s=0.2)

    with ScriptedLLM([], three_then_gone) as llm:
        port = llm.port
        lost = llm_search(llm, db, "--model", "alpha", "--budget", "6", "--price", "alpha=1,2")
    assert lost.code == 1
    assert lost.last_line.startswith(
        f"crucible: error: cannot reach the LLM endpoint http://127.0.0.1:{port}/v1: "
    )
    assert "the run is stopped, resume with: crucible search --resume" in lost.last_line
    ((run_id, status),) = rows(db, "select id, status from run")
    assert status == "stopped"
    before = candidates(db)
    assert len(before) == 3 and {r[1] for r in before} <= {"evaluated", "gated"}
    reported = sum(p + c for _, p, c in llm.delivered)
    stored = sum(r[3] for r in before) + rows(db, "select sum(tokens) from event")[0][0]
    assert stored == reported == 4 * 120, "the reply cut off before its repair turn is paid for too"

    with ScriptedLLM([], counter_programs(), port=port):
        resumed = crucible("search", "--resume", run_id, "--db", f"sqlite:///{db}", "--json")
    assert resumed.code == 0, resumed.err
    assert json.loads(resumed.out)["status"] == "finished"
    after = candidates(db)
    assert after[:3] == before, "what was stored before the loss is untouched"
    assert len(after) == 6 and len({r[7] for r in after}) == 6
    assert rows(db, "select count(*) from candidate where status = 'pending'") == [(0,)]


def test_calls_in_flight_never_exceed_the_configured_concurrency(tmp_path: Path) -> None:
    numbers = itertools.count()
    with ScriptedLLM([], lambda body: Reply(program(next(numbers)), delay_s=0.3)) as llm:
        done = llm_search(
            llm,
            tmp_path / "runs.db",
            "--model",
            "alpha",
            "--budget",
            "6",
            "--workers",
            "3",
            "--llm-concurrency",
            "2",
        )
    assert done.code == 0, done.err
    assert sum(json.loads(done.out)["counts"].values()) == 6
    assert llm.max_in_flight == 2


def test_mix_shares_proposals_between_llm_and_offline_and_shows_both(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with ScriptedLLM([], counter_programs()) as llm:
        done = llm_search(
            llm, db, "--proposer", "mix", "--llm-share", "0.5", "--model", "alpha", "--budget", "8"
        )
    assert done.code == 0, done.err
    writers = [
        proposer for (proposer,) in rows(db, "select proposer from candidate where proposer != 'baseline'")
    ]
    assert set(writers) == {"llm", "evolve"}
    assert writers.count("llm") == len(llm.received)
    (run_id,) = rows(db, "select id from run")[0]
    shown = json.loads(crucible("runs", "show", run_id, "--db", f"sqlite:///{db}", "--json").out)
    stats = {s["proposer"]: s for s in shown["proposers"]}
    assert set(stats) == {"llm", "evolve"}
    assert stats["llm"]["tokens"] == 120 * len(llm.received) and stats["evolve"]["tokens"] == 0


def test_a_rejected_key_ends_in_one_line_before_anything_is_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    db = tmp_path / "runs.db"
    with ScriptedLLM([], counter_programs(), key="sk-right") as llm:
        done = llm_search(llm, db, "--model", "alpha")
    assert done.code == 1
    assert done.last_line == (
        f"crucible: error: {llm.url} rejected the API key (401: Incorrect API key provided); "
        "set OPENAI_API_KEY to a valid key"
    )
    assert not db.exists() and llm.received == [], "nothing stored, not even an empty database"


def test_an_unreachable_endpoint_ends_in_one_line_before_anything_is_stored(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    db = tmp_path / "runs.db"
    args = ["--model", "alpha", "--base-url", f"http://127.0.0.1:{port}/v1", "--llm-retries", "0"]
    done = crucible("search", *WORKLOAD, "--proposer", "llm", *args, "--db", f"sqlite:///{db}")
    assert done.code == 1
    assert done.last_line.startswith(
        f"crucible: error: cannot reach the LLM endpoint http://127.0.0.1:{port}/v1: "
    )
    assert "Connection refused" in done.last_line
    assert not db.exists(), "nothing stored, not even an empty database"


def test_openai_itself_needs_a_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    done = crucible(
        "search",
        *WORKLOAD,
        "--proposer",
        "llm",
        "--model",
        "gpt-4.1-mini",
        "--db",
        f"sqlite:///{tmp_path}/r.db",
    )
    assert done.code == 2
    assert done.last_line == "crucible: error: set OPENAI_API_KEY to the API key of https://api.openai.com/v1"


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--proposer", "llm"], "the llm proposer needs at least one --model"),
        (["--model", "alpha:0"], "--model 'alpha:0': write NAME or NAME:WEIGHT with a positive weight"),
        (["--model", "alpha", "--price", "alpha=1"], "--price 'alpha=1': write MODEL=PROMPT,COMPLETION"),
        (
            ["--model", "alpha", "--max-cost-usd", "1"],
            "--max-cost-usd needs a --price for every model; none for alpha",
        ),
        (["--model", "alpha", "--max-tokens", "0"], "--max-tokens must be positive"),
        (["--model", "alpha", "--llm-share", "2"], "--llm-share must lie in [0, 1]"),
        (["--model", "alpha", "--llm-max-tokens", "0"], "--llm-max-tokens"),
        (["--model", "alpha", "--llm-repairs", "-1"], "--llm-repairs"),
        (
            ["--model", "alpha", "--llm-context", "1000", "--llm-max-tokens", "1000"],
            "--llm-context 1000 leaves no room for a prompt beside a reply of 1000 tokens",
        ),
        (
            ["--model", "alpha", "--prompts", "/no/such/folder"],
            "prompt folder /no/such/folder does not exist",
        ),
        (["--proposer", "evolve", "--model", "alpha"], "--model applies to --proposer llm or mix"),
    ],
)
def test_bad_llm_flags_end_in_one_line(tmp_path: Path, flags: list[str], words: str) -> None:
    args = ["search", *WORKLOAD, "--proposer", "llm", "--base-url", "http://127.0.0.1:9/v1", *flags]
    done = crucible(*args, "--db", f"sqlite:///{tmp_path}/r.db")
    assert done.code == 2
    assert done.last_line.startswith("crucible: error: ") and words in done.last_line


@pytest.mark.parametrize(
    ("spec", "name", "weight"),
    [
        ("alpha", "alpha", 1.0),
        ("beta:0.5", "beta", 0.5),
        ("qwen2.5-coder:7b", "qwen2.5-coder:7b", 1.0),
        ("phi3:14:2", "phi3:14", 2.0),
    ],
)
def test_a_model_spec_keeps_ollama_tags_in_the_name(spec: str, name: str, weight: float) -> None:
    assert ModelChoice.parse(spec) == ModelChoice(name, weight)


def test_the_llm_config_survives_the_store_as_json() -> None:
    config = LLMConfig(
        models=(ModelChoice("alpha"), ModelChoice("beta", 0.5)),
        base_url="http://localhost:11434/v1",
        prices={"alpha": Price(0.4, 1.6)},
        temperature=0.7,
    )
    assert LLMConfig.from_json(json.loads(json.dumps(config.to_json()))) == config
    assert "key" not in json.dumps(config.to_json()).replace("api_key_env", "")


@dataclass(frozen=True)
class Named:
    name: str
    concurrency: int = 1

    def propose(self, request: ProposalRequest) -> Proposal:
        if request.seed < 0:
            raise ProposalFailed("no luck")
        return Proposal(source="", proposer=self.name)


def mix_request(seed: int) -> ProposalRequest:
    return ProposalRequest(None, Entry(0, "", 0.0), (), (), seed)  # type: ignore[arg-type]


def test_mix_draws_its_writer_from_the_seed_by_the_share() -> None:
    mix = MixProposer(Named("llm", concurrency=4), Named("evolve"), share=0.25)
    writers = [mix.propose(mix_request(seed)).proposer for seed in range(2000)]
    assert writers == [mix.propose(mix_request(seed)).proposer for seed in range(2000)], "the same on resume"
    assert writers.count("llm") / len(writers) == pytest.approx(0.25, abs=0.03)
    assert mix.concurrency == 4
    assert {
        MixProposer(Named("llm"), Named("evolve"), 0.0).propose(mix_request(s)).proposer for s in range(50)
    } == {"evolve"}


def test_a_failure_inside_mix_is_counted_against_its_writer() -> None:
    mix = MixProposer(Named("llm"), Named("evolve"), share=0.0)
    with pytest.raises(ProposalFailed) as info:
        mix.propose(mix_request(-1))
    assert info.value.proposer == "evolve"


def test_a_request_over_the_context_fails_its_proposal_not_the_run(tmp_path: Path) -> None:
    too_long = error(
        400, "This model's maximum context length is 2048 tokens. However, you requested 2125 tokens"
    )
    numbers = itertools.count()
    script = [too_long, Reply(program(1))]
    with ScriptedLLM(script, lambda body: Reply(program(100 + next(numbers)))) as llm:
        done = llm_search(
            llm, tmp_path / "runs.db", "--model", "alpha", "--budget", "3", "--llm-max-tokens", "512"
        )
    assert done.code == 0, done.err
    assert json.loads(done.out)["status"] == "finished"
    failures = [message for message, _, _, _ in failed_proposals(tmp_path / "runs.db")]
    assert len(failures) == 1 and failures[0].startswith("too-long: alpha refused the request: This model's")
    assert llm.received[0].body["max_tokens"] == 512


def test_a_stream_left_empty_for_a_request_over_the_context_is_told_apart_by_asking_once_unstreamed(
    tmp_path: Path,
) -> None:
    """llama.cpp's Python server answers a streamed request over its context with 200 and no event; asked
    again unstreamed for one token, it says why."""
    too_long = error(400, "This model's maximum context length is 4096 tokens. However, you requested 12014")
    numbers = itertools.count()
    script = [Reply(body=b""), too_long, Reply(program(1))]
    with ScriptedLLM(script, lambda body: Reply(program(100 + next(numbers)))) as llm:
        done = llm_search(llm, tmp_path / "runs.db", "--model", "alpha", "--budget", "2")
    assert done.code == 0, done.err
    failures = [message for message, _, _, _ in failed_proposals(tmp_path / "runs.db")]
    assert len(failures) == 1 and failures[0].startswith("too-long: alpha refused the request: This model's")


@pytest.mark.parametrize("concurrency", ["1", "4"])
def test_ctrl_c_during_hanging_proposals_ends_the_run_at_once(tmp_path: Path, concurrency: str) -> None:
    """Interrupted while every call hangs (a busy local server), the run stops within 5 s, exit 130, with
    the command that resumes it; nothing waits for the calls' timeouts."""
    with ScriptedLLM([], lambda body: Reply(hang_s=120.0)) as llm:
        db = tmp_path / "runs.db"
        words = [
            str(Path(sys.executable).with_name("crucible")), "search", "--target", "batching-offline",
            "--workload", "gen:300:0", "--trials", "1", "--workers", concurrency, "--proposer", "llm",
            "--base-url", llm.url, "--model", "alpha", "--llm-timeout", "100",
            "--llm-concurrency", concurrency, "--db", f"sqlite:///{db}", "--budget", "4",
        ]  # fmt: skip
        wanted = int(concurrency)
        stop = interrupted(words, lambda: len(llm.received) >= wanted)
        assert len(llm.received) >= wanted, "the calls are in flight"
    assert stop.code == 130, stop.err
    assert stop.took_s < 5.0, f"took {stop.took_s:.1f} s to stop"
    assert "resume with: crucible search --resume" in stop.err.strip().splitlines()[-1]
    assert "Traceback" not in stop.err


def test_the_time_budget_holds_while_a_proposal_hangs(tmp_path: Path) -> None:
    """A call that would hang for 100 s is abandoned when the time budget ends: the run stops on time
    and records nothing of it."""
    with ScriptedLLM([], lambda body: Reply(hang_s=120.0)) as llm:
        started = time.monotonic()
        done = crucible(
            "search", "--target", "batching-offline", "--workload", "gen:300:0", "--trials", "1",
            "--proposer", "llm", "--base-url", llm.url, "--model", "alpha", "--llm-timeout", "100",
            "--time-budget", "6", "--budget", "4", "--db", f"sqlite:///{tmp_path / 'runs.db'}", "--json",
        )  # fmt: skip
        took = time.monotonic() - started
    assert done.code == 0, done.err
    assert json.loads(done.out)["status"] == "stopped"
    assert took < 6 + 15, f"took {took:.0f} s"
    assert llm.received, "a call was out when the budget ended"
    assert failed_proposals(tmp_path / "runs.db") == []


def test_a_duplicate_reply_still_counts_its_tokens(tmp_path: Path) -> None:
    with ScriptedLLM([], lambda body: Reply(program(0))) as llm:
        done = llm_search(llm, tmp_path / "runs.db", "--model", "alpha", "--budget", "2")
    assert done.code == 0, done.err
    assert len(llm.delivered) > 1, "the same program came back, and was asked for again"
    assert json.loads(done.out)["tokens"] == sum(p + c for _, p, c in llm.delivered)


def test_a_server_that_reports_no_usage_has_its_tokens_estimated_and_marked_so(tmp_path: Path) -> None:
    numbers = itertools.count()
    with ScriptedLLM([], lambda body: Reply(program(next(numbers)), usage=False)) as llm:
        done = llm_search(llm, tmp_path / "runs.db", "--model", "alpha", "--budget", "1")
    assert done.code == 0, done.err
    [(stored,)] = rows(tmp_path / "runs.db", "select proposal from candidate where proposer = 'llm'")
    figures = json.loads(stored)
    asked = llm.received[0].body["messages"]
    assert figures["estimated"] is True
    assert figures["prompt_tokens"] == estimated_tokens(asked) > sum(len(m["content"]) for m in asked) / 4
    assert figures["completion_tokens"] == -(-len(program(0)) // 16), "a token a streamed chunk"


def test_a_model_the_endpoint_does_not_list_ends_in_one_line_before_anything_is_stored(
    tmp_path: Path,
) -> None:
    with ScriptedLLM([], lambda body: Reply(program(0)), models=("qwen2.5-coder-0.5b",)) as llm:
        done = llm_search(llm, tmp_path / "runs.db", "--model", "qwen2.5-coder-05b", "--budget", "2")
        listed = llm_search(llm, tmp_path / "other.db", "--model", "qwen2.5-coder-0.5b", "--budget", "1")
    assert done.code == 1, done.err
    assert "serves no model 'qwen2.5-coder-05b' (it serves qwen2.5-coder-0.5b)" in done.last_line
    assert not (tmp_path / "runs.db").exists() or rows(tmp_path / "runs.db", "select count(*) from run") == [
        (0,)
    ]
    assert listed.code == 0, listed.err


def test_a_slow_model_that_keeps_writing_is_not_timed_out(tmp_path: Path) -> None:
    """Streamed, the 1 s timeout bounds silence: a reply that takes several seconds a chunk at a time
    arrives whole, where a timeout on the whole reply would have dropped it."""
    numbers = itertools.count()
    with ScriptedLLM([], lambda body: Reply(program(next(numbers)), gap_s=0.15)) as llm:
        done = llm_search(llm, tmp_path / "runs.db", "--model", "alpha", "--budget", "1")
    assert done.code == 0, done.err
    assert failed_proposals(tmp_path / "runs.db") == []
    assert len(candidates(tmp_path / "runs.db")) == 1
    assert llm.received[0].body["stream"] is True


def test_a_copy_of_an_existing_program_gets_a_repair_turn_asking_for_another(tmp_path: Path) -> None:
    script = [Reply(program(0)), Reply(program(0)), Reply(program(1))]
    with ScriptedLLM(script, lambda body: Reply(program(2))) as llm:
        done = llm_search(llm, tmp_path / "runs.db", "--model", "alpha", "--budget", "2", "--workers", "1")
    assert done.code == 0, done.err
    repair = llm.received[2]
    assert "the same program as one the search already has" in repair.prompt
    suggested = re.search(r"for example by also reading (.*), which the parent does not read", repair.prompt)
    assert suggested, "a copy's repair turn names features to start from"
    parent = parent_source(repair.body)
    for feature in suggested.group(1).split(", "):
        assert feature.startswith("b.") and feature.removeprefix("b.") in BLOCK_FEATURES.names
        assert feature not in parent
    assert [m["role"] for m in repair.body["messages"]][-2:] == ["assistant", "user"]
    notes = [n for (n,) in rows(tmp_path / "runs.db", "select note from candidate where proposer = 'llm'")]
    assert any("repaired after duplicate" in n for n in notes), notes
