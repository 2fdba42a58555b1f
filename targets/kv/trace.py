"""Prefix-block request traces: the Mooncake JSONL format, validated and turned into flat arrays."""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from itertools import chain
from pathlib import Path

import numpy as np

from targets.base import WorkloadError

_INT64 = 2**63  # counts and ids must fit the int64 arrays
_MAX_MS = 1e18  # no real timestamp is this late (30 million years); NaN and infinity fail the check too


@dataclass(frozen=True, eq=False)
class Trace:
    """A prefix-block request trace as flat arrays, ready for the compiled simulator."""

    timestamps_s: np.ndarray  # float64[n_requests], seconds, non-decreasing (requests sorted stably by time)
    input_tokens: np.ndarray  # int64[n_requests]
    output_tokens: np.ndarray  # int64[n_requests]
    offsets: np.ndarray  # int64[n_requests + 1]; request r uses blocks[offsets[r]:offsets[r + 1]]
    blocks: np.ndarray  # int64[n_accesses]; dense block indices 0..n_blocks-1, in first-seen order
    parent: np.ndarray  # int64[n_blocks]; dense index of the parent block, -1 for a first block
    depth: np.ndarray  # int64[n_blocks]; 1 for a first block
    block_tokens: np.ndarray  # int64[n_blocks]; tokens held (a partial last block fewer; max over sightings)
    hash_ids: np.ndarray  # int64[n_blocks]; the original ids
    block_size: int = 512
    name: str = ""

    @property
    def n_requests(self) -> int:
        return int(self.timestamps_s.size)

    @property
    def n_blocks(self) -> int:
        return int(self.hash_ids.size)

    @property
    def n_accesses(self) -> int:
        return int(self.blocks.size)

    def slice(self, start: int, stop: int) -> Trace:
        """Requests [start, stop) as a trace of their own, so train and held-out parts can be cut from one."""
        if not 0 <= start < stop <= self.n_requests:
            raise ValueError(f"slice [{start}, {stop}) is empty or outside 0..{self.n_requests}")
        lo, hi = int(self.offsets[start]), int(self.offsets[stop])
        return _assemble(
            self.timestamps_s[start:stop].copy(),
            self.input_tokens[start:stop].copy(),
            self.output_tokens[start:stop].copy(),
            self.offsets[start : stop + 1] - lo,
            self.hash_ids[self.blocks[lo:hi]],
            self.block_size,
            f"{self.name}[{start}:{stop}]",
        )


def whole_blocks(trace: Trace, block_tokens: int) -> Trace:
    """The same block structure with every block holding `block_tokens` tokens, outputs scaled alike.

    Scales a trace down for a small real engine: hits, evictions and the prefix tree stay exactly those
    of the original, while every prompt shrinks to whole blocks of the new size.
    """
    lengths = np.diff(trace.offsets)
    scale = trace.block_size / block_tokens
    return replace(
        trace,
        input_tokens=lengths * block_tokens,
        output_tokens=np.ceil(trace.output_tokens / scale).astype(np.int64),
        block_tokens=np.full(trace.n_blocks, block_tokens, dtype=np.int64),
        block_size=block_tokens,
        name=f"{trace.name}(x{block_tokens})",
    )


