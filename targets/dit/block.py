"""One DiT block run for real: on one process, and sequence-parallel over torch.distributed (gloo).

The block is a DiT's attention block without its conditioning: LayerNorm, qkv projection, non-causal
multi-head attention, output projection and residual, LayerNorm, GELU MLP and residual. Sequence parallel
runs split the tokens over ulysses x ring processes, ranked as xDiT does (Ulysses innermost, so a rank's
tokens are chunk `ring_index * ulysses + ulysses_index`):
- Ulysses: an all-to-all turns (tokens/n, all heads) into (tokens/ring, heads/ulysses) and back after;
- ring: keys and values go round the ring group; each step attends to one chunk and the partial outputs
  are merged exactly through their log-sum-exp.
Needs torch (the torch extra); nothing else in the target imports this module.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F


@dataclass(frozen=True)
class BlockShape:
    """The block's sizes and the sequence it runs on."""

    hidden: int
    heads: int
    mlp: int
    tokens: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def weights(shape: BlockShape, seed: int) -> dict[str, torch.Tensor]:
    """Random weights of one block, scaled as an initialised model's are."""
    g = torch.Generator().manual_seed(seed)
    h, m = shape.hidden, shape.mlp

    def w(rows: int, cols: int) -> torch.Tensor:
        return torch.randn(rows, cols, generator=g) / math.sqrt(rows)

    return {"qkv": w(h, 3 * h), "out": w(h, h), "up": w(h, m), "down": w(m, h)}


def tokens(shape: BlockShape, seed: int) -> torch.Tensor:
    return torch.randn(shape.tokens, shape.hidden, generator=torch.Generator().manual_seed(seed + 1))


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(tokens, hidden) -> (heads, tokens, head_dim)."""
    return x.reshape(x.shape[0], heads, -1).transpose(0, 1)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-causal attention of (heads, q, d) over (heads, kv, d): the output and each row's log-sum-exp."""
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    return torch.exp(scores - lse) @ v, lse


def block(
    x: torch.Tensor, w: dict[str, torch.Tensor], shape: BlockShape, attention: Any = None
) -> torch.Tensor:
    """The block over the tokens in `x`; `attention(q, k, v)` over (heads, tokens, d), whole by default."""
    attention = attention or (lambda q, k, v: _attend(q, k, v)[0])
    h = F.layer_norm(x, (shape.hidden,))
    q, k, v = (_heads(t, shape.heads) for t in (h @ w["qkv"]).chunk(3, dim=-1))
    o = attention(q, k, v)
    x = x + o.transpose(0, 1).reshape(x.shape[0], shape.hidden) @ w["out"]
    return x + F.gelu(F.layer_norm(x, (shape.hidden,)) @ w["up"]) @ w["down"]


@dataclass(frozen=True)
class Groups:
    """This rank's place in the ulysses x ring layout, and its process groups."""

    rank: int
    ulysses: int
    ring: int
    ulysses_group: Any
    ring_ranks: tuple[int, ...]

    @property
    def ring_index(self) -> int:
        return self.rank // self.ulysses


def make_groups(rank: int, ulysses: int, ring: int) -> Groups:
    """Every rank makes every group, in one order, as torch.distributed requires."""
    mine = None
    for r in range(ring):
        group = dist.new_group(list(range(r * ulysses, (r + 1) * ulysses)))
        if rank // ulysses == r:
            mine = group
    ring_ranks = tuple(rank % ulysses + i * ulysses for i in range(ring))
    return Groups(rank, ulysses, ring, mine, ring_ranks)


def _all_to_all(x: torch.Tensor, split: int, gather: int, g: Groups) -> torch.Tensor:
    """Scatter dim `split` over the Ulysses group and gather dim `gather` from it."""
    if g.ulysses == 1:
        return x
    parts = [c.contiguous() for c in x.chunk(g.ulysses, dim=split)]
    received = [torch.empty_like(parts[0]) for _ in parts]
    dist.all_to_all(received, parts, group=g.ulysses_group)
    return torch.cat(received, dim=gather)


