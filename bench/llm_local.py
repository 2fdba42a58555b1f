"""What a real local model adds: kv and batching searches at one seed and budget with the LLM proposer (a
local model served by llama.cpp on this CPU), with `mix` (half its proposals, half the offline proposer's)
and with the offline proposer alone.

    .venv/bin/python bench/llm_local.py [--budget 10] [--seed 1] [--time-budget 600] [--quick] [--record]

For each run it reads `crucible runs show --json`: of the writer's proposals (the LLM's under `mix`), the
share from which a program came out, that passed the static checker at once and after repair turns, that
passed Z3 and ran; the children that beat their parent, the writer's best score beside the run's and the
best baseline's, the repair turns taken, and the seconds and tokens (in and out) per proposal. A 0.5B
model on 2 cores is a floor, not a ceiling: the same commands take a larger local model or a hosted one
(`--base-url`, `--model`).
`--quick`: kv only, the LLM and the offline proposer, budget 1, each search stopped after 240 s at most.
Needs `bash .ci/llm-local` (the llm_local environment): without it, it says so in one line and exits 3.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _bench

from search.cli.llm import REPLY_TOKENS
from search.errors import UserError
from search.proposers.llm.local_model import MODELS, LocalServer

WORKLOADS = {
    "kv": ["--workload", "gen:chat:1", "--capacity", "300"],
    "batching": ["--set", "requests=0:200"],
}
PROPOSERS = ("llm", "mix", "evolve")
NOT_INSTALLED = 3
QUICK_TIME_BUDGET_S = 240
"""The quick mode's bound on a search: it shows the bench runs, not what the model does."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--time-budget", type=int, default=600, help="seconds per search at most (a model that copies its "
        "parent again and again is asked again and again)",
    )  # fmt: skip
    args, session = _bench.start(parser)
    chosen = ("kv",) if session.quick else tuple(WORKLOADS)
    writers = ("llm", "evolve") if session.quick else PROPOSERS
    budget = 1 if session.quick else args.budget
    time_budget = QUICK_TIME_BUDGET_S if session.quick else args.time_budget
    rows = []
    for model in (name for name, local in MODELS.items() if local.proposes):
        try:
            server = LocalServer(model)
        except UserError as exc:
            print(f"needs the llm_local environment: {exc}", file=sys.stderr)
            sys.exit(NOT_INSTALLED)
        with server, tempfile.TemporaryDirectory() as folder:
            for target in chosen:
                for proposer in writers:
                    limits = (budget, args.seed, time_budget)
                    rows.append(_search(server, model, target, proposer, *limits, Path(folder)))
                    print(json.dumps(rows[-1]), flush=True)
    session.save({"budget": budget, "seed": args.seed, "time_budget_s": time_budget, "runs": rows})


def _search(
    server: LocalServer,
    model: str,
    target: str,
    proposer: str,
    budget: int,
    seed: int,
    time_budget: int,
    folder: Path,
) -> dict[str, object]:
    db = f"sqlite:///{folder / f'{target}-{proposer}.db'}"
    words = ["search", "--target", target, *WORKLOADS[target], "--trials", "2", "--proposer", proposer]
    words += ["--budget", str(budget), "--seed", str(seed), "--time-budget", str(time_budget)]
    words += ["--workers", "1", "--db", db, "--json"]
    if proposer != "evolve":
        words += ["--base-url", server.url, "--model", model, "--llm-concurrency", "1"]
        words += ["--llm-context", str(server.context), "--llm-max-tokens", str(REPLY_TOKENS)]
        words += ["--llm-share", "0.5"] if proposer == "mix" else []
    started = time.monotonic()
    run_id = json.loads(_crucible(words))["run_id"]
    seconds = time.monotonic() - started
    report = json.loads(_crucible(["runs", "show", run_id, "--db", db, "--json"]))
    writer = "evolve" if proposer == "evolve" else "llm"
    mine = next((p for p in report["proposers"] if p["proposer"] == writer), {})
    baselines = [b["score"] for b in report["baselines"] if b["score"] is not None and not b["oracle"]]
    best_baseline = (max if report["direction"] == "maximize" else min)(baselines)
    return {
        "model": model if writer == "llm" else "",
        "target": target,
        "proposer": proposer,
        "writer": writer,
        **_shares([p for p in report["proposals"] if p["proposer"] == writer]),
        "beat_parent": mine.get("improved", 0),
        "best_of_writer": mine.get("best"),
        "best_of_run": report["best"]["score"] if report["best"] else None,
        "best_baseline": best_baseline,
        "run_seconds": round(seconds),
        "ended": report["status"],
    }


def _crucible(words: list[str]) -> str:
    env = {**os.environ, "OPENAI_API_KEY": "local"}
    crucible = str(Path(sys.executable).with_name("crucible"))
    done = subprocess.run([crucible, *words], capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        sys.exit(f"bench: crucible {' '.join(words)} failed: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout


PASSED = ("ok", "duplicate")
"""The fates of a reply whose program passed the static checker (a copy is sent back, but it passed)."""


def _shares(proposals: list[dict[str, Any]]) -> dict[str, float | int]:
    """What became of one writer's proposals, from `runs show --json`: a proposal that asked no model
    (the offline proposer's) counts as one reply, passed unless the static check rejected its program."""

    def fates(p: dict[str, Any]) -> list[str]:
        if p["replies"]:
            return p["replies"]
        static = p["outcome"] == "rejected" and p["message"].startswith("static check")
        return ["static-check" if static else "ok"]

    n = len(proposals)

    def share(count: int) -> float:
        return round(count / n, 3) if n else 0.0

    ran = [p for p in proposals if p["seq"] is not None and p["outcome"] not in ("rejected", "pending")]
    return {
        "proposals": n,
        "parsed": share(sum(p["outcome"] != "failed" for p in proposals)),
        "static_at_once": share(sum(fates(p)[0] in PASSED for p in proposals)),
        "static_after_repair": share(sum(fates(p)[-1] in PASSED for p in proposals)),
        "z3_and_ran": share(len(ran)),
        "repair_turns": sum(max(len(p["replies"]) - 1, 0) for p in proposals),
        "seconds_per_proposal": round(sum(p["seconds"] or 0 for p in proposals) / n, 1) if n else 0.0,
        "tokens_in_per_proposal": round(sum(p["prompt_tokens"] for p in proposals) / n) if n else 0,
        "tokens_out_per_proposal": round(sum(p["completion_tokens"] for p in proposals) / n) if n else 0,
    }


if __name__ == "__main__":
    main()
