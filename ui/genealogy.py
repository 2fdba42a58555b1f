"""A run's genealogy as Graphviz DOT: chosen candidates and their ancestors (parents solid, inspirations
dashed) back to the baselines that seeded the islands; each node links to its candidate's page."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from search.service import CandidateInfo

FILL = {
    "baseline": "#e0e0e0",
    "best": "#ffd54f",
    "evaluated": "#bbdefb",
    "gated": "#e3f2fd",
    "duplicate": "#eeeeee",
    "failed": "#ffcdd2",
}
"""Node fills by kind; a behavioural duplicate (ran fine, behaved as an earlier program) is not a failure."""


def ancestry(candidates: Sequence[CandidateInfo], chosen: Iterable[int]) -> set[int]:
    """The chosen candidates and every candidate they descend from, through parents and inspirations."""
    by_id = {c.candidate_id: c for c in candidates}
    seen: set[int] = set()
    todo = [i for i in chosen if i in by_id]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        c = by_id[current]
        todo.extend(i for i in (c.parent_id, *c.inspirations) if i is not None and i in by_id)
    return seen


def _escape(text: str) -> str:
    """Text safe inside a quoted DOT string."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _kind(c: CandidateInfo, best_id: int | None) -> str:
    if c.is_baseline:
        return "baseline"
    if c.candidate_id == best_id:
        return "best"
    return c.status if c.status in ("evaluated", "gated", "duplicate") else "failed"


def dot(
    candidates: Sequence[CandidateInfo], shown: set[int], best_id: int | None, link: Callable[[int], str]
) -> str:
    """The DOT source of the shown candidates: one box per candidate, its score and status."""
    lines = [
        "digraph genealogy {",
        '  rankdir=LR; bgcolor="transparent";',
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
        '  edge [color="#555555", arrowsize=0.6];',
    ]
    for c in candidates:
        if c.candidate_id not in shown:
            continue
        title = c.label
        detail = f"{c.score:.4f}" if c.score is not None else (c.failure_class or c.status)
        attrs = {
            "label": f"{_escape(title)}\\n{_escape(detail)}",
            "fillcolor": FILL[_kind(c, best_id)],
            "URL": _escape(link(c.candidate_id)),
            "target": "_self",
            "tooltip": _escape(f"candidate {c.candidate_id}: {c.status}"),
        }
        body = ", ".join(f'{k}="{v}"' for k, v in attrs.items())
        lines.append(f"  c{c.candidate_id} [{body}];")
    for c in candidates:
        if c.candidate_id not in shown:
            continue
        if c.parent_id in shown:
            lines.append(f"  c{c.parent_id} -> c{c.candidate_id};")
        for i in c.inspirations:
            if i in shown:
                lines.append(f'  c{i} -> c{c.candidate_id} [style=dashed, color="#999999"];')
    lines.append("}")
    return "\n".join(lines)
