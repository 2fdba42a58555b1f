"""What a real local model adds: kv and batching searches at one seed and budget with the LLM proposer (a
local model served by llama.cpp on this CPU), with `mix` (half its proposals, half the offline proposer's)
and with the offline proposer alone.

    .venv/bin/python bench/llm_local.py [--budget 10] [--seed 1] [--quick] [--record]

For each run it reads the store: proposals made, the share that failed before any program came out (no
code, a syntax error, a diff that does not apply, a timeout...), the share of the proposer's programs
that passed the static checker at once and after repair turns, that passed Z3 and ran, that beat their
parent, the best score, and seconds and tokens per proposal. A 0.5B model on 2 cores is a floor, not a
ceiling: the same commands take a larger local model or a hosted one (`--base-url`, `--model`).
`--quick`: kv only, the LLM and the offline proposer, budget 2. Needs `bash .ci/llm-local` (the llm_local
environment): without it, it says so in one line and exits 3.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _bench

from search.errors import UserError
from search.proposers.llm.local_model import MODELS, LocalServer

WORKLOADS = {
    "kv": ["--workload", "gen:chat:1", "--capacity", "300"],
    "batching": ["--set", "requests=0:200"],
}
PROPOSERS = ("llm", "mix", "evolve")
NOT_INSTALLED = 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    args, session = _bench.start(parser)
    chosen = ("kv",) if session.quick else tuple(WORKLOADS)
    writers = ("llm", "evolve") if session.quick else PROPOSERS
    budget = 2 if session.quick else args.budget
    rows = []
    for model in MODELS:
        try:
            server = LocalServer(model)
        except UserError as exc:
            print(f"needs the llm_local environment: {exc}", file=sys.stderr)
            sys.exit(NOT_INSTALLED)
        with server, tempfile.TemporaryDirectory() as folder:
            for target in chosen:
                for proposer in writers:
                    rows.append(_search(server, model, target, proposer, budget, args.seed, Path(folder)))
                    print(json.dumps(rows[-1]), flush=True)
    session.save({"budget": budget, "seed": args.seed, "runs": rows})


def _search(
    server: LocalServer, model: str, target: str, proposer: str, budget: int, seed: int, folder: Path
) -> dict[str, object]:
    db = folder / f"{target}-{proposer}.db"
    words = ["crucible", "search", "--target", target, *WORKLOADS[target], "--trials", "2"]
    words += ["--proposer", proposer, "--budget", str(budget), "--seed", str(seed), "--workers", "1"]
    words += ["--db", f"sqlite:///{db}", "--json"]
    if proposer != "evolve":
        words += ["--base-url", server.url, "--model", model, "--llm-concurrency", "1"]
        words += ["--llm-max-tokens", "800"]
    started = time.monotonic()
    env = {**os.environ, "OPENAI_API_KEY": "local"}
    crucible = str(Path(sys.executable).with_name("crucible"))
    done = subprocess.run([crucible, *words[1:]], capture_output=True, text=True, env=env, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"bench: {' '.join(words)} failed: {done.stderr.strip().splitlines()[-1:]}")
    summary = json.loads(done.stdout)
    writer = "evolve" if proposer == "evolve" else "llm"
    mine = next((p for p in summary.get("proposers", []) if p.get("proposer") == writer), {})
    shares = _shares(db, writer)
    proposals = int(shares["proposals"]) or 1
    return {
        "model": model if writer == "llm" else "",
        "target": target,
        "proposer": proposer,
        **shares,
        "beat_parent": round(int(mine.get("improved", 0)) / proposals, 3),
        "best_of_writer": mine.get("best"),
        "seconds_per_proposal": round(seconds / proposals, 1),
    }


def _shares(db: Path, proposer: str) -> dict[str, float | int]:
    """What became of the proposer's proposals, from the store."""
    with sqlite3.connect(db) as store:
        rows = store.execute(
            "select status, coalesce(message, ''), coalesce(note, ''), coalesce(tokens, 0) from candidate "
            "where proposer = ?",
            (proposer,),
        ).fetchall()
        failed = store.execute(
            "select count(*), coalesce(sum(tokens), 0) from event where kind = 'proposal-failed' "
            "and proposer = ?",
            (proposer,),
        ).fetchone()
    programs = len(rows)
    proposals = programs + int(failed[0])
    static = [r for r in rows if not r[1].startswith("static check")]
    repaired = [r for r in static if "repaired after" in r[2]]
    ran = [r for r in rows if r[0] in ("evaluated", "gated", "invalid", "duplicate")]
    tokens = sum(int(r[3]) for r in rows) + int(failed[1])

    def share(n: int) -> float:
        return round(n / proposals, 3) if proposals else 0.0

    return {
        "proposals": proposals,
        "no_program": share(int(failed[0])),
        "static_at_once": share(len(static) - len(repaired)),
        "static_after_repair": share(len(static)),
        "z3_and_ran": share(len(ran)),
        "tokens_per_proposal": round(tokens / proposals) if proposals else 0,
    }


if __name__ == "__main__":
    main()
