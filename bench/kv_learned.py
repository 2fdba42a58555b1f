"""How far a key fitted to Belady's answers on the head sees into the tail: a learned key (as LRB learns one).

Run from the repository root: `python bench/kv_learned.py [--trace PATH] [--requests 4836:7218] [--capacities
1000 4000] [--horizons 30 300 900] [--network] [--quick] [--record]` (`--quick`: requests 1500:2000 of the
shipped head of the trace, 300 blocks, one horizon, two passes with `--network`). For each capacity it replays
the trace up to the window's end under Perfect LFU and keeps every block state the mechanism scores: the
features a candidate may read (the clock features aside, as the proposer leaves them) and the block's next
use, which only Belady may read. A state is labelled "used again within H seconds". A logistic regression on
the log1p of the features, fitted on the states before the window (the head), is scored by AUC on the head and
on the window, then written as a kv program (a weighted sum of log1p terms, checked like any candidate) and
replayed on the head and on the warm window, against Perfect LFU and the LRU-to-Belady gap there. With
`--network` a two-layer network (torch) is fitted to the same states for a few passes, and each pass's AUC
says what a nonlinear model of these features ranks (reading the best pass on the window is hindsight, which
flatters it). What this shows: how well Belady's choices can be imitated from what a cache sees, not a bound
on every policy (a key also orders by when, and states are sampled under one policy).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _bench
import numpy as np
from kv_headroom import QUICK, SHIPPED, TRAIN, auc, logistic
from numba import njit

from targets.base import Instance
from targets.kv.features import BLOCK_FEATURES, N_COLUMNS, ORACLE_COLUMNS, ORACLE_NEXT_USE
from targets.kv.prefix_cache import POLICY_KEY
from targets.kv.target import KVTarget, load_workload, replay_trace
from targets.kv.trace import Trace
from verifiers.compiler import SIGNATURE
from verifiers.static import check

_CALLS, _ROWS, _LIMIT, _DATA = 0, 1, 2, 3
"""The recording key's params: calls so far, states kept, room for states, then the states row by row."""
_ACCESSES = ORACLE_COLUMNS["accesses"]
_NEXT_USE = ORACLE_COLUMNS[ORACLE_NEXT_USE.name]
READ = tuple(f.name for f in BLOCK_FEATURES.features if not f.clock)


@njit(SIGNATURE)
def _recording_perfect_lfu(X, row, params):  # pragma: no cover - compiled
    """Perfect LFU (the mechanism breaks ties by the older access) that copies each state it scores into its
    own params."""
    kept = int(params[_ROWS])
    if kept < int(params[_LIMIT]):
        start = _DATA + kept * N_COLUMNS
        for j in range(N_COLUMNS):
            params[start + j] = X[row, j]
        params[_ROWS] = kept + 1.0
    params[_CALLS] += 1.0
    return X[row, _ACCESSES]


def scored_states(trace: Trace, capacity: int, limit: int) -> np.ndarray:
    """Every block state Perfect LFU scores over the trace (the first `limit`), one row of columns each."""
    params = np.zeros(_DATA + limit * N_COLUMNS)
    params[_LIMIT] = limit
    replay_trace(trace, capacity, _recording_perfect_lfu, params, POLICY_KEY)
    if params[_CALLS] > limit:
        raise SystemExit(f"{int(params[_CALLS])} states scored, room for {limit}: raise --limit")
    return params[_DATA : _DATA + int(params[_ROWS]) * N_COLUMNS].reshape(-1, N_COLUMNS)


def seconds_to_next_use(trace: Trace, states: np.ndarray) -> np.ndarray:
    """Seconds from each state to its block's next use (inf when none); next_use is a trace position."""
    position = states[:, _NEXT_USE]
    never = position >= 1e11
    request = np.searchsorted(trace.offsets, np.where(never, 0, position), side="right") - 1
    return np.where(never, np.inf, trace.timestamps_s[request]) - states[:, ORACLE_COLUMNS["now"]]


