"""One serving instance as a real engine: the batching scheduler over a prefix cache of real KV blocks.

The fleet simulator (fleet.py) prices an instance's iterations; this runs them. The scheduler is the
batching target's (`plan_cached`, `commit`), ordering requests by the `priority` key; every iteration is one
forward pass of the reference engine's model over a paged KV pool of the instance's blocks. The prefix
cache is this engine's own, keyed as vLLM keys its blocks: a full block of prompt tokens is identified by
its tokens and its parent's identity, so equal prefixes are equal blocks whoever sent them. A block a
request computed enters the cache when its last token is computed, in the slot the request wrote it to (a
copy computed alongside is dropped for the cached one); a request admitted with a cached prefix reads
those slots and computes from the first block the cache lacks. A block no running request holds and no
cached child extends is evictable, scored once by the `evict` key, the lowest out first when the pool
needs room; memory is counted as the scheduler counts it (a running request's blocks whole, shared or
not). Time is the caller's: `start(now)` runs the next iteration and says how long its pass took on the
computing thread's CPU clock, `end(at)` commits it.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from targets.batching.features import N_COLUMNS
from targets.batching.scheduler import (
    DONE,
    RUNNING,
    CompiledKey,
    Limits,
    commit,
    initial_state,
    plan_cached,
    request_progress,
    request_status,
)
from targets.batching.trace import Requests
from targets.reference_engine.model import KVPool, Transformer
from targets.reference_engine.profiler import compute_clock

from .fleet import HIT_WINDOW

ROOT = b""
"""The identity a first block's parent has."""


def block_ids(tokens: Sequence[int], block_tokens: int) -> list[bytes]:
    """The identity of each block of a prompt, its last one partial or not: a digest of the block's tokens
    and its parent's identity, so a block stands for its whole prefix (as vLLM's block hashes do)."""
    ids, parent = [], ROOT
    for at in range(0, len(tokens), block_tokens):
        chunk = np.asarray(tokens[at : at + block_tokens], dtype=np.int64).tobytes()
        parent = hashlib.blake2b(parent + chunk, digest_size=16).digest()
        ids.append(parent)
    return ids


@dataclass
class Cached:
    """A block in the cache: its KV slot, running requests holding it, cached children, admissions that
    hit it, last use, insertion, its parent's identity and depth, and the heap entry standing for it while
    evictable (-1 if none)."""

    slot: int
    refs: int
    kids: int
    hits: float
    last: float
    inserted: float
    parent: bytes
    depth: int
    queued: int = -1


@dataclass(frozen=True)
class Emitted:
    """What an iteration's end gave a request: the token it generated, and whether that was its last."""

    request: int
    token: int
    done: bool


