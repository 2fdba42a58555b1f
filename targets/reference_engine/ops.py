"""The engine's operators; `crucible profile` times exactly these, so the cost model fits what runs.

Each function is one operator of targets.costmodel.model.OPERATORS. KV pools are per layer,
shaped (blocks, heads, block_size, head_dim); a sequence's block table lists its blocks in order.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from targets.costmodel.model import PREFILL_TILE

EPS = 1e-6


def gemm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """(m x k) @ (k x n)."""
    return x @ w


def norm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Add a sublayer's output to the residual stream and RMS-normalize it: (normalized, new residual)."""
    h = x + delta
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS) * weight, h


def act(x: torch.Tensor) -> torch.Tensor:
    """SiLU-gated activation of (m x 2f) into (m x f)."""
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def gather(pool: torch.Tensor, table: torch.Tensor, tokens: int) -> torch.Tensor:
    """The first `tokens` cached keys (or values) of a sequence as (heads, tokens, head_dim)."""
    blocks = pool.index_select(0, table[: -(-tokens // pool.shape[2])])
    heads, _, dim = blocks.shape[1:]
    return blocks.transpose(0, 1).reshape(heads, -1, dim)[:, :tokens]


def attn_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    table: torch.Tensor,
    ctx: int,
) -> torch.Tensor:
    """q, k, v (heads, n, head_dim) of n new tokens at positions ctx.. attend causally over all ctx + n (k
    and v may have fewer heads than q: grouped-query attention).

    The new keys and values are written into their blocks of `table` first and every key is then read
    back through the table, as paged attention does: a prefill from scratch and one over a cached prefix
    run the same kernels and differ only in how many tokens they compute. Queries go in tiles of
    PREFILL_TILE, each over the keys it may see, as flash kernels tile them: the causal half is skipped
    and the score matrix stays small, so time grows evenly with the work.
    """
    n, block = q.shape[1], k_pool.shape[2]
    positions = torch.arange(ctx, ctx + n, device=q.device)
    slots, offsets = table[positions // block], positions % block
    k_pool[slots, :, offsets] = k.transpose(0, 1)
    v_pool[slots, :, offsets] = v.transpose(0, 1)
    keys, values = gather(k_pool, table, ctx + n), gather(v_pool, table, ctx + n)
    out = torch.empty_like(q)
    for lo in range(0, n, PREFILL_TILE):
        hi = min(n, lo + PREFILL_TILE)
        seen = ctx + hi
        mask = torch.ones(hi - lo, seen, dtype=torch.bool, device=q.device).tril(ctx + lo)
        out[:, lo:hi] = F.scaled_dot_product_attention(
            q[:, lo:hi], keys[:, :seen], values[:, :seen], attn_mask=mask, enable_gqa=_grouped(q, keys)
        )
    return out


def attn_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    tables: list[torch.Tensor],
    ctxs: list[int],
) -> torch.Tensor:
    """q, k, v (batch, heads, head_dim): each sequence's new token at position ctx over all ctx + 1.

    As in prefill, the new keys and values are written into their blocks first and read back through the
    tables with the cached ones, so the operator the profiler times is the whole of a decode's attention.
    """
    block = k_pool.shape[2]
    slots = torch.stack([table[ctx // block] for table, ctx in zip(tables, ctxs, strict=True)])
    offsets = torch.tensor([ctx % block for ctx in ctxs], device=q.device)
    k_pool[slots, :, offsets] = k
    v_pool[slots, :, offsets] = v
    out = torch.empty_like(q)
    for i, (table, ctx) in enumerate(zip(tables, ctxs, strict=True)):
        keys, values = gather(k_pool, table, ctx + 1), gather(v_pool, table, ctx + 1)
        query = q[i].unsqueeze(1)
        out[i] = F.scaled_dot_product_attention(
            query, keys, values, enable_gqa=_grouped(query, keys)
        ).squeeze(1)
    return out


def _grouped(q: torch.Tensor, keys: torch.Tensor) -> bool:
    """Whether several query heads share each key head (grouped-query attention, as Llama-3 has)."""
    return q.shape[-3] != keys.shape[-3]
