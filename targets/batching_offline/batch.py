"""Offline batches: a seeded draw from a shipped trace's lengths, a prefix-block trace taken whole, a file.

A batch is sequences known up front: each one's prompt and output tokens and, where the workload says, its
prompt as prefix blocks (Mooncake's hash ids: id k stands for a block and everything before it)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from targets.base import WorkloadError
from targets.batching.trace import load_azure
from targets.trace_files import parsed

from .features import SEQUENCE_FEATURES

GENERATED = "gen"
MOONCAKE = "mooncake:conversation"
"""The Mooncake conversation train trace the serving target ships, taken as one batch with its prefixes."""
LENGTHS = "azure_conv_head.csv"
"""The trace whose (prompt, output) pairs a generated batch draws: the batching target's shipped head of
the Azure conversation trace (1,000 requests)."""
_MOST = 10_000_000
"""Sequences a generated batch may hold: far beyond what a search evaluates in minutes."""


@dataclass(frozen=True, eq=False)
class Batch:
    """Sequences in submission order as flat arrays: what the offline loop runs."""

    prompt: np.ndarray  # int64[n], >= 1
    output: np.ndarray  # int64[n], >= 1 (the first is produced by the prefill)
    offsets: np.ndarray  # int64[n + 1]: sequence r's prefix blocks are units[offsets[r]:offsets[r + 1]]
    units: np.ndarray  # int64, dense prefix-block ids (an id stands for its block and all before it)
    unit_tokens: int  # tokens per prefix block; 0 where the batch states no prefixes
    name: str

    @property
    def n(self) -> int:
        return int(self.prompt.size)

    def head(self, stop: int) -> Batch:
        """The first `stop` sequences, as a batch of their own."""
        cut = self.offsets[: stop + 1]
        return Batch(
            self.prompt[:stop], self.output[:stop], cut, self.units[: cut[-1]], self.unit_tokens,
            f"{self.name}[:{stop}]",
        )  # fmt: skip

    def features(self) -> np.ndarray:
        """Each sequence's SEQUENCE_FEATURES row before it is first scored (no preemptions yet)."""
        columns = SEQUENCE_FEATURES.columns()
        X = np.zeros((self.n, len(SEQUENCE_FEATURES)))
        X[:, columns["prompt"]] = self.prompt
        X[:, columns["output"]] = self.output
        X[:, columns["order"]] = np.arange(self.n)
        X[:, columns["prefix_rank"]] = self._prefix_rank()
        X[:, columns["shared"]] = self.shared_tokens()
        return X

    def shared_tokens(self) -> np.ndarray:
        """Prompt tokens at each sequence's start, in whole prefix blocks, that another sequence shares."""
        if not self.units.size:
            return np.zeros(self.n)
        seen = np.bincount(self.units)
        shared = np.zeros(self.n)
        for r in range(self.n):
            chain = self.units[self.offsets[r] : self.offsets[r + 1]]
            common = int(np.argmin(seen[chain] >= 2)) if (seen[chain] < 2).any() else chain.size
            shared[r] = min(common * self.unit_tokens, int(self.prompt[r]))
        return shared

    def _prefix_rank(self) -> np.ndarray:
        """Positions in the batch sorted by prompt blocks, equal prompts alike: shared prefixes adjoin."""
        if not self.units.size:
            return np.arange(self.n, dtype=np.float64)
        chains = [tuple(self.units[self.offsets[r] : self.offsets[r + 1]].tolist()) for r in range(self.n)]
        order = sorted(range(self.n), key=lambda r: chains[r])
        rank = np.zeros(self.n)
        for position, r in enumerate(order):
            same = position > 0 and chains[r] == chains[order[position - 1]]
            rank[r] = rank[order[position - 1]] if same else position
        return rank


def shipped_lengths_path() -> Path:
    return Path(str(resources.files("targets.batching") / "workloads" / LENGTHS))


def load_batch(workload: str) -> Batch:
    """`gen:N:SEED` (N sequences drawn with a seed from the shipped Azure conversation lengths),
    `mooncake:conversation` (the shipped Mooncake conversation train trace with its prefixes), or a file: a
    Mooncake JSONL trace (with prefixes) or an Azure CSV trace (without), in the file's time order."""
    if workload.startswith(f"{GENERATED}:"):
        return _generated(*_generator_spec(workload))
    if workload == MOONCAKE:
        from targets.serving.workload import shipped_workload_path

        return _prefix_trace(str(shipped_workload_path()))
    if workload.endswith(".jsonl"):
        return _prefix_trace(workload)
    return _lengths(workload)


def _generator_spec(workload: str) -> tuple[int, int]:
    parts = workload.split(":")
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        raise WorkloadError(f"generated batches are gen:N:SEED (two whole numbers), got {workload!r}")
    n, seed = int(parts[1]), int(parts[2])
    if not 1 <= n <= _MOST:
        raise WorkloadError(f"{workload}: a generated batch holds 1 to {_MOST:,} sequences, got {n:,}")
    return n, seed


@functools.lru_cache(maxsize=4)
def _generated(n: int, seed: int) -> Batch:
    """N (prompt, output) pairs drawn with replacement from the shipped trace's requests: its joint length
    distribution, no prefixes shared."""
    lengths = load_azure(shipped_lengths_path())
    pick = np.random.default_rng(seed).integers(0, lengths.n, size=n)
    return _plain(lengths.prompt_tokens[pick], lengths.output_tokens[pick], f"gen:{n}:{seed}")


@functools.lru_cache(maxsize=4)
def _lengths(path: str) -> Batch:
    requests = parsed(path, load_azure)
    return _plain(requests.prompt_tokens, requests.output_tokens, requests.name)


def _plain(prompt: np.ndarray, output: np.ndarray, name: str) -> Batch:
    empty = np.zeros(0, dtype=np.int64)
    offsets = np.zeros(prompt.size + 1, dtype=np.int64)
    return Batch(prompt.astype(np.int64), output.astype(np.int64), offsets, empty, 0, name)


@functools.lru_cache(maxsize=4)
def _prefix_trace(path: str) -> Batch:
    from targets.serving.workload import requests_of

    requests, prefixes, unit_tokens = requests_of(path, None)
    return Batch(
        requests.prompt_tokens.astype(np.int64),
        requests.output_tokens.astype(np.int64),
        prefixes.offsets,
        prefixes.blocks,
        unit_tokens,
        Path(path).name,
    )