class EngineInstance:
    """The instance's requests are the caller's ids 0..n-1 (`n` is the most it may see); `schedule` and
    `evict` are compiled keys with their PARAMS vectors."""

    def __init__(
        self,
        model: Transformer,
        limits: Limits,
        slo_s: tuple[float, float],
        keys: tuple[Callable[..., float], np.ndarray, Callable[..., float], np.ndarray],
        n: int,
    ) -> None:
        self.model, self.limits = model, limits
        schedule, self.schedule_params, self.evict, self.evict_params = keys
        self.scorer = CompiledKey(schedule)
        self.pool = KVPool.empty(model.shape, limits.kv_blocks, limits.block_tokens)
        self.slots_free = list(range(limits.kv_blocks - 1, -1, -1))
        self.free = limits.kv_blocks
        """Blocks the scheduler counts as not held by a running request."""
        self.setting = limits.setting(slo_s)
        self.S = initial_state(Requests(np.zeros(n), np.ones(n, np.int64), np.ones(n, np.int64)))
        self.X = np.zeros((n, N_COLUMNS))
        self.rows_out = np.zeros((3, limits.token_budget), dtype=np.int64)
        self.preempted = np.zeros(n, dtype=np.int64)
        self.offsets = np.zeros(n + 1, dtype=np.int64)
        self.blocks = np.zeros(0, dtype=np.int64)
        self.slot = np.full(0, -1, dtype=np.int32)
        """Each known block's (dense id's) KV slot while cached, else -1: what the planner reads."""
        self.dense: dict[bytes, int] = {}
        self.identity: list[bytes] = []
        self.parents: dict[bytes, bytes] = {}
        self.cache: dict[bytes, Cached] = {}
        self.heap: list[tuple[float, int, bytes]] = []
        self.pushes = 0
        self.pinned: dict[int, int] = {}
        self.pinned_sum = 0
        self.tables: dict[int, list[int]] = {}
        self.sequences: dict[int, list[int]] = {}
        self.ids: dict[int, list[bytes]] = {}
        self.live: list[int] = []
        self.admitted: set[int] = set()
        self.hit_tokens = np.zeros(n)
        self.hit_rate = 0.0
        self.in_flight: tuple[np.ndarray, np.ndarray, list[int | None]] | None = None
        self.passes: list[tuple[float, list[int], list[int]]] = []
        """Every iteration's pass: its time in ms, and each row's start and tokens."""
        self.clock = compute_clock("cpu")

    # Requests in.

    def arrive(self, r: int, tokens: Sequence[int], output: int, now: float) -> None:
        """Request r reaches the instance at `now` with its prompt's tokens and the tokens to generate."""
        if r in self.sequences or not 0 <= r < self.S.shape[0]:
            raise ValueError(f"request {r} is a repeat or outside 0..{self.S.shape[0] - 1}")
        one = Requests(np.array([now]), np.array([len(tokens)]), np.array([max(output, 1)]))
        self.S[r] = initial_state(one)[0]
        ids = block_ids(tokens, self.limits.block_tokens)
        dense = [self._dense(b, p) for b, p in zip(ids, [ROOT, *ids[:-1]], strict=True)]
        self.offsets[r + 1 :] = self.blocks.size + len(dense)
        self.offsets[r] = self.blocks.size
        self.blocks = np.concatenate((self.blocks, np.array(dense, dtype=np.int64)))
        self.sequences[r], self.ids[r] = list(tokens), ids
        self.live.append(r)

    def _dense(self, block: bytes, parent: bytes) -> int:
        if block not in self.dense:
            self.dense[block] = len(self.identity)
            self.identity.append(block)
            self.parents[block] = parent
            if len(self.identity) > self.slot.size:
                grown = np.full(max(64, 2 * self.slot.size), -1, dtype=np.int32)
                grown[: self.slot.size] = self.slot
                self.slot = grown
        return self.dense[block]

    # An iteration.

    @property
    def busy(self) -> bool:
        return self.in_flight is not None

    def start(self, now: float) -> float | None:
        """Plan the next iteration at `now` and run its forward pass; its duration in ms (None if idle)."""
        assert self.in_flight is None, "an iteration is in flight"
        if not self.live:
            return None
        live = np.array(self.live, dtype=np.int64)
        while True:
            self.setting[0] = self.free
            rows, lost, self.free = plan_cached(
                self.scorer,
                self.schedule_params,
                self.S,
                live,
                now,
                self.setting,
                self.X,
                self.rows_out,
                self.preempted,
                self.offsets,
                self.blocks,
                self.slot,
            )
            for r in self.preempted[:lost].tolist():
                self._let_go(r, now)
            if rows > 0 or lost == 0:
                break
        if rows == 0:
            raise RuntimeError("the instance is stuck: live requests, none schedulable")
        ids, starts, takes = (self.rows_out[k, :rows].copy() for k in range(3))
        for r, start in zip(ids.tolist(), starts.tolist(), strict=True):
            if r not in self.tables:  # admitted: it reads its cached prefix where the cache keeps it
                self._admit(r, start, now)
        self._make_room()
        emits, ms = self._forward(ids.tolist(), starts.tolist(), takes.tolist())
        self.in_flight = (ids, takes, emits)
        self.passes.append((ms, starts.tolist(), takes.tolist()))
        return ms

    def end(self, at: float) -> list[Emitted]:
        """Commit the iteration in flight as ended at `at`: the tokens it generated, the blocks it cached."""
        assert self.in_flight is not None, "no iteration in flight"
        ids, takes, emits = self.in_flight
        self.in_flight = None
        self.free = commit(self.S, ids, takes, ids.size, at, self.free)
        out = []
        for r, token in zip(ids.tolist(), emits, strict=True):
            self._cache_computed(r, at)
            if token is None:
                continue
            self.sequences[r].append(token)
            done = request_status(self.S, r) == DONE
            out.append(Emitted(r, token, done))
            if done:
                self._let_go(r, at)
        self.live = [r for r in self.live if request_status(self.S, r) != DONE]
        return out

    def _forward(self, ids: list[int], starts: list[int], takes: list[int]) -> tuple[list[int | None], float]:
        """One pass over the rows: the token each row that reached its sequence's end generates, and the
        pass's time in ms."""
        bs = self.limits.block_tokens
        rows = []
        for r, start, take in zip(ids, starts, takes, strict=True):
            table = self.tables[r]
            while len(table) * bs < start + take:
                if not self.slots_free:
                    raise RuntimeError(f"the iteration needs more KV slots than the pool's {self.free}")
                table.append(self.slots_free.pop())
            chunk = torch.tensor(self.sequences[r][start : start + take])
            rows.append((chunk, torch.tensor(table), start))
        began = self.clock()
        logits = self.model.forward(self.pool, rows)
        ms = (self.clock() - began) * 1e3
        emits = [
            int(out.argmax()) if start + take == len(self.sequences[r]) else None
            for r, start, take, out in zip(ids, starts, takes, logits, strict=True)
        ]
        return emits, ms

    # The prefix cache.

    def _admit(self, r: int, start: int, now: float) -> None:
        """Request r starts running from `start`: it pins and reads the cached blocks before that."""
        upto = min(start // self.limits.block_tokens, self._full_blocks(r))
        table = []
        for block in self.ids[r][:upto]:
            entry = self.cache[block]
            if entry.refs == 0:
                entry.queued = -1
            entry.refs += 1
            entry.hits += 1.0
            entry.last = now
            table.append(entry.slot)
        self.tables[r] = table
        self.pinned[r] = upto
        self.pinned_sum += upto
        if r not in self.admitted:
            self.admitted.add(r)
            self.hit_tokens[r] = start
            self.hit_rate += (start / request_progress(self.S, r)[0] - self.hit_rate) / HIT_WINDOW

    def _cache_computed(self, r: int, now: float) -> None:
        """The full prompt blocks request r has now computed enter the cache, pinned by it."""
        computed = int(request_progress(self.S, r)[2])
        upto = min(computed // self.limits.block_tokens, self._full_blocks(r))
        table = self.tables[r]
        for j in range(self.pinned[r], upto):
            block = self.ids[r][j]
            entry = self.cache.get(block)
            if entry is None:
                parent = self.parents[block]
                self.cache[block] = Cached(table[j], 1, 0, 0.0, now, now, parent, j + 1)
                self.slot[self.dense[block]] = table[j]
                if parent != ROOT:
                    self.cache[parent].kids += 1
            else:  # computed alongside another request: keep the cached copy, drop this one
                if entry.refs == 0:
                    entry.queued = -1
                entry.refs += 1
                entry.last = now
                if table[j] != entry.slot:
                    self.slots_free.append(table[j])
                    table[j] = entry.slot
        if upto > self.pinned[r]:
            self.pinned_sum += upto - self.pinned[r]
            self.pinned[r] = upto

    def _let_go(self, r: int, now: float) -> None:
        """Request r finished or was preempted: it unpins its cached blocks and frees the rest."""
        table = self.tables.pop(r, [])
        pinned = self.pinned.pop(r, 0)
        for j in range(pinned - 1, -1, -1):
            block = self.ids[r][j]
            entry = self.cache[block]
            entry.refs -= 1
            entry.last = now
            if entry.refs == 0 and entry.kids == 0:
                self._push(block)
        self.slots_free.extend(table[pinned:])
        self.pinned_sum -= pinned

    def _push(self, block: bytes) -> None:
        entry = self.cache[block]
        x = np.array([[entry.last, entry.inserted, entry.hits, float(entry.depth)]])
        score = float(self.evict(x, 0, self.evict_params))
        entry.queued = self.pushes
        heapq.heappush(self.heap, (score, self.pushes, block))
        self.pushes += 1

    def _make_room(self) -> None:
        """Evict the lowest-scored evictable blocks until the cache and the running requests fit the pool."""
        held = self.limits.kv_blocks - self.free
        while len(self.cache) + held - self.pinned_sum > self.limits.kv_blocks:
            if not self.heap:
                raise RuntimeError("the instance is stuck: its pool is full and nothing is evictable")
            _, pushed, block = heapq.heappop(self.heap)
            entry = self.cache.get(block)
            if entry is None or entry.queued != pushed:
                continue
            del self.cache[block]
            self.slot[self.dense[block]] = -1
            self.slots_free.append(entry.slot)
            if entry.parent != ROOT:
                parent = self.cache[entry.parent]
                parent.kids -= 1
                if parent.kids == 0 and parent.refs == 0:
                    self._push(entry.parent)

    def _full_blocks(self, r: int) -> int:
        return min(len(self.ids[r]), int(request_progress(self.S, r)[0]) // self.limits.block_tokens)

    # What a router may ask.

    def state(self, tokens: Sequence[int]) -> dict[str, float]:
        """The instance's state as a request with these prompt tokens would meet it now."""
        bs = self.limits.block_tokens
        hit = 0  # leading full blocks, leaving at least one token to compute (as cached_prefix counts)
        for block in block_ids(tokens[: (len(tokens) - 1) // bs * bs], bs):
            if block not in self.cache:
                break
            hit += 1
        running = decoding = 0
        prefill_left = 0.0
        for r in self.live:
            prompt, generated, computed = request_progress(self.S, r)
            if request_status(self.S, r) == RUNNING:
                running += 1
                decoding += generated > 0
            if generated == 0:
                prefill_left += prompt - computed
        return {
            "cached_blocks": float(hit),
            "outstanding": float(len(self.live)),
            "running": float(running),
            "queued": float(len(self.live) - running),
            "queued_prefill_tokens": prefill_left,
            "decode_batch": float(decoding),
            "active_blocks": float(self.limits.kv_blocks - self.free),
            "free_blocks": float(self.free),
            "hit_rate": self.hit_rate,
        }

    def record(self, r: int) -> list[float]:
        """Request r's scheduler state row (arrival, first token, finish...) as the scheduler keeps it."""
        return [float(x) for x in self.S[r]]
