"""The kv target on the reference engine: a prefix-block trace replayed with real prefills and decodes.

The cache's contents follow the eviction decisions of the kv target's compiled mechanism (recorded while it
replays the same trace with the same policy), so the engine and the simulator differ only in what they
are meant to differ in: measured kernel time against modelled time. The engine checks that its own
lookups find exactly the hits the mechanism counted.

Requests run one after another in arrival order, as the simulator replays them; each prompt is prefilled
twice (over its cached prefix, and from scratch without the cache) and the two last-token logits must
agree, so the cache is shown correct on every request with a hit, not only fast. A request without a hit
runs the same kernels either way, so it runs once and saves nothing by construction. Serving several
requests at once under a batching policy is targets/batching/reference.py; this replay isolates the cache.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from targets.reference_engine.model import KVPool, Transformer
from targets.reference_engine.profiler import compute_clock

from .trace import Trace


@dataclass(frozen=True)
class ReplayReport:
    """Measured figures of one replay; times in ms of the computing thread's CPU time on this machine."""

    requests: int
    prompt_tokens: int
    hit_tokens: int
    prefill_ms_full: float
    prefill_ms_reuse: float
    prefill_ms_saved: float
    prefill_share_saved: float
    """The share of all prefill time the hits saved: free of how fast the machine ran while measured."""
    ttft_ms_mean: float
    ttft_ms_p50: float
    tpot_ms_mean: float
    throughput_tok_s: float
    max_logit_diff: float

    def metrics(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.__dict__.items()}


def block_tokens(hash_id: int, size: int, vocab: int) -> torch.Tensor:
    """A block's token ids, a function of its prefix hash alone, so equal prefixes hold equal tokens."""
    return torch.randint(vocab, (size,), generator=torch.Generator().manual_seed(int(hash_id)))


def _timed(
    fn: Callable[..., torch.Tensor],
    calls: tuple[tuple[Any, ...], ...],
    repeats: int,
    clock: Callable[[], float],
    flip: bool = False,
) -> list[tuple[torch.Tensor, float]]:
    """fn's result on each argument tuple and its median time in ms on `clock` over `repeats` rounds.

    The calls take turns within a round, in an order that reverses every round (and starts reversed with
    `flip`), so neither gains from the other's warm caches and a burst of load lands on both alike.
    """
    times: list[list[float]] = [[] for _ in calls]
    outs: list[Any] = [None] * len(calls)
    for round_ in range(repeats):
        order = reversed(range(len(calls))) if (round_ % 2 == 1) != flip else range(len(calls))
        for i in order:
            start = clock()
            outs[i] = fn(*calls[i])
            times[i].append((clock() - start) * 1e3)
    return [(out, statistics.median(t)) for out, t in zip(outs, times, strict=True)]


