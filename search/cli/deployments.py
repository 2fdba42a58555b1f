"""`crucible deployments`: the GPU deployments that price LLM targets, their memory arithmetic and sources."""

from __future__ import annotations

import argparse
from typing import Any

from search.cli import parsing
from search.cli.parsing import add_json

MEMORY = ("GPU GiB", "fraction", "weights GiB", "activations GiB", "KV KiB per token", "KV blocks")


def add_parser(sub: Any, name: str, help_text: str) -> None:
    p = parsing.add_command(sub, name, help_text)
    p.add_argument("--block-tokens", type=int, default=16, help="tokens per KV block for the block count")
    p.add_argument("--token-budget", type=int, default=2048, help="tokens per iteration, sizing activations")
    p.add_argument("--max-seqs", type=int, default=256, help="sequences per iteration, sizing the logits")
    add_json(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> None:
    from rich.table import Table

    from search.cli.render import print_json, show
    from search.errors import UserError
    from targets.deployments.catalog import DEPLOYMENTS
    from targets.deployments.deployment import describe

    sizes = (args.block_tokens, args.token_budget, args.max_seqs)
    if not all(1 <= x <= 10**9 for x in sizes):
        raise UserError("--block-tokens, --token-budget and --max-seqs take whole numbers from 1 to 1e9")
    rows = [describe(d, *sizes) for d in DEPLOYMENTS.values()]
    if args.json:
        print_json(rows)
        return
    priced = Table(title="deployments (--set deployment=NAME): what each GPU holds, what an iteration costs")
    for column in ("deployment", "model", "GPUs", *MEMORY, "decode ms", "prefill ms"):
        priced.add_column(column, justify="left" if column in ("deployment", "model", "GPUs") else "right")
    for row in rows:
        numbers = [_number(row[c]) for c in MEMORY]
        timing = [_number(row[c]) if row[c] is not None else "-" for c in ("decode ms", "prefill ms")]
        priced.add_row(row["deployment"], row["model"], row["GPUs"], *numbers, *timing)
    sources = Table(title="where each comes from")
    for column in ("deployment", "operator profile", "attention", "overhead ms", "sources and notes"):
        sources.add_column(column)
    for row in rows:
        note = row["sources"] + (f"; {row['note']}" if row["note"] else "")
        sources.add_row(row["deployment"], row["profile"], row["attention"], f"{row['overhead ms']:g}", note)
    caption = (
        f"KV blocks of {args.block_tokens} tokens beside activations for {args.token_budget} tokens and "
        f"{args.max_seqs} sequences; decode ms: one iteration of 32 decodes at 1,000 cached tokens; "
        "prefill ms: 1,000 tokens of a new prompt; docs/targets/deployments.md checks them against "
        "published measurements"
    )
    show(priced, sources, caption)


def _number(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"
