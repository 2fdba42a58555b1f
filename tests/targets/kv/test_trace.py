"""The Mooncake loader: every malformed input names its line, valid files round-trip, the tree holds."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest

from targets.base import WorkloadError
from targets.kv.trace import Trace, build_trace, load_mooncake, save_mooncake

DATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "data"
REAL = DATA / "kv" / "mooncake_conversation_train.jsonl"

# Out of time order on purpose (line 3 is earliest); block size 4 keeps the token arithmetic small.
TINY = [
    {"timestamp": 20, "input_length": 10, "output_length": 3, "hash_ids": [7, 8, 9]},
    {"timestamp": 20, "input_length": 5, "output_length": 0, "hash_ids": [7, 11]},
    {"timestamp": 1.5, "input_length": 7, "output_length": 2, "hash_ids": [7, 8]},
]


def write(tmp_path: Path, lines: list[str], name: str = "trace.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def assert_tree(trace: Trace) -> None:
    """Parents sit one level up, and in every request each block directly follows its parent."""
    assert np.all(trace.depth >= 1)
    roots = trace.parent < 0
    assert np.all(trace.depth[roots] == 1)
    assert np.all(trace.depth[trace.parent[~roots]] == trace.depth[~roots] - 1)
    before = np.empty_like(trace.blocks)
    before[1:] = trace.blocks[:-1]
    before[trace.offsets[:-1]] = -1
    assert np.array_equal(trace.parent[trace.blocks], before)
    first_seen = np.unique(trace.blocks, return_index=True)[1]
    assert np.all(np.diff(first_seen) > 0), "dense ids are not in first-seen order"
    assert np.all(np.diff(trace.timestamps_s) >= 0)
    assert np.all((trace.block_tokens >= 1) & (trace.block_tokens <= trace.block_size))


def test_tiny_file_builds_the_expected_arrays(tmp_path: Path) -> None:
    trace = load_mooncake(write(tmp_path, [json.dumps(r) for r in TINY]), block_size=4)
    assert (trace.n_requests, trace.n_blocks, trace.n_accesses) == (3, 4, 7)
    assert trace.timestamps_s.tolist() == [0.0015, 0.02, 0.02]
    assert trace.input_tokens.tolist() == [7, 10, 5]
    assert trace.output_tokens.tolist() == [2, 3, 0]
    assert trace.offsets.tolist() == [0, 2, 5, 7]
    assert trace.hash_ids.tolist() == [7, 8, 9, 11]
    assert trace.blocks.tolist() == [0, 1, 0, 1, 2, 0, 3]
    assert trace.parent.tolist() == [-1, 0, 1, 0]
    assert trace.depth.tolist() == [1, 2, 3, 2]
    assert trace.block_tokens.tolist() == [4, 4, 2, 1]  # block 8 is partial (3) once and full once
    assert (trace.block_size, trace.name) == (4, "trace")
    assert_tree(trace)


def test_save_then_load_round_trips(tmp_path: Path) -> None:
    trace = load_mooncake(write(tmp_path, [json.dumps(r) for r in TINY]), block_size=4)
    saved = tmp_path / "saved.jsonl"
    save_mooncake(trace, saved)
    rows = [json.loads(line) for line in saved.read_text(encoding="utf-8").splitlines()]
    assert rows == [TINY[2], TINY[0], TINY[1]]
    again = load_mooncake(saved, block_size=4)
    for field in ("timestamps_s", "input_tokens", "output_tokens", "offsets", "blocks", "parent", "depth"):
        assert np.array_equal(getattr(again, field), getattr(trace, field)), field
    assert np.array_equal(again.block_tokens, trace.block_tokens)
    assert np.array_equal(again.hash_ids, trace.hash_ids)


def test_blank_lines_and_a_bom_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    first, second = (json.dumps(r).encode() for r in TINY[:2])
    path.write_bytes(b"\xef\xbb\xbf" + first + b"\n\n  \r\n" + second)
    assert load_mooncake(path, block_size=4).n_requests == 2


GOOD = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}'


def req(**fields: object) -> str:
    """A valid request line with some fields replaced (a value of ... drops the key)."""
    row = {"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [0, 2]}
    row.update(fields)
    return json.dumps({k: v for k, v in row.items() if v is not ...})


BAD = {
    "invalid json": ('{"timestamp": 0,', "invalid JSON"),
    "not an object": ("[1, 2]", "expected a JSON object"),
    "missing timestamp": (req(timestamp=...), "missing key 'timestamp'"),
    "timestamp string": (req(timestamp="0"), "'timestamp'"),
    "timestamp negative": (req(timestamp=-1), "'timestamp'"),
    "timestamp bool": (req(timestamp=True), "'timestamp'"),
    "timestamp nan": (req(timestamp=...)[:-1] + ', "timestamp": NaN}', "'timestamp'"),
    "timestamp huge": (req(timestamp=10**400), "'timestamp'"),
    "input zero": (req(input_length=0), "'input_length'"),
    "input float": (req(input_length=600.0), "'input_length'"),
    "input bool": (req(input_length=True, hash_ids=[0]), "'input_length'"),
    "missing output": (req(output_length=...), "missing key 'output_length'"),
    "output negative": (req(output_length=-1), "'output_length'"),
    "output bool": (req(output_length=False), "'output_length'"),
    "output too big": (req(output_length=2**63), "'output_length'"),
    "hash_ids empty": (req(hash_ids=[]), "'hash_ids' must be a non-empty list"),
    "hash_ids not a list": (req(hash_ids="0 2"), "'hash_ids' must be a non-empty list"),
    "hash_ids negative": (req(hash_ids=[0, -2]), "'hash_ids' must be a non-empty list"),
    "hash_ids bool": (req(hash_ids=[0, True]), "'hash_ids' must be a non-empty list"),
    "hash_ids float": (req(hash_ids=[0, 2.0]), "'hash_ids' must be a non-empty list"),
    "hash_ids too big": (req(hash_ids=[0, 2**63]), "'hash_ids' must be a non-empty list"),
    "too few ids": (req(input_length=1025), "needs 3 blocks of 512"),
    "too many ids": (req(input_length=512), "needs 1 blocks of 512"),
    "id repeated in a request": (req(hash_ids=[0, 0]), "hash id 0 appears more than once"),
    "id with two parents": (req(hash_ids=[3, 1]), "follows hash id 3 but follows hash id 0 on line 1"),
    "child as a first block": (req(input_length=9, hash_ids=[1]), "is a first block but follows hash id 0"),
    "first id as a child": (req(hash_ids=[5, 0]), "follows hash id 5 but is a first block on line 1"),
}


@pytest.mark.parametrize("case", BAD)
def test_malformed_line_is_rejected_with_its_line_number(tmp_path: Path, case: str) -> None:
    bad_line, fragment = BAD[case]
    path = write(tmp_path, [GOOD, "", bad_line, GOOD])  # the blank line still counts: the bad one is line 3
    with pytest.raises(WorkloadError) as err:
        load_mooncake(path)
    message = str(err.value)
    assert message.startswith(f"{path} line 3: "), message
    assert fragment in message
    assert "\n" not in message


def test_non_utf8_line_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(GOOD.encode() + b'\n{"timestamp": "\xff"}\n')
    with pytest.raises(WorkloadError, match=r"trace\.jsonl line 2: not valid UTF-8"):
        load_mooncake(path)


def test_conflict_reports_the_later_request_in_time(tmp_path: Path) -> None:
    early = '{"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [3, 1]}'
    message = r"line 1: hash id 1 follows hash id 0 but follows hash id 3 on line 2"
    with pytest.raises(WorkloadError, match=message):
        load_mooncake(write(tmp_path, [req(timestamp=50, hash_ids=[0, 1]), early]))


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_trace_is_rejected(tmp_path: Path, content: str) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(WorkloadError, match=r"trace\.jsonl: the trace has no requests"):
        load_mooncake(path)


def test_missing_or_unreadable_file_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match=r"nope\.jsonl: cannot read the trace"):
        load_mooncake(tmp_path / "nope.jsonl")
    with pytest.raises(WorkloadError, match="cannot read the trace"):
        load_mooncake(tmp_path)


@pytest.mark.parametrize("block_size", [0, -512, True, 512.0])
def test_bad_block_size_is_rejected(tmp_path: Path, block_size: object) -> None:
    with pytest.raises(WorkloadError, match="block_size must be a positive integer"):
        load_mooncake(write(tmp_path, [GOOD]), block_size=block_size)  # type: ignore[arg-type]


def test_other_block_sizes_change_the_expected_id_count(tmp_path: Path) -> None:
    path = write(tmp_path, [GOOD])
    assert load_mooncake(path, block_size=300).n_accesses == 2
    with pytest.raises(WorkloadError, match="needs 1 blocks of 1024"):
        load_mooncake(path, block_size=1024)


def test_unwritable_save_path_is_rejected(tmp_path: Path) -> None:
    trace = load_mooncake(write(tmp_path, [GOOD]))
    with pytest.raises(WorkloadError, match="cannot write the trace"):
        save_mooncake(trace, tmp_path / "missing-dir" / "out.jsonl")


def test_slice_equals_building_the_sub_trace(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 0, "input_length": 1500, "output_length": 1, "hash_ids": [0, 1, 2]},
        {"timestamp": 5, "input_length": 1100, "output_length": 2, "hash_ids": [0, 1, 4]},
        {"timestamp": 9, "input_length": 1600, "output_length": 3, "hash_ids": [0, 1, 5, 6]},
        {"timestamp": 9, "input_length": 300, "output_length": 4, "hash_ids": [7]},
    ]
    trace = build_trace(enumerate(rows, 1), source="rows")
    part = trace.slice(1, 3)
    expected = build_trace(enumerate(rows[1:3], 1), source="rows")
    for field in ("timestamps_s", "input_tokens", "output_tokens", "offsets", "blocks", "parent", "depth"):
        assert np.array_equal(getattr(part, field), getattr(expected, field)), field
    assert np.array_equal(part.block_tokens, expected.block_tokens)
    assert part.hash_ids.tolist() == [0, 1, 4, 5, 6]
    assert part.timestamps_s.tolist() == [0.005, 0.009]
    assert_tree(part)
    for start, stop in [(2, 2), (-1, 2), (0, 5)]:
        with pytest.raises(ValueError):
            trace.slice(start, stop)


def test_real_conversation_trace_loads_fast_and_matches_an_independent_count() -> None:
    if not REAL.is_file():
        pytest.skip(f"shared data not present: {REAL}")
    rows = [json.loads(line) for line in REAL.read_text(encoding="utf-8").splitlines() if line.strip()]
    first_seen = dict.fromkeys(h for r in rows for h in r["hash_ids"])
    tokens: dict[int, int] = {}
    for r in rows:
        for i, h in enumerate(r["hash_ids"]):
            tokens[h] = max(tokens.get(h, 0), min(512, r["input_length"] - 512 * i))

    start = time.perf_counter()
    trace = load_mooncake(REAL)
    elapsed = time.perf_counter() - start

    assert elapsed < 1.0, f"loading took {elapsed:.2f} s"
    assert trace.n_requests == len(rows) == 7218
    assert trace.n_accesses == sum(len(r["hash_ids"]) for r in rows)
    assert trace.n_blocks == len(first_seen)
    assert trace.hash_ids.tolist() == list(first_seen)  # rows are already in time order
    assert trace.block_tokens.tolist() == [tokens[h] for h in first_seen]
    assert trace.input_tokens.sum() == sum(r["input_length"] for r in rows)
    assert math.isclose(trace.timestamps_s[-1], rows[-1]["timestamp"] / 1000)
    assert_tree(trace)
