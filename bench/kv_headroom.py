"""Where Belady's lead over LRU comes from on a kv window: knowing *whether* a block is used again, or *when*.

Run from the repository root: `python bench/kv_headroom.py [--trace PATH] [--requests 4836:7218]
[--capacities 1000 4000] [--quick] [--record]` (`--quick`: requests 1500:2000 of the shipped head of the
trace at 300 blocks; without the shared data beside the checkout only `--quick` or a `--trace` runs). The
default window is the held-out tail of the shipped train trace (the last third, as `crucible search
--holdout 0.33` cuts it). For each capacity it replays, in the target's own prefix cache:
LRU, S3-FIFO (the best classic policy there), Belady, and an offline oracle no candidate can be, "returns":
evict first the blocks never used again in the window, otherwise the least recently used. Each row is a block
hit rate, the share of the LRU-to-Belady gap it closes, and its ratio to S3-FIFO; the last line says what
1.5x S3-FIFO would need as a share of the gap. "returns" near Belady means the headroom is in predicting
which blocks (which conversations) come back at all, not when they do. How much of that foresight a policy
needs: "returns" blurred by noise, with the AUC at which each blur ranks "used again" over the window's block
accesses, and its hit rate; then the AUC for the same label of what a cache sees (the request's turns, its
last block, its first block). A next table says how often a
request of the window is followed by its conversation's next turn, by the turns the conversation had so far:
`turns` is what the cache sees of that. The last says how well what a request shows ranks "its next turn
follows" (AUC) before the window and in it: its conversation's turns and mean interval between them, its
blocks, its output tokens, and a logistic regression on all four fitted before the window (counted from the
trace's start, so with more history than a replay of the window alone has).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _bench
import numpy as np

from targets.base import Instance
from targets.kv.features import ORACLE_COLUMNS, ORACLE_NEXT_USE
from targets.kv.prefix_cache import POLICY_STATIC_KEY
from targets.kv.target import PRIORITY, KVTarget, load_workload, rates, replay
from targets.kv.trace import Trace
from verifiers.compiler import to_numba
from verifiers.program import Signature
from verifiers.static import check

TRAIN = _bench.DATA / "kv" / "mooncake_conversation_train.jsonl"
SHIPPED = _bench.SHIPPED_KV / "mooncake_conversation_head.jsonl"
QUICK = ("1500:2000", [300])
ORACLE = Signature(name=PRIORITY.name, features=(*PRIORITY.features, ORACLE_NEXT_USE.name))
RETURNS = '''"""Evict first what is never used again in the window; otherwise the least recently used."""


def priority(b, p):
    return (b.next_use < 1e11) * 1e12 + b.last_access
'''
"""next_use is the trace position of the block's next access, 1e12 when there is none."""
NOISE_HASH = 0.6180339887
BLURRED = '''"""The returns oracle blurred: whether the block is used again, plus noise of weight {weight}."""


def priority(b, p):
    return (b.next_use < 1e11) + {weight} * ((b.last_access * {hash}) % 1.0)
'''
"""The noise is a golden-ratio hash of the block's latest access time (whole seconds in Mooncake traces), so
the blocks of one request share it and it does not follow recency; ties go to the least recent block."""
BLUR_WEIGHTS = (1.25, 2.0, 3.0, 5.0)


