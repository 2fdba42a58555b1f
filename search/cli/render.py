"""How results are drawn on a terminal: tables of the read model's data, to stdout; `--json` prints the
same data as it is. Nothing here reads a store or computes a figure."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console, RenderableType
from rich.table import Table

from targets.base import Objective, Target


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def show(*renderables: RenderableType | str) -> None:
    """Print to stdout; piped output is as wide as its widest table, so no column is ever cut."""
    console = Console()
    if not console.is_terminal:
        wide = Console(width=100_000)
        widths = [wide.measure(r).maximum for r in renderables if not isinstance(r, str)]
        console = Console(width=max([80, *widths]))
    for r in renderables:
        if isinstance(r, str):
            console.print(r, markup=False, highlight=False, soft_wrap=True)
        else:
            console.print(r)


def cell(value: float, integer: bool) -> str:
    return f"{value:.0f}" if integer else f"{value:.4f}"


def metrics_table(
    title: str, rows: Mapping[str, Mapping[str, float]], target: Target, objective: Objective | None = None
) -> Table:
    """Every policy's report metrics, best first by `objective` (the target's unless given)."""
    chosen = objective or target.objective
    whole = set(target.integer_metrics)
    table = Table(title=title)
    table.add_column("policy")
    columns = target.report_metrics
    for name in columns:
        table.add_column(name, justify="right")
    ordered = sorted(
        rows.items(), key=lambda kv: kv[1].get(chosen.metric, 0.0), reverse=chosen.direction == "maximize"
    )
    for name, metrics in ordered:
        table.add_row(name, *(cell(metrics[c], c in whole) if c in metrics else "-" for c in columns))
    return table


def columns_table(title: str, columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> Table:
    """Rows of plain values under named columns (a target command's result)."""
    table = Table(title=title)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(_plain(row.get(c, "")) for c in columns))
    return table


def _plain(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
