"""A serving workload: a prefix-block trace (Mooncake's format, or a generator) as the fleet replays it."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

import numpy as np

from targets.base import WorkloadError
from targets.batching.trace import Requests
from targets.kv.target import load_workload as load_trace
from targets.kv.trace import Trace

from .fleet import Prefixes

SHIPPED_WORKLOAD = "mooncake_conversation_train.jsonl"
AFFINITY_BLOCKS = 2
"""A hashing router hashes a prompt's first two blocks (the id of the second is a hash of both): on
Mooncake's traces every prompt shares its first block, a system prompt, so hashing it alone sends every
request to one instance; two blocks (1,024 tokens) tell the conversations apart."""


def shipped_workload_path() -> Path:
    return Path(str(resources.files("targets.serving") / "workloads" / SHIPPED_WORKLOAD))


def requests_of(workload: str, window: tuple[int, int] | None) -> tuple[Requests, Prefixes, int]:
    """The window's requests with time from its first arrival, their prompts as blocks, and the trace's
    block size in tokens; WorkloadError on a trace the fleet cannot replay."""
    return _cut(load_trace(workload), window)


def request_count(workload: str) -> int:
    return load_trace(workload).n_requests


@functools.lru_cache(maxsize=8)
def _cut(trace: Trace, window: tuple[int, int] | None) -> tuple[Requests, Prefixes, int]:
    if window is not None:
        trace = trace.slice(*window)
    if trace.n_requests == 0:
        raise WorkloadError(f"{trace.name}: no requests")
    outputs = np.maximum(trace.output_tokens, 1)  # the prefill emits the first token
    t = trace.timestamps_s
    requests = Requests(t - t[0], np.maximum(trace.input_tokens, 1), outputs, trace.name)
    lengths = np.diff(trace.offsets)
    second = trace.offsets[:-1] + np.clip(lengths, 1, AFFINITY_BLOCKS) - 1
    first = trace.hash_ids[trace.blocks[np.minimum(second, trace.n_accesses - 1)]]
    prefixes = Prefixes(
        np.ascontiguousarray(trace.offsets, dtype=np.int64),
        np.ascontiguousarray(trace.blocks, dtype=np.int64),
        np.ascontiguousarray(trace.parent, dtype=np.int64),
        np.ascontiguousarray(trace.depth, dtype=np.int64),
        np.ascontiguousarray(first, dtype=np.int64),
    )
    return requests, prefixes, int(trace.block_size)
