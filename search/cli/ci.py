"""`crucible ci`: the nightly job over a repository's `crucible.toml`.

Exit 0: nothing regressed; 1: a regression past the fail threshold or a champion failing a hard property;
2: a configuration or input error."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

DESCRIPTION = (
    "Re-verify every champion of crucible.toml with Z3, score it and the baselines on its workloads, gate "
    "it against its previous stored scores (alert and fail thresholds), run a budgeted search seeded with "
    "it, and write summary.md, report.json, benchmark.json, junit.xml and, when a found heuristic beats the "
    "champion by the margin on the held-out workloads, patches/NAME.diff. Exit 0: nothing regressed; 1: a "
    "regression past the fail threshold or a refuted hard property; 2: a configuration or input error."
)


def add_parser(sub: Any, name: str, help_text: str) -> None:
    """Register `crucible ci` on the CLI's subparsers."""
    c = sub.add_parser(name, help=help_text, description=DESCRIPTION)
    c.add_argument("--config", default="crucible.toml", help="the config file (default: crucible.toml)")
    c.add_argument("--output", default="crucible-ci", help="folder for the reports (default: crucible-ci)")
    c.add_argument(
        "--informational", action="store_true", help="report regressions without failing (exit 0, not 1)"
    )
    c.add_argument("--json", action="store_true", help="print report.json on stdout too")
    c.set_defaults(handler=run)


def run(args: argparse.Namespace) -> None:
    from sandbox.choice import choose_sandbox
    from search.ci import config as ci_config
    from search.ci.pipeline import Context, check_champion, repository
    from search.ci.reports import CIReport, check_output, write
    from search.service import open_service, proposer_of

    path = Path(args.config)
    config = ci_config.load(path)
    root, commit = repository(path.resolve().parent)
    proposer = proposer_of(config.search, os.environ)  # no key, no endpoint: fail before anything runs
    check_output(Path(args.output))  # before an hour of work: a report that cannot be written is said now
    if config.store.startswith("sqlite:///"):  # the default .crucible/ folder is made on first use
        Path(config.store.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    service = open_service(config.store)
    sandbox, reason = choose_sandbox(config.sandbox)

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    say(f"sandbox: {sandbox.name} ({reason})")
    ctx = Context(config, service, sandbox, proposer, root, commit, say)
    results = [check_champion(ctx, champion) for champion in config.champions]
    report = CIReport(str(path), commit, args.informational, results)
    for written in write(report, Path(args.output)):
        say(f"wrote {written}")
    for champion in results:
        for w in champion.workloads:
            if w.level != "ok":
                say(f"{w.level}: {champion.name} on {w.workload}: {w.reason}")
    if args.json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        print(f"crucible ci: {report.level} ({len(results)} champions); reports in {args.output}")
    if report.exit_code:
        raise SystemExit(report.exit_code)