def load_mooncake(path: str | os.PathLike[str], block_size: int = 512) -> Trace:
    """Read a Mooncake JSONL trace; any defect is a WorkloadError naming the file and line."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise WorkloadError(f"{path}: cannot read the trace ({e.strerror or e})") from None
    records = _numbered_objects(data, str(path))
    return build_trace(records, source=str(path), block_size=block_size, name=path.stem)


def save_mooncake(trace: Trace, path: str | os.PathLike[str]) -> None:
    """Write a trace in the Mooncake format (ms timestamps, original ids) so users can read generated ones."""
    ids = trace.hash_ids[trace.blocks].tolist()
    offsets = trace.offsets.tolist()
    columns = (trace.timestamps_s.tolist(), trace.input_tokens.tolist(), trace.output_tokens.tolist())
    lines = [
        json.dumps(
            {
                "timestamp": _milliseconds(t),
                "input_length": n_in,
                "output_length": n_out,
                "hash_ids": ids[offsets[r] : offsets[r + 1]],
            }
        )
        + "\n"
        for r, (t, n_in, n_out) in enumerate(zip(*columns, strict=True))
    ]
    try:
        Path(path).write_text("".join(lines), encoding="utf-8")
    except OSError as e:
        raise WorkloadError(f"{path}: cannot write the trace ({e.strerror or e})") from None


def build_trace(
    records: Iterable[tuple[int, object]], *, source: str, block_size: int = 512, name: str = ""
) -> Trace:
    """Validate numbered Mooncake-style request objects into a trace; shared by the loader and generators."""
    if type(block_size) is not int or block_size < 1:
        raise WorkloadError(f"{source}: block_size must be a positive integer, got {_brief(block_size)}")
    lines: list[int] = []
    times_ms: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    ids: list[list[int]] = []
    for line, obj in records:
        t, n_in, n_out, h = _request(obj, f"{source} line {line}", block_size)
        lines.append(line)
        times_ms.append(t)
        inputs.append(n_in)
        outputs.append(n_out)
        ids.append(h)
    if not lines:
        raise WorkloadError(f"{source}: the trace has no requests")
    times = np.asarray(times_ms, dtype=np.float64)
    order = np.argsort(times, kind="stable")
    offsets = np.zeros(order.size + 1, dtype=np.int64)
    np.cumsum(np.fromiter((len(ids[r]) for r in order), np.int64, order.size), out=offsets[1:])
    flat = np.fromiter(chain.from_iterable(ids[r] for r in order), np.int64, int(offsets[-1]))
    trace = _assemble(
        times[order] / 1000.0,
        np.asarray(inputs, dtype=np.int64)[order],
        np.asarray(outputs, dtype=np.int64)[order],
        offsets,
        flat,
        block_size,
        name,
    )
    _check_tree(trace, np.asarray(lines)[order], source)
    return trace


def _numbered_objects(data: bytes, source: str) -> Iterator[tuple[int, object]]:
    """Decode JSONL lazily so the first bad line, whatever its defect, is the one reported."""
    for line, raw in enumerate(data.removeprefix(codecs.BOM_UTF8).split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise WorkloadError(f"{source} line {line}: not valid UTF-8 (byte {e.start + 1})") from None
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise WorkloadError(f"{source} line {line}: invalid JSON ({e.msg} at column {e.colno})") from None
        yield line, obj


def _request(obj: object, where: str, block_size: int) -> tuple[float, int, int, list[int]]:
    """Check one request object field by field; bools are rejected where integers are expected."""
    if not isinstance(obj, dict):
        raise WorkloadError(f"{where}: expected a JSON object, got {_brief(obj)}")
    t = _field(obj, "timestamp", where)
    if type(t) not in (int, float) or not 0 <= t < _MAX_MS:
        raise WorkloadError(f"{where}: 'timestamp' must be a non-negative number of ms, got {_brief(t)}")
    n_in = _field(obj, "input_length", where)
    if type(n_in) is not int or not 1 <= n_in < _INT64:
        raise WorkloadError(f"{where}: 'input_length' must be an integer >= 1, got {_brief(n_in)}")
    n_out = _field(obj, "output_length", where)
    if type(n_out) is not int or not 0 <= n_out < _INT64:
        raise WorkloadError(f"{where}: 'output_length' must be an integer >= 0, got {_brief(n_out)}")
    h = _field(obj, "hash_ids", where)
    if type(h) is not list or not h or not all(type(i) is int and 0 <= i < _INT64 for i in h):
        raise WorkloadError(f"{where}: 'hash_ids' must be a non-empty list of non-negative integers")
    need = -(-n_in // block_size)
    if len(h) != need:
        raise WorkloadError(
            f"{where}: 'hash_ids' has {len(h)} ids but input_length {n_in} needs {need} "
            f"blocks of {block_size} tokens"
        )
    if len(set(h)) != len(h):
        seen: set[int] = set()
        for i in h:
            if i in seen:
                raise WorkloadError(f"{where}: hash id {i} appears more than once in one request")
            seen.add(i)
    return t, n_in, n_out, h


def _field(obj: dict[str, object], key: str, where: str) -> object:
    """A required key, or a one-line error naming it."""
    if key not in obj:
        raise WorkloadError(f"{where}: missing key '{key}'")
    return obj[key]


def _brief(value: object) -> str:
    """A short one-line rendering of a bad value for an error message."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _milliseconds(t_s: float) -> int | float:
    """Seconds back to ms, as an integer when it is one (Mooncake files use integer ms)."""
    ms = round(t_s * 1000.0, 6)
    return int(ms) if ms.is_integer() else ms


def _assemble(
    timestamps_s: np.ndarray,
    input_tokens: np.ndarray,
    output_tokens: np.ndarray,
    offsets: np.ndarray,
    ids: np.ndarray,
    block_size: int,
    name: str,
) -> Trace:
    """Densify ids in first-seen order and derive the tree from each block's first sighting."""
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    by_first = np.argsort(first)
    dense = np.empty_like(by_first)
    dense[by_first] = np.arange(by_first.size)
    blocks = dense[inverse].astype(np.int64)
    first_seen = first[by_first]
    lengths = np.diff(offsets)
    position = np.arange(ids.size, dtype=np.int64) - np.repeat(offsets[:-1], lengths)
    tokens = np.minimum(block_size, np.repeat(input_tokens, lengths) - position * block_size)
    block_tokens = np.zeros(by_first.size, dtype=np.int64)
    np.maximum.at(block_tokens, blocks, tokens)
    return Trace(
        timestamps_s=timestamps_s,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        offsets=offsets,
        blocks=blocks,
        parent=np.where(position[first_seen] == 0, -1, blocks[first_seen - 1]).astype(np.int64),
        depth=position[first_seen] + 1,
        block_tokens=block_tokens,
        hash_ids=ids[first_seen],
        block_size=block_size,
        name=name,
    )


def _check_tree(trace: Trace, lines: np.ndarray, source: str) -> None:
    """Each sighting of an id must repeat the parent of its first one, or the ids are not prefix hashes."""
    expected = np.empty_like(trace.blocks)
    expected[1:] = trace.blocks[:-1]
    expected[trace.offsets[:-1]] = -1
    bad = np.flatnonzero(trace.parent[trace.blocks] != expected)
    if bad.size == 0:
        return
    k = int(bad[0])
    b = int(trace.blocks[k])
    first = int(np.flatnonzero(trace.blocks == b)[0])
    here, there = (int(np.searchsorted(trace.offsets, a, side="right")) - 1 for a in (k, first))

    def follows(parent: int) -> str:
        return "is a first block" if parent < 0 else f"follows hash id {trace.hash_ids[parent]}"

    raise WorkloadError(
        f"{source} line {lines[here]}: hash id {trace.hash_ids[b]} {follows(int(expected[k]))} but "
        f"{follows(int(trace.parent[b]))} on line {lines[there]}; ids must be prefix hashes forming a tree"
    )
