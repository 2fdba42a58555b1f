"""The Proposer protocol: given a parent, inspirations and recent failures, write a new candidate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from targets.base import FeatureRegistry, Option
from verifiers.program import Signature


@dataclass(frozen=True)
class Entry:
    """A program the database holds: its source, its score on the objective, and its metrics."""

    candidate_id: int
    source: str
    score: float
    metrics: dict[str, float] = field(default_factory=dict)
    params: dict[str, float] = field(default_factory=dict)
    label: str = ""
    """How notes and prompts name it, as every front end does (`#seq`, or a baseline's name)."""

    @property
    def name(self) -> str:
        return self.label or f"#{self.candidate_id}"


@dataclass(frozen=True)
class TargetBrief:
    """What a proposer may know of a target: the words, the signatures and their features."""

    name: str
    description: str
    signatures: tuple[Signature, ...]
    registries: dict[str, FeatureRegistry]
    objective: str
    direction: str
    knobs: tuple[str, ...] = ()
    """Engine settings the mechanism reads from PARAMS that a search tunes beside the key (Target.knobs):
    kept though no function reads them."""


@dataclass(frozen=True)
class ProposalRequest:
    target: TargetBrief
    parent: Entry
    inspirations: tuple[Entry, ...]
    failures: tuple[str, ...]
    """One-line messages of recent failed candidates (static check, verifier, sandbox), newest last."""
    seed: int
    repeated: tuple[str, ...] = ()
    """The notes of the parent's children that behaved as an earlier program (changes not to make again)."""
    taken: frozenset[str] = frozenset()
    """The fingerprints of the run's programs so far: a proposer that can ask again may refuse a copy."""


@dataclass(frozen=True)
class Exchange:
    """How a proposer that converses with a model got its proposal: what the model read and wrote, and
    what became of each reply in turn (`ok`, or why it was sent back or given up: `no-code`,
    `static-check`, `duplicate`...), so a user can weigh a model by more than its best program."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    replies: tuple[str, ...] = ()
    estimated: bool = False
    """The tokens are estimated: the server reported no usage."""


@dataclass(frozen=True)
class Proposal:
    source: str
    proposer: str
    model: str = ""
    note: str = ""
    tokens: int = 0
    cost_usd: float = 0.0
    exchange: Exchange | None = None
    """None for a proposer that asks no model."""


class ProposerError(RuntimeError):
    """A proposer's error in one line, with what the interrupted proposal had already consumed.

    A failure can still have cost something (an LLM reply that did not parse): the usage travels with it
    so the run's totals include it, along with which proposer and model failed.
    """

    def __init__(
        self,
        message: str,
        *,
        proposer: str = "",
        model: str = "",
        tokens: int = 0,
        cost_usd: float = 0.0,
        exchange: Exchange | None = None,
    ) -> None:
        super().__init__(message)
        self.proposer = proposer
        self.model = model
        self.tokens = tokens
        self.cost_usd = cost_usd
        self.exchange = exchange


class ProposalFailed(ProposerError):
    """The proposer could not produce a candidate this time; the loop records it and asks again."""


class ProposerUnavailable(ProposerError):
    """The proposer cannot work at all (endpoint unreachable, key rejected); the run stops, resumable."""


class Proposer(Protocol):
    name: str
    concurrency: int
    """Proposals of one batch that may be written at the same time (1: one after another, in order)."""

    def propose(self, request: ProposalRequest) -> Proposal: ...


class ProposerKind(Protocol):
    """What a proposer's entry point (group `crucible.proposers`) names: its settings, declared as data so
    every front end generates its fields from them, and how to make the proposer of a run.

    `configure` checks the values of `settings` together (a missing model, a price that does not parse)
    and raises ValueError with one line; `create` makes the proposer for a run from those values, reading
    secrets (an API key) from `environ`, never from the store, and checks what it can reach before the run
    starts (ProposerUnavailable, or ValueError for a mistake of the user's)."""

    name: str
    doc: str
    settings: tuple[Option, ...]

    def configure(self, values: Mapping[str, Any]) -> dict[str, Any]: ...

    def unpriced(self, values: Mapping[str, Any]) -> tuple[str, ...]:
        """Models whose calls this proposer would count as free (no price given): a cost cap cannot hold."""
        ...

    def models(self, values: Mapping[str, Any]) -> tuple[str, ...]:
        """The models a run with these (configured) settings asks; none for a proposer that asks none."""
        ...

    def create(self, values: Mapping[str, Any], environ: Mapping[str, str]) -> Proposer: ...