def reused(trace: Trace, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per block access of the window: whether the block is used again in it, its request, its position."""
    lo, hi = int(trace.offsets[start]), int(trace.offsets[stop])
    blocks = trace.blocks[lo:hi]
    _, last = np.unique(blocks[::-1], return_index=True)
    again = np.ones(blocks.size, dtype=bool)
    again[blocks.size - 1 - last] = False
    lengths = np.diff(trace.offsets[start : stop + 1])
    request = np.repeat(np.arange(start, stop), lengths)
    return again, request, np.arange(blocks.size) - (trace.offsets[request] - lo)


def blurred_auc(trace: Trace, accesses: tuple[np.ndarray, ...], weight: float) -> float:
    """AUC of the blurred oracle's score for "used again in the window", over the window's block accesses."""
    again, request, _ = accesses
    return auc(again + weight * ((trace.timestamps_s[request] * NOISE_HASH) % 1.0), again)


def visible_auc(trace: Trace, accesses: tuple[np.ndarray, ...], turns: np.ndarray) -> dict[str, float]:
    """AUC for the same label of what a cache sees: the request's turns so far, then with its last block
    lowest (a next turn never reuses it) and every first block highest (every request passes it)."""
    again, request, position = accesses
    score = turns[request]
    last_lowest = np.where(position == np.diff(trace.offsets)[request] - 1, 0.0, score)
    first_highest = np.where(position == 0, np.inf, last_lowest)
    return {
        "turns": auc(score, again),
        "turns, last block lowest": auc(last_lowest, again),
        "  and first block highest": auc(first_highest, again),
    }


def _oracle_rate(instance: Instance, source: str) -> float:
    key = to_numba(check(source, [ORACLE]), PRIORITY.name, ORACLE_COLUMNS)
    return rates(replay(instance, key, np.zeros(0), POLICY_STATIC_KEY))["block_hit_rate"]


def conversations(trace: Trace, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per request before `stop`: its conversation's turns so far, the mean interval between them (0 for a
    first turn), and whether a next turn follows before `stop`.

    A request is the next turn of the latest earlier one whose blocks, all but the last, it starts with (more
    than a first block): the rule of the kv target's `turns` feature.
    """
    ends: dict[tuple[int, ...], int] = {}
    turns, gaps = np.ones(stop), np.zeros(stop)
    followed = np.zeros(stop, dtype=bool)
    for r in range(stop):
        blocks = tuple(int(b) for b in trace.blocks[trace.offsets[r] : trace.offsets[r + 1]])
        earlier = next((ends[blocks[:n]] for n in range(len(blocks), 1, -1) if blocks[:n] in ends), None)
        if earlier is not None:
            turns[r] = turns[earlier] + 1
            interval = trace.timestamps_s[r] - trace.timestamps_s[earlier]
            gaps[r] = gaps[earlier] + (interval - gaps[earlier]) / (turns[r] - 1)
            followed[earlier] = True
        if len(blocks) > 2:
            ends[blocks[:-1]] = r
    return turns, gaps, followed


def auc(score: np.ndarray, positive: np.ndarray) -> float:
    """The chance that a random positive scores above a random negative (ties count half)."""
    _, group, sizes = np.unique(score, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(sizes) - (sizes - 1) / 2)[group]  # tied scores share their mean rank
    n_pos, n_neg = positive.sum(), (~positive).sum()
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def logistic(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Weights of a logistic regression of y on standardized x (Newton steps, a little ridge)."""
    z = np.c_[np.ones(len(x)), x]
    w = np.zeros(z.shape[1])
    for _ in range(30):
        p = 1.0 / (1.0 + np.exp(-z @ w))
        hessian = (z * (p * (1 - p))[:, None]).T @ z + 1e-3 * np.eye(len(w))
        w -= np.linalg.solve(hessian, z.T @ (p - y) + 1e-3 * w)
    return w


def predictability(
    trace: Trace, start: int, stop: int, turns: np.ndarray, gaps: np.ndarray, followed: np.ndarray
) -> dict[str, tuple[float, float]]:
    """AUC of each request feature for "a next turn follows", on the requests before `start` and in the
    window, and of a logistic regression on all of them fitted before `start` and scored on the window."""
    n_blocks = np.diff(trace.offsets[: stop + 1]).astype(float)
    features = {
        "turns": turns,
        "turn_gap": gaps,
        "blocks": n_blocks,
        "output_tokens": trace.output_tokens[:stop].astype(float),
    }
    before, window = slice(0, start), slice(start, stop)

    def both(score: np.ndarray) -> tuple[float, float]:
        return auc(score[before], followed[before]), auc(score[window], followed[window])

    table = {name: both(x) for name, x in features.items()}
    x = np.log1p(np.column_stack(tuple(features.values())))
    x = (x - x[before].mean(0)) / (x[before].std(0) + 1e-12)
    w = logistic(x[before], followed[before].astype(float))
    table["all four, fitted before"] = both(np.c_[np.ones(stop), x] @ w)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRAIN)
    parser.add_argument("--requests", default="4836:7218", help="START:STOP window of the trace's requests")
    parser.add_argument("--capacities", type=int, nargs="+", default=[1000, 4000])
    args, session = _bench.start(parser)
    if session.quick:
        args.requests, args.capacities = QUICK
    args.trace = _bench.data_file(args.trace, session.quick, SHIPPED)
    target = KVTarget()
    start, stop = (int(x) for x in args.requests.split(":"))
    trace = load_workload(args.trace)
    accesses = reused(trace, start, stop)
    turns, gaps, followed = conversations(trace, stop)
    blur_aucs = {weight: blurred_auc(trace, accesses, weight) for weight in BLUR_WEIGHTS}
    policies, blurred = [], []
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
            policies.append(
                {
                    "capacity": capacity,
                    "policy": name,
                    "hit rate": rate,
                    "gap closed": gap,
                    "x s3fifo": rate / classic,
                }
            )
        aim = 1.5 * classic
        print(f"  1.5x s3fifo = hit rate {aim:.4f}: {(aim - low) / (high - low):.3f} of the gap")
        print("  returns (oracle) blurred by noise of weight w (AUC: how well it ranks 'used again'):")
        for weight, score in blur_aucs.items():
            rate = _oracle_rate(instance, BLURRED.format(weight=weight, hash=NOISE_HASH))
            print(f"    w {weight:<5} AUC {score:.3f}  hit rate {rate:.4f}  x s3fifo {rate / classic:.3f}")
            blurred.append(
                {
                    "capacity": capacity,
                    "noise weight": weight,
                    "AUC": score,
                    "hit rate": rate,
                    "x s3fifo": rate / classic,
                }
            )
    print(f"what a cache sees, ranking 'used again' over the block accesses of {start}:{stop} (AUC):")
    visible = visible_auc(trace, accesses, turns)
    for name, score in visible.items():
        print(f"  {name:<26} {score:.3f}")
    next_turns = []
    print(f"next turn of a request in {start}:{stop}, by its conversation's turns so far (4: four or more):")
    for k in range(1, 5):
        mask = np.minimum(turns[start:stop], 4) == k
        share = followed[start:stop][mask].mean()
        print(f"  turns {k}: {mask.sum()} requests, {share:.0%} followed by a next turn")
        next_turns.append({"turns so far": k, "requests": int(mask.sum()), "followed by a next turn": share})
    ranked = []
    if start > 0:
        print("how well a request's features rank 'a next turn follows' (AUC; 0.5 is chance, 1 is exact):")
        print(f"  {'feature':<24} 0:{start}  {start}:{stop}")
        for name, (head, window) in predictability(trace, start, stop, turns, gaps, followed).items():
            print(f"  {name:<24} {head:.3f}   {window:.3f}")
            ranked.append({"feature": name, f"AUC 0:{start}": head, f"AUC {start}:{stop}": window})
    session.save(
        {
            "window": f"requests {start}:{stop} of {Path(args.trace).name}",
            "policies": policies,
            "blurred returns oracle": blurred,
            "what a cache sees (AUC of used again)": [{"score": k, "AUC": v} for k, v in visible.items()],
            "next turns": next_turns,
            "a next turn follows (AUC)": ranked,
        }
    )


if __name__ == "__main__":
    main()