def as_program(weights: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> str:
    """The fitted regression as a kv key (its log-odds: a higher score is kept longer)."""
    terms = [f"{weights[0]:.6g}"] + [
        f"{w / s:.6g} * (log1p(max(b.{name}, 0.0)) - {m:.6g})"
        for name, w, m, s in zip(READ, weights[1:], mean, scale, strict=True)
    ]
    body = "\n        + ".join(terms)
    doc = '"""Logistic regression fitted to Belady on the head."""'
    return f"{doc}\n\n\ndef priority(b, p):\n    return (\n        {body}\n    )\n"


def network_aucs(
    z: np.ndarray, label: np.ndarray, head: np.ndarray, passes: int = 6
) -> list[tuple[float, float]]:
    """AUC on the head and on the window after each pass of a two-layer network fitted on the head."""
    import torch

    torch.manual_seed(0)
    x, y = torch.tensor(z, dtype=torch.float32), torch.tensor(label, dtype=torch.float32)
    net = torch.nn.Sequential(
        torch.nn.Linear(z.shape[1], 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 1),
    )
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    rows, aucs = np.flatnonzero(head), []
    for n in range(passes):
        order = np.random.default_rng(n).permutation(rows)
        for i in range(0, len(order), 2048):
            batch = order[i : i + 2048]
            loss = torch.nn.functional.binary_cross_entropy_with_logits(net(x[batch]).squeeze(1), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            score = net(x).squeeze(1).numpy()
        aucs.append((auc(score[head], label[head]), auc(score[~head], label[~head])))
    return aucs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRAIN)
    parser.add_argument("--requests", default="4836:7218", help="START:STOP: the head is 0:START")
    parser.add_argument("--capacities", type=int, nargs="+", default=[1000, 4000])
    parser.add_argument("--horizons", type=float, nargs="+", default=[30.0, 300.0, 900.0])
    parser.add_argument("--limit", type=int, default=2_000_000, help="most block states kept")
    parser.add_argument("--network", action="store_true", help="also fit a two-layer network (needs torch)")
    args, session = _bench.start(parser)
    passes = 6
    if session.quick:
        (args.requests, args.capacities), args.horizons, passes = QUICK, [300.0], 2
    args.trace = _bench.data_file(args.trace, session.quick, SHIPPED)
    start, stop = (int(x) for x in args.requests.split(":"))
    target, trace = KVTarget(), load_workload(args.trace)
    baselines = target.baselines()
    head_end = trace.timestamps_s[start]
    columns = [ORACLE_COLUMNS[name] for name in READ]
    rows = []

    def hit_rate(source: str, capacity: int, window: tuple[int, int], warm: bool) -> float:
        config = {"capacity": capacity, "requests": list(window), **({"warm": True} if warm else {})}
        program = check(source, target.signatures)
        return target.evaluate(program, Instance(args.trace, config), {})["block_hit_rate"]

    for capacity in args.capacities:
        states = scored_states(trace.slice(0, stop), capacity, args.limit)
        head = states[:, ORACLE_COLUMNS["now"]] < head_end
        wait = seconds_to_next_use(trace, states)
        x = np.log1p(np.maximum(states[:, columns], 0.0))
        mean, scale = x[head].mean(0), x[head].std(0) + 1e-9
        z = (x - mean) / scale
        tail_window = Instance(args.trace, {"capacity": capacity, "requests": [start, stop], "warm": True})
        lru = hit_rate(baselines["lru"], capacity, (start, stop), warm=True)
        belady = target.evaluate_builtin("belady", tail_window)["block_hit_rate"]
        lfu_head = hit_rate(baselines["perfect_lfu"], capacity, (0, start), warm=False)
        lfu_tail = hit_rate(baselines["perfect_lfu"], capacity, (start, stop), warm=True)
        print(
            f"capacity {capacity}: {head.sum()} states before request {start}, {(~head).sum()} in "
            f"{start}:{stop}; Perfect LFU {lfu_head:.4f} on the head, {lfu_tail:.4f} on the warm window "
            f"(LRU {lru:.4f}, Belady {belady:.4f})"
        )
        for horizon in args.horizons:
            label = wait < horizon
            weights = logistic(z[head], label[head].astype(float))
            score = np.c_[np.ones(len(z)), z] @ weights
            source = as_program(weights, mean, scale)
            on_head = hit_rate(source, capacity, (0, start), warm=False)
            on_tail = hit_rate(source, capacity, (start, stop), warm=True)
            print(
                f"  used again within {horizon:g} s ({label[~head].mean():.0%} of the window's states): "
                f"AUC head {auc(score[head], label[head]):.3f}, "
                f"window {auc(score[~head], label[~head]):.3f}; "
                f"as a key {on_head:.4f} head ({on_head / lfu_head:.3f}x Perfect LFU), {on_tail:.4f} window "
                f"({on_tail / lfu_tail:.3f}x, gap closed {(on_tail - lru) / (belady - lru):.3f})"
            )
            row = {
                "capacity": capacity,
                "used again within s": horizon,
                "AUC head": auc(score[head], label[head]),
                "AUC window": auc(score[~head], label[~head]),
                "key on head": on_head,
                "x Perfect LFU (head)": on_head / lfu_head,
                "key on window": on_tail,
                "x Perfect LFU (window)": on_tail / lfu_tail,
                "gap closed": (on_tail - lru) / (belady - lru),
            }
            if args.network:
                aucs = network_aucs(z, label, head, passes)
                shown = ", ".join(f"{h:.3f}/{w:.3f}" for h, w in aucs)
                print(f"    network, AUC head/window after each pass: {shown}")
                row["network AUC head/window per pass"] = shown
            rows.append(row)
    session.save({"window": f"requests {start}:{stop} of {Path(args.trace).name}", "learned keys": rows})


if __name__ == "__main__":
    main()
