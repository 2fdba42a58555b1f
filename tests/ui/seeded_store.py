"""The store the UI's tests read, seeded by real short searches on the shipped kv workload in the process
sandbox: one finished run of six candidates (the offline proposer) that holds out the workload's last third,
and one of the LLM proposer against
the scripted OpenAI-compatible endpoint of tests/search (real client, real HTTP) that Z3 refutes a
candidate of, the static check rejects another of, and its token cap stops (resumable)."""

from __future__ import annotations

import itertools
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from search import cli
from search.store.readmodel import ReadModel, RunInfo
from search.store.store import Store, open_engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "search"))
from scripted_llm import Reply, ScriptedLLM, program  # the LLM tests' endpoint

REFUTED = '"""Age per hit."""\n\n\ndef priority(b, p):\n    return b.age / b.hits\n'
"""Inside the subset, but Z3 finds a division by zero (hits = 0 is in the domain)."""
OUTSIDE_SUBSET = "import os\n\n\ndef priority(b, p):\n    return os.getpid()\n"
KEY_ENV = "CRUCIBLE_UI_TEST_KEY"
SEARCH = ["search", "--target", "kv", "--sandbox", "process", "--trials", "4", "--seed", "0"]


@dataclass(frozen=True)
class Seeded:
    url: str
    finished: RunInfo
    stopped: RunInfo

    @property
    def read(self) -> ReadModel:
        return ReadModel(Store(open_engine(self.url, create=False)))


def seed(url: str) -> Seeded:
    """Run the two searches into the store at `url` (created)."""
    cli.main([*SEARCH, "--db", url, "--budget", "6", "--holdout", "0.33"])
    numbers = itertools.count(1)
    script = [Reply(REFUTED), Reply(OUTSIDE_SUBSET)]
    os.environ[KEY_ENV] = "sk-scripted"
    try:
        with ScriptedLLM(script, lambda body: Reply(program(next(numbers)))) as llm:
            # No repair turns: the reply outside the subset is then stored as the static check's rejection.
            llm_flags = [
                "--proposer",
                "llm",
                "--model",
                "scripted",
                "--base-url",
                llm.url,
                "--llm-repairs",
                "0",
            ]
            caps = ["--api-key-env", KEY_ENV, "--price", "scripted=1,2", "--max-tokens", "250"]
            cli.main([*SEARCH, "--db", url, "--budget", "20", *llm_flags, *caps])
    finally:
        del os.environ[KEY_ENV]
    read = ReadModel(Store(open_engine(url, create=False)))
    finished, stopped = read.runs()
    assert (finished.status, stopped.status) == ("finished", "stopped")
    return Seeded(url, finished, stopped)
