"""Where Belady's lead over LRU comes from on a kv window: knowing *whether* a block is used again, or *when*.

Run from the repository root: `python bench/kv_headroom.py [--trace PATH] [--requests 4836:7218]
[--capacities 1000 4000]`. The default window is the held-out tail of the shipped train trace (the last third,
as `crucible search --holdout 0.33` cuts it). For each capacity it replays, in the target's own prefix cache:
LRU, S3-FIFO (the best classic policy there), Belady, and an offline oracle no candidate can be, "returns":
evict first the blocks never used again in the window, otherwise the least recently used. Each row is a block
hit rate, the share of the LRU-to-Belady gap it closes, and its ratio to S3-FIFO; the last line says what
1.5x S3-FIFO would need as a share of the gap. "returns" near Belady means the headroom is in predicting
which blocks (which conversations) come back at all, not when they do. A last table says how often a
request of the window is followed by its conversation's next turn, by the turns the conversation had so far:
`turns` is what the cache sees of that.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np

from targets.base import Instance
from targets.kv.features import ORACLE_COLUMNS, ORACLE_NEXT_USE
from targets.kv.prefix_cache import POLICY_STATIC_KEY
from targets.kv.target import PRIORITY, KVTarget, load_workload, rates, replay
from targets.kv.trace import Trace
from verifiers.compiler import to_numba
from verifiers.program import Signature
from verifiers.static import check

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
TRAIN = DATA / "kv" / "mooncake_conversation_train.jsonl"
ORACLE = Signature(name=PRIORITY.name, features=(*PRIORITY.features, ORACLE_NEXT_USE.name))
RETURNS = '''"""Evict first what is never used again in the window; otherwise the least recently used."""


def priority(b, p):
    return (b.next_use < 1e11) * 1e12 + b.last_access
'''
"""next_use is the trace position of the block's next access, 1e12 when there is none."""


def _oracle_rate(instance: Instance, source: str) -> float:
    key = to_numba(check(source, [ORACLE]), PRIORITY.name, ORACLE_COLUMNS)
    return rates(replay(instance, key, np.zeros(0), POLICY_STATIC_KEY))["block_hit_rate"]


def next_turns(trace: Trace, start: int, stop: int) -> dict[int, tuple[int, int]]:
    """Per turns so far (4: four or more): requests in the window, how many had a next turn before `stop`.

    A request is the next turn of the latest earlier one whose blocks, all but the last, it starts with (more
    than a first block): the rule of the kv target's `turns` feature.
    """
    ends: dict[tuple[int, ...], int] = {}
    turns: list[int] = []
    followed: set[int] = set()
    for r in range(stop):
        blocks = tuple(int(b) for b in trace.blocks[trace.offsets[r] : trace.offsets[r + 1]])
        earlier = next((ends[blocks[:n]] for n in range(len(blocks), 1, -1) if blocks[:n] in ends), None)
        turns.append(1 if earlier is None else turns[earlier] + 1)
        if earlier is not None:
            followed.add(earlier)
        if len(blocks) > 2:
            ends[blocks[:-1]] = r
    seen = Counter(min(turns[r], 4) for r in range(start, stop))
    again = Counter(min(turns[r], 4) for r in range(start, stop) if r in followed)
    return {k: (seen[k], again[k]) for k in sorted(seen)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(TRAIN))
    parser.add_argument("--requests", default="4836:7218", help="START:STOP window of the trace's requests")
    parser.add_argument("--capacities", type=int, nargs="+", default=[1000, 4000])
    args = parser.parse_args()
    target = KVTarget()
    start, stop = (int(x) for x in args.requests.split(":"))
    for capacity in args.capacities:
        instance = Instance(args.trace, {"capacity": capacity, "requests": [start, stop]})
        lru = target.evaluate(check(target.baselines()["lru"], target.signatures), instance, {})
        rows = {
            "lru": lru["block_hit_rate"],
            "s3fifo": target.evaluate_builtin("s3fifo", instance)["block_hit_rate"],
            "returns (oracle)": _oracle_rate(instance, RETURNS),
            "belady": target.evaluate_builtin("belady", instance)["block_hit_rate"],
        }
        low, high, classic = rows["lru"], rows["belady"], rows["s3fifo"]
        print(f"capacity {capacity}, requests {start}:{stop} of {Path(args.trace).name}")
        for name, rate in rows.items():
            gap = (rate - low) / (high - low)
            print(f"  {name:<18} hit rate {rate:.4f}  gap closed {gap:6.3f}  x s3fifo {rate / classic:.3f}")
        aim = 1.5 * classic
        print(f"  1.5x s3fifo = hit rate {aim:.4f}: {(aim - low) / (high - low):.3f} of the gap")
    print(f"next turn of a request in {start}:{stop}, by its conversation's turns so far (4: four or more):")
    for k, (seen, again) in next_turns(load_workload(args.trace), start, stop).items():
        print(f"  turns {k}: {seen} requests, {again / seen:.0%} followed by a next turn")


if __name__ == "__main__":
    main()
