"""The LLM proposer against a real model: Qwen2.5-Coder-0.5B-Instruct served by llama.cpp on this CPU.

What these tests show: that the loop gets through what a real small model writes (prose, fences, programs
outside the subset, copies of the parent), records every proposal with its outcome and its tokens, and
stops at once when interrupted mid-call. What they do not show: that the model writes better heuristics
than the offline proposer (that is a measurement, not a test), nor how a larger model behaves.
Skipped when `bash .ci/llm-local` has not built the model's environment; required where
CRUCIBLE_REQUIRE_LLM_LOCAL=1 (CI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

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
CRUCIBLE = str(Path(sys.executable).with_name("crucible"))


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    try:
        local = LocalServer(MODEL)
    except UserError as exc:
        if os.environ.get("CRUCIBLE_REQUIRE_LLM_LOCAL") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    with local:
        yield local


def search(
    server: LocalServer, db: Path, *extra: str, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    words = [
        CRUCIBLE, "search", "--target", "kv", "--workload", "gen:chat:1", "--capacity", "300",
        "--trials", "1", "--proposer", "llm", "--base-url", server.url, "--model", MODEL,
        "--llm-concurrency", "1", "--llm-max-tokens", "800", "--seed", "1", "--db", f"sqlite:///{db}",
        "--json", *extra,
    ]  # fmt: skip
    env = {**os.environ, "OPENAI_API_KEY": "local"}
    return subprocess.run(words, capture_output=True, text=True, timeout=timeout, env=env, check=False)


def test_a_search_with_the_local_model_records_every_proposal_with_its_outcome(
    server: LocalServer, tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    done = search(server, db, "--budget", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    summary = json.loads(done.stdout)
    assert summary["status"] == "finished"
    shown = subprocess.run(
        [CRUCIBLE, "runs", "show", summary["run_id"], "--db", f"sqlite:///{db}", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    report = json.loads(shown.stdout)
    print(json.dumps({"counts": summary["counts"], "tokens": summary["tokens"]}))
    assert summary["tokens"] > 0, "the local server's usage was counted"
    written = sum(summary["counts"].values())
    assert written >= 1, report


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