def _ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: Groups) -> torch.Tensor:
    """Pass K and V round the ring; merge each chunk's partial output exactly by log-sum-exp."""
    if g.ring == 1:
        return _attend(q, k, v)[0]
    position = g.ring_index
    to, frm = g.ring_ranks[(position + 1) % g.ring], g.ring_ranks[(position - 1) % g.ring]
    out, lse = None, None
    kv = torch.stack((k, v)).contiguous()
    for step in range(g.ring):
        pending = []
        if step < g.ring - 1:
            incoming = torch.empty_like(kv)
            pending = [dist.isend(kv, to), dist.irecv(incoming, frm)]
        part, part_lse = _attend(q, kv[0], kv[1])
        if out is None or lse is None:
            out, lse = part, part_lse
        else:
            merged = torch.logaddexp(lse, part_lse)
            out = torch.exp(lse - merged) * out + torch.exp(part_lse - merged) * part
            lse = merged
        for request in pending:
            request.wait()
        if pending:
            kv = incoming
    assert out is not None
    return out


def parallel_block(x: torch.Tensor, w: dict[str, torch.Tensor], shape: BlockShape, g: Groups) -> torch.Tensor:
    """The block on this rank's tokens, attention sequence-parallel over Ulysses and ring."""

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        q, k, v = (_all_to_all(t, split=0, gather=1, g=g) for t in (q, k, v))  # heads out, tokens in
        return _all_to_all(_ring_attention(q, k, v, g), split=1, gather=0, g=g)

    return block(x, w, shape, attention)


Layout = tuple[int, int]
"""(ulysses, ring) degrees; their product is the processes."""


def _worker(
    rank: int, world: int, layouts: list[Layout], shape: BlockShape, repeats: int, store: str, out: Any
) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    w, x = weights(shape, 0), tokens(shape, 0)
    mine = x.chunk(world)[rank]
    for ulysses, ring in layouts:
        g = make_groups(rank, ulysses, ring)
        with torch.no_grad():
            y = parallel_block(mine, w, shape, g)
            times = []
            for _ in range(repeats):
                dist.barrier()
                start = time.perf_counter()
                parallel_block(mine, w, shape, g)
                elapsed = torch.tensor([time.perf_counter() - start])
                dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the block ends when its slowest rank does
                times.append(float(elapsed))
        out.put(((ulysses, ring), rank, y, statistics.median(times) if times else math.nan))
    dist.barrier()
    dist.destroy_process_group()


def run_parallel(
    shape: BlockShape, layouts: list[Layout], repeats: int = 0
) -> dict[Layout, tuple[torch.Tensor, float]]:
    """Per layout of one process count: the block's output over all tokens, run on that many local
    processes, and its median seconds over `repeats` timed runs (NaN if none)."""
    world = layouts[0][0] * layouts[0][1]
    if any(u * r != world or shape.heads % u or shape.tokens % world for u, r in layouts):
        raise ValueError(f"layouts {layouts} must use one process count dividing the heads and tokens")
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        args = (world, layouts, shape, repeats, store, out)
        procs = [ctx.Process(target=_worker, args=(r, *args)) for r in range(world)]
        for p in procs:
            p.start()
        results = [out.get(timeout=900) for _ in range(world * len(layouts))]
        for p in procs:
            p.join()
    found = {}
    for layout in layouts:
        mine = sorted((r for r in results if r[0] == layout), key=lambda r: r[1])
        found[layout] = (torch.cat([y for _, _, y, _ in mine]), mine[0][3])
    return found


def run_single(shape: BlockShape, repeats: int = 0) -> tuple[torch.Tensor, float]:
    """The block on one process over all tokens, and its median seconds."""
    torch.set_num_threads(1)
    w, x = weights(shape, 0), tokens(shape, 0)
    with torch.no_grad():
        y = block(x, w, shape)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            block(x, w, shape)
            times.append(time.perf_counter() - start)
    return y, statistics.median(times) if times else math.nan
