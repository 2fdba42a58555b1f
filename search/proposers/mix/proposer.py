"""Mixing: the LLM writes a share of the proposals (the structural leaps), an offline proposer the rest.

Cheap mutations, with Optuna tuning each child, do the fine work around what the LLM found. Which one
writes a proposal is drawn from the proposal's seed, so a run mixes the same way when it is resumed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from search.proposers.base import Proposal, ProposalFailed, ProposalRequest, Proposer


@dataclass(frozen=True)
class MixProposer:
    """Hands each request to `llm` with probability `share`, else to `offline`."""

    llm: Proposer
    offline: Proposer
    share: float
    name: str = field(default="mix", init=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"the LLM share must lie in [0, 1], got {self.share}")

    @property
    def concurrency(self) -> int:
        return self.llm.concurrency

    def propose(self, request: ProposalRequest) -> Proposal:
        chosen = self.llm if random.Random(f"mix:{request.seed}").random() < self.share else self.offline
        try:
            return chosen.propose(request)
        except ProposalFailed as exc:
            exc.proposer = exc.proposer or chosen.name  # the run's statistics count it against its writer
            raise
