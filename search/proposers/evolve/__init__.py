"""Offline program evolution: mutations and crossovers on the AST, with no network at all."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from search.proposers.base import Proposer
from targets.base import Option


class EvolveKind:
    """The default proposer: it has no settings of its own and costs nothing."""

    name = "evolve"
    doc = "offline program evolution (no network): mutations and crossovers of the programs found so far"
    settings: tuple[Option, ...] = ()

    def configure(self, values: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def unpriced(self, values: Mapping[str, Any]) -> tuple[str, ...]:
        return ()

    def models(self, values: Mapping[str, Any]) -> tuple[str, ...]:
        return ()

    def create(self, values: Mapping[str, Any], environ: Mapping[str, str]) -> Proposer:
        from search.proposers.evolve.proposer import EvolveProposer

        return EvolveProposer()


KIND = EvolveKind()
