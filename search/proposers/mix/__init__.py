"""Mixing: the LLM writes a share of the proposals, offline evolution the rest."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from search.proposers.base import Proposer
from search.proposers.llm import SETTINGS, SHARE, checked_llm, llm_config
from targets.base import Option


class MixKind:
    """The LLM's settings and the share of proposals it writes."""

    name = "mix"
    doc = "the LLM writes a share of the proposals (--llm-share), offline evolution the rest"
    settings: tuple[Option, ...] = (*SETTINGS, SHARE)

    def configure(self, values: Mapping[str, Any]) -> dict[str, Any]:
        llm_config(values)
        return dict(values)

    def unpriced(self, values: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(llm_config(values).unpriced())

    def models(self, values: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(m.name for m in llm_config(values).models)

    def create(self, values: Mapping[str, Any], environ: Mapping[str, str]) -> Proposer:
        from search.proposers.evolve.proposer import EvolveProposer
        from search.proposers.mix.proposer import MixProposer

        llm = checked_llm(values, environ)
        return MixProposer(llm, EvolveProposer(), float(values.get(SHARE.name, SHARE.default)))


KIND = MixKind()
