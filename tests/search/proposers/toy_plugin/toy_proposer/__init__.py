"""A proposer installed from outside Crucible's tree: it writes recency-plus-frequency keys whose weight of
frequency is its one setting (`toy_weight`), scaled by the proposal's seed so each proposal is new."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from search.proposers.base import Proposal, ProposalRequest
from targets.base import setting

SOURCE = '''"""Recency with {weight:g} hits' worth of frequency."""


def priority(b, p):
    return b.last_access + {weight:g} * b.hits
'''


class ToyProposer:
    name = "toy"
    concurrency = 1

    def __init__(self, weight: float) -> None:
        self.weight = weight

    def propose(self, request: ProposalRequest) -> Proposal:
        weight = self.weight * (1 + request.seed % 997)
        return Proposal(SOURCE.format(weight=weight), proposer=self.name, note=f"weight {weight:g}")


class ToyKind:
    name = "toy"
    doc = "a toy proposer from a plugin package"
    settings = (setting("toy_weight", "float", 1.0, "the weight of frequency against recency", low=0),)

    def configure(self, values: Mapping[str, Any]) -> dict[str, Any]:
        return dict(values)

    def unpriced(self, values: Mapping[str, Any]) -> tuple[str, ...]:
        return ()

    def models(self, values: Mapping[str, Any]) -> tuple[str, ...]:
        return ()

    def create(self, values: Mapping[str, Any], environ: Mapping[str, str]) -> ToyProposer:
        return ToyProposer(float(values["toy_weight"]))


KIND = ToyKind()
