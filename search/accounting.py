"""How each proposer and model did in a run, derived from the store: what it cost and what it produced.

Nothing here is stored twice: candidates carry their proposer, model, tokens and cost, failed proposals
are events carrying the same (as is the event of a run stopped in the middle of a proposal), so the
figures always agree with the rows they come from.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .loop import BASELINE
from .store import Store

RAN = ("evaluated", "gated")


@dataclass(frozen=True)
class ProposerStats:
    """One proposer (and model) in one run; `improved` counts evaluated children that beat their parent."""

    proposer: str
    model: str
    proposals: int = 0
    """Attempts: candidates written plus failed proposals."""
    failed: int = 0
    rejected: int = 0
    """Candidates that never ran to the end: the static check, the verifier or the sandbox stopped them."""
    ran: int = 0
    """Candidates the sandbox scored (evaluated on every instance, or gated after the training share)."""
    improved: int = 0
    best: float | None = None
    tokens: int = 0
    cost_usd: float = 0.0
    failures: dict[str, int] = field(default_factory=dict)
    """Failed proposals and rejected candidates by class (the text before the first colon)."""

    @property
    def success_rate(self) -> float:
        return self.ran / self.proposals if self.proposals else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "success_rate": self.success_rate}


def proposer_stats(store: Store, run_id: str, maximize: bool) -> list[ProposerStats]:
    """Per (proposer, model): proposals, failures by class, candidates run and improved, best, spend."""
    rows = list(store.candidates(run_id))
    scores = {r.id: r.score for r in rows if r.status == "evaluated" and r.score is not None}
    table: dict[tuple[str, str], dict[str, Any]] = {}

    def slot(proposer: str, model: str) -> dict[str, Any]:
        return table.setdefault((proposer, model), {"failures": {}})

    def bump(counts: dict[str, Any], key: str, by: float = 1) -> None:
        counts[key] = counts.get(key, 0) + by

    for row in rows:
        if row.proposer == BASELINE:
            continue
        counts = slot(row.proposer, row.model)
        bump(counts, "proposals")
        bump(counts, "tokens", row.tokens)
        bump(counts, "cost_usd", row.cost_usd)
        if row.status in RAN:
            bump(counts, "ran")
        elif row.status != "pending":
            bump(counts, "rejected")
            bump(counts["failures"], (row.message or row.status).split(":")[0])
        score, parent = scores.get(row.id), scores.get(row.parent_id)
        if score is not None:
            best = counts.get("best")
            counts["best"] = score if best is None else (max if maximize else min)(best, score)
            if parent is not None and (score > parent if maximize else score < parent):
                bump(counts, "improved")
    for event in store.events(run_id):
        if event.kind == "proposal-failed":
            counts = slot(event.proposer, event.model)
            bump(counts, "proposals")
            bump(counts, "failed")
            bump(counts["failures"], event.message.split(":")[0])
        elif event.tokens or event.cost_usd:  # a proposal cut off when the endpoint went away
            counts = slot(event.proposer, event.model)
        else:
            continue
        bump(counts, "tokens", event.tokens)
        bump(counts, "cost_usd", event.cost_usd)
    return [ProposerStats(proposer, model, **counts) for (proposer, model), counts in sorted(table.items())]
