"""The LLM proposer against a real model: Qwen2.5-Coder-0.5B-Instruct served by llama.cpp on this CPU.

What these tests show: that the loop gets through what a real small model writes (prose, fences, programs
outside the subset, copies of the parent), alone and mixed with the offline proposer, records every
proposal with its outcome, seconds, tokens and replies, fits every target's prompt into the model's real
context, and stops at once when interrupted mid-call. What they do not show: that the model writes better
heuristics than the offline proposer, or what share of its proposals pass the checker (on 2 or 3
proposals that share swings from none to all: a measurement, not a test, in bench/llm_local.py on the
LLM guide's page), nor how a larger model behaves. Each call carries the proposal's seed, so the replies
follow from the prompt: the kv search at seed 1 had the same four outcomes in CI and here, none evaluated,
and a check that one passes would hold or fail by the prompt's wording, not by the loop's code.
Skipped when `bash .ci/llm-local` has not built the model's environment; required where
CRUCIBLE_REQUIRE_LLM_LOCAL=1 (CI).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from interrupt import interrupted

import targets
from search.errors import UserError
from search.loop.search import brief
from search.proposers.base import Entry, ProposalRequest
from search.proposers.llm.local_model import CONTEXT_TOKENS, LocalServer
from search.proposers.llm.prompting import Templates, estimated_tokens

pytestmark = pytest.mark.llm_local

MODEL = "qwen2.5-coder-0.5b"
ROBUSTNESS_MODEL = "gemma3-270m"
CRUCIBLE = str(Path(sys.executable).with_name("crucible"))


def serve(name: str) -> Iterator[LocalServer]:
    try:
        local = LocalServer(name)
    except UserError as exc:
        if os.environ.get("CRUCIBLE_REQUIRE_LLM_LOCAL") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    with local:
        yield local


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    yield from serve(MODEL)


@pytest.fixture(scope="module")
def robust() -> Iterator[LocalServer]:
    """Gemma 3 270M: a base model with no chat template, that echoes its prompt."""
    yield from serve(ROBUSTNESS_MODEL)


WORKLOADS = {
    "kv": ["--workload", "gen:chat:1", "--capacity", "300"],
    "batching": ["--set", "requests=0:200"],
}


def search(
    server: LocalServer,
    db: Path,
    target: str,
    proposer: str,
    *extra: str,
    ends: tuple[str, ...] = ("finished",),
    fitted: bool = True,
) -> dict[str, Any]:
    """`crucible search` against the local server (a process, as a user runs it), then `runs show --json`;
    `fitted`: each turn fitted into the server's context (--llm-context)."""
    words = [
        CRUCIBLE, "search", "--target", target, *WORKLOADS[target], "--trials", "1", "--proposer", proposer,
        "--base-url", server.url, "--model", server.name, "--llm-concurrency", "1", "--llm-max-tokens", "800",
        "--seed", "1", "--db", f"sqlite:///{db}", "--json", *extra,
    ]  # fmt: skip
    words += ["--llm-context", str(server.context)] if fitted else []
    env = {**os.environ, "OPENAI_API_KEY": "local"}
    done = subprocess.run(words, capture_output=True, text=True, timeout=900, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    summary = json.loads(done.stdout)
    assert summary["status"] in ends, summary["message"]
    shown = subprocess.run(
        [CRUCIBLE, "runs", "show", summary["run_id"], "--db", f"sqlite:///{db}", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    report: dict[str, Any] = json.loads(shown.stdout)
    return report


def model_proposals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The model's proposals, each checked to be recorded whole: its outcome, seconds, tokens, replies."""
    mine = [p for p in report["proposals"] if p["proposer"] == "llm"]
    for p in mine:
        assert p["outcome"] and p["seconds"] > 0 and p["replies"], p
        assert p["prompt_tokens"] > 0 and p["completion_tokens"] > 0, p
        if p["seq"] is None:  # it made no candidate: it failed, or repeated a proposal already made
            assert p["outcome"] in ("failed", "duplicate"), p
        if p["outcome"] not in ("failed", "duplicate"):  # a candidate's status: it has its seq (so has a
            assert p["seq"] is not None, p  # candidate that failed in the sandbox or behaved as one run)
    print(json.dumps([(p["outcome"], p["replies"], p["seconds"]) for p in mine]))
    return mine


def test_a_kv_search_with_the_local_model_records_every_proposal_with_its_outcome(
    server: LocalServer, tmp_path: Path
) -> None:
    report = search(server, tmp_path / "runs.db", "kv", "llm", "--budget", "2", "--llm-repairs", "1")
    mine = model_proposals(report)
    made = [p for p in mine if p["seq"] is not None]
    assert len(made) == sum(report["counts"].values()) >= 2, "every candidate is a proposal listed"
    assert report["tokens"] > 0
    for p in made:  # past the checker, on to Z3 and the sandbox; outside it, stored with the checker's words
        if p["replies"][-1] == "ok":
            assert p["outcome"] != "rejected" or p["message"].startswith("verification: "), p
        else:
            assert p["replies"][-1] == "static-check", p
            assert p["outcome"] == "rejected" and p["message"].startswith("static check: "), p


def test_a_batching_search_mixing_the_local_model_with_the_offline_proposer(
    server: LocalServer, tmp_path: Path
) -> None:
    report = search(server, tmp_path / "runs.db", "batching", "mix", "--budget", "3", "--llm-share", "0.5")
    mine = model_proposals(report)
    assert mine, "the model wrote a share of the proposals"
    writers = {p["proposer"] for p in report["proposals"] if p["seq"] is not None}
    assert len([p for p in report["proposals"] if p["seq"] is not None]) == sum(report["counts"].values())
    assert writers <= {"llm", "evolve"}


def test_a_base_model_that_echoes_its_prompt_fails_its_proposals_not_the_run(
    robust: LocalServer, tmp_path: Path
) -> None:
    started = time.monotonic()
    report = search(
        robust, tmp_path / "runs.db", "kv", "llm", "--budget", "20", "--llm-repairs", "1",
        "--time-budget", "120", "--llm-max-tokens", "300", ends=("stopped",),
    )  # fmt: skip  # it echoes until the reply's cap: 300 tokens keep a call near 50 s on 2 cores
    took = time.monotonic() - started
    mine = model_proposals(report)
    assert mine, "it was asked, and every answer is recorded"
    assert "time budget spent" in report["message"]
    assert took < 120 + 120 + 30, f"the time budget holds within one call's timeout (120 s): {took:.0f} s"


def test_a_request_over_the_models_context_fails_its_proposal_not_the_run(
    server: LocalServer, tmp_path: Path
) -> None:
    """No --llm-context, and a prompt template padded past the 4,096 tokens the server holds: llama.cpp
    refuses each request, and each refusal is one failed proposal."""
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    shipped = Path(__file__).parents[2] / "search" / "proposers" / "llm" / "templates" / "user.md"
    (prompts / "user.md").write_text(shipped.read_text() + "\nNotes: " + "keep it short. " * 2000)
    report = search(
        server, tmp_path / "runs.db", "kv", "llm", "--budget", "1", "--prompts", str(prompts),
        "--time-budget", "60", ends=("finished", "stopped"), fitted=False,
    )  # fmt: skip
    failed = [p for p in report["proposals"] if p["proposer"] == "llm"]
    assert failed and all(p["outcome"] == "failed" and p["replies"] == ["too-long"] for p in failed), failed


def real_tokens(server: LocalServer, messages: list[dict[str, str]]) -> int:
    """The conversation's tokens as the served model counts them, with ChatML's marks around each message."""
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    request = urllib.request.Request(
        server.url.removesuffix("/v1") + "/extras/tokenize",
        data=json.dumps({"input": text + "<|im_start|>assistant\n"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return len(json.load(answer)["tokens"])


@pytest.mark.parametrize("name", targets.names())
def test_each_targets_prompt_is_estimated_long_so_a_fitted_turn_fits_the_real_context(
    server: LocalServer, name: str
) -> None:
    target = targets.load(name)
    sources = list(target.baselines().values())
    if not sources:
        pytest.skip(f"{name} has no baseline in candidate form to be a parent")
    entries = [Entry(i, source, 0.5) for i, source in enumerate(sources[:3])]
    request = ProposalRequest(brief(target), entries[0], tuple(entries[1:]), (), seed=1)
    templates = Templates.load()
    whole = templates.messages(request)
    counted, estimated = real_tokens(server, whole), estimated_tokens(whole)
    print(f"{name}: {counted} tokens, {sum(len(m['content']) for m in whole) / counted:.2f} chars a token")
    assert estimated >= counted
    room = CONTEXT_TOKENS - 800
    fitted = real_tokens(server, templates.fitted(request, [], room))
    print(f"{name}: fitted into {room}: {fitted}")
    assert fitted <= room


def test_a_server_that_crashes_says_how_it_ended(tmp_path: Path) -> None:
    """A native crash in llama.cpp (a SIGSEGV, as an AMX instruction a virtual machine refuses raises) leaves
    nothing in the server's log: `crucible llm serve` names the signal."""
    serving = subprocess.Popen(
        [CRUCIBLE, "llm", "serve", "--model", MODEL, "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert serving.stdout is not None
        ready = serving.stdout.readline()
        if not ready:  # not installed: the fixtures' rule, skipped here, required in CI
            if os.environ.get("CRUCIBLE_REQUIRE_LLM_LOCAL") == "1":
                pytest.fail(serving.communicate()[1])
            pytest.skip(serving.communicate()[1])
        assert json.loads(ready)["model"] == MODEL
        children = Path(f"/proc/{serving.pid}/task/{serving.pid}/children").read_text().split()
        for child in children:
            os.kill(int(child), signal.SIGSEGV)
        _, err = serving.communicate(timeout=30)
    finally:
        serving.kill()
    assert serving.returncode != 0, err
    assert err.strip().splitlines()[-1].endswith("stopped by itself (killed by SIGSEGV)"), err
    assert "Traceback" not in err


def test_ctrl_c_during_a_local_models_reply_ends_the_run_at_once(server: LocalServer, tmp_path: Path) -> None:
    words = [
        CRUCIBLE, "search", "--target", "batching-offline", "--workload", "gen:300:0", "--trials", "1",
        "--proposer", "llm", "--base-url", server.url, "--model", MODEL, "--llm-concurrency", "1",
        "--budget", "4", "--db", f"sqlite:///{tmp_path / 'runs.db'}",
    ]  # fmt: skip
    started = time.monotonic()
    stop = interrupted(words, lambda: time.monotonic() - started > 20)  # the model reads or writes by then
    assert stop.code == 130, stop.err
    assert stop.took_s < 5.0
    assert "resume with: crucible search --resume" in stop.err.strip().splitlines()[-1]