def replay(
    model: Transformer,
    trace: Trace,
    capacity: int,
    hits: np.ndarray,
    evicted_req: np.ndarray,
    evicted_block: np.ndarray,
    repeats: int = 3,
    decode: bool = True,
) -> ReplayReport:
    """Serve every request of a trace whose blocks are whole blocks of the pool's block size.

    Computation is timed on the clock the profile's CPU kernels were timed on (the computing thread's CPU
    time), so other jobs on a shared machine do not count as this replay's time.
    """
    clock = compute_clock("cpu")
    bs = trace.block_size
    lengths = np.diff(trace.offsets)
    out_blocks = -(-trace.output_tokens // bs) if decode else np.zeros_like(lengths)
    scratch = int((lengths + out_blocks).max())
    fresh = capacity + scratch  # where the prefill from scratch writes, apart from the cache
    pool = KVPool.empty(model.shape, fresh + int(lengths.max()), bs)
    free = list(range(capacity - 1, -1, -1))
    slot_of: dict[int, int] = {}
    tokens_of: dict[int, torch.Tensor] = {}
    ev = 0
    full_ms, reuse_ms, ttfts, tpots = [], [], [], []
    hit_tokens, max_diff, busy_ms, clock_ms = 0, 0.0, 0.0, 0.0
    for r in range(trace.n_requests):
        blocks = trace.blocks[trace.offsets[r] : trace.offsets[r + 1]].tolist()
        k = 0
        while k < len(blocks) and blocks[k] in slot_of:
            k += 1
        if k != hits[r]:
            raise RuntimeError(
                f"request {r}: the engine's cache holds {k} prefix blocks, the mechanism {hits[r]}"
            )
        while ev < evicted_req.size and evicted_req[ev] == r:
            free.append(slot_of.pop(int(evicted_block[ev])))
            ev += 1
        # A prompt cached whole still needs its last logits: its last block is computed again, into a
        # block of its own (vLLM's rule), so every prefill over a cached prefix starts at a block boundary.
        reused = min(k, len(blocks) - 1)
        table, next_scratch = [slot_of[b] for b in blocks[:reused]], capacity
        for b in blocks[reused:]:
            if b not in slot_of and free:
                slot_of[b] = slot = free.pop()
            else:  # recomputed, or no room left to cache it: computed into scratch and dropped
                slot, next_scratch = next_scratch, next_scratch + 1
            table.append(slot)
        for b in blocks:
            if b not in tokens_of:
                tokens_of[b] = block_tokens(int(trace.hash_ids[b]), bs, model.shape.vocab)
        prompt = torch.cat([tokens_of[b] for b in blocks])
        n = int(prompt.shape[0])
        ctx = reused * bs
        hit_tokens += ctx
        t = torch.tensor(table)

        reuse_args = (prompt[ctx:], pool, t, ctx)
        scratch_args = (prompt, pool, torch.arange(fresh, fresh + len(blocks)), 0)
        if ctx == 0:  # nothing cached: both prefills are the same kernels on the same data, so run once
            ((full, ms_full),) = _timed(model.prefill, (reuse_args,), repeats, clock)
            logits, ms_reuse = full, ms_full
        else:
            pair = (reuse_args, scratch_args)
            (logits, ms_reuse), (full, ms_full) = _timed(model.prefill, pair, repeats, clock, flip=r % 2 == 1)
        max_diff = max(max_diff, float((logits - full).abs().max()))
        full_ms.append(ms_full)
        reuse_ms.append(ms_reuse)

        arrival_ms = float(trace.timestamps_s[r]) * 1e3
        clock_ms = max(clock_ms, arrival_ms) + ms_reuse
        ttfts.append(clock_ms - arrival_ms)
        busy_ms += ms_reuse
        steps = int(trace.output_tokens[r]) if decode else 0
        for j in range(out_blocks[r]):
            table.append(next_scratch + j)
        token = logits.argmax().reshape(1)
        tables = [torch.tensor(table)]
        for step in range(max(steps - 1, 0)):  # the prefill produced the first output token
            start = clock()
            token = model.decode(token, pool, tables, [n + step]).argmax(-1)
            ms = (clock() - start) * 1e3
            tpots.append(ms)
            clock_ms += ms
            busy_ms += ms
    total_tokens = int(lengths.sum()) * bs + int(trace.output_tokens.sum() if decode else 0)
    return ReplayReport(
        requests=trace.n_requests,
        prompt_tokens=int(lengths.sum()) * bs,
        hit_tokens=hit_tokens,
        prefill_ms_full=float(sum(full_ms)),
        prefill_ms_reuse=float(sum(reuse_ms)),
        prefill_ms_saved=float(sum(full_ms) - sum(reuse_ms)),
        prefill_share_saved=float(1.0 - sum(reuse_ms) / sum(full_ms)) if sum(full_ms) > 0 else 0.0,
        ttft_ms_mean=float(np.mean(ttfts)),
        ttft_ms_p50=float(np.median(ttfts)),
        tpot_ms_mean=float(np.mean(tpots)) if tpots else 0.0,
        throughput_tok_s=total_tokens / (busy_ms / 1e3) if busy_ms > 0 else 0.0,
        max_logit_diff=max_diff,
    )
