"""A random-weight decoder-only transformer over a paged KV cache of real tensors, built from the ops.

Llama-shaped (RMSNorm, fused QKV, multi-head attention, SiLU-gated MLP) without rotary embeddings: the
causal mask over the cached context is what prefix reuse must get right, and random weights need no
positions to make every logit depend on every earlier token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

import torch

from targets.costmodel.shapes import ModelShape

from . import ops

Row = tuple[torch.Tensor, torch.Tensor, int]
"""(tokens, block table, start) of one sequence in a forward pass: its tokens at positions start.."""


@dataclass(frozen=True)
class Layer:
    """One block's weights."""

    attn_norm: torch.Tensor
    qkv: torch.Tensor
    out: torch.Tensor
    mlp_norm: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor


@dataclass(frozen=True)
class KVPool:
    """Paged KV memory: (layers, 2, blocks, heads, block_tokens, head_dim); a block is a slot index."""

    data: torch.Tensor

    @classmethod
    def empty(cls, shape: ModelShape, blocks: int, block_tokens: int) -> KVPool:
        return cls(torch.zeros(shape.layers, 2, blocks, shape.heads, block_tokens, shape.head_dim))

    @property
    def block_tokens(self) -> int:
        return int(self.data.shape[4])


class Transformer:
    """Seeded random weights; a forward pass writes new keys and values into the slots it is given."""

    def __init__(self, shape: ModelShape, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        h, f, w = shape.hidden, shape.ffn, shape.heads * shape.head_dim

        def dense(k: int, n: int) -> torch.Tensor:
            return torch.randn(k, n, generator=g) / k**0.5

        self.shape = shape
        self.embed = torch.randn(shape.vocab, h, generator=g)
        self.layers = tuple(
            Layer(torch.ones(h), dense(h, 3 * w), dense(w, h), torch.ones(h), dense(h, 2 * f), dense(f, h))
            for _ in range(shape.layers)
        )
        self.final_norm = torch.ones(h)
        self.head = dense(h, shape.vocab)

    def prefill(self, tokens: torch.Tensor, pool: KVPool, table: torch.Tensor, ctx: int) -> torch.Tensor:
        """Logits after the last of `tokens`, which follow `ctx` tokens cached in `table`'s first blocks."""
        return self.forward(pool, [(tokens, table, ctx)])[0]

    def decode(
        self, tokens: torch.Tensor, pool: KVPool, tables: list[torch.Tensor], ctxs: list[int]
    ) -> torch.Tensor:
        """One step for a batch: each sequence's new token at position ctx; returns (batch, vocab) logits."""
        rows = zip(tokens.split(1), tables, ctxs, strict=True)
        return self.forward(pool, list(rows))

    @torch.inference_mode()
    def forward(self, pool: KVPool, rows: Sequence[Row]) -> torch.Tensor:
        """Logits after each row's last token, (rows, vocab), from one pass over all rows' tokens.

        A row's tokens follow `start` tokens already cached in its table's first blocks; their keys and
        values are written into the blocks after, so a block shared with other sequences must not be among
        those. Projections and MLP run over all rows' tokens at once, attention per row of several tokens
        and batched over the rows of one (decodes).
        """
        s = self.shape
        layout = _Layout.of(rows)
        x = self.embed[torch.cat([tokens for tokens, _, _ in rows])]
        delta = torch.zeros_like(x)
        for li, layer in enumerate(self.layers):
            a, x = ops.norm(x, delta, layer.attn_norm)
            q, k, v = ops.gemm(a, layer.qkv).view(layout.total, 3, s.heads, s.head_dim).unbind(1)
            o = layout.attend(q, k, v, pool.data[li, 0], pool.data[li, 1])
            delta = ops.gemm(o.reshape(layout.total, -1), layer.out)
            a, x = ops.norm(x, delta, layer.mlp_norm)
            delta = ops.gemm(ops.act(ops.gemm(a, layer.up)), layer.down)
        a, _ = ops.norm(x[layout.last], delta[layout.last], self.final_norm)
        return ops.gemm(a, self.head)


@dataclass(frozen=True)
class _Layout:
    """Where each row's tokens lie in a forward pass's stacked tokens, worked out once for all layers."""

    rows: Sequence[Row]
    spans: list[slice]
    decodes: list[int]
    """Rows of one token, attended together as a batched decode."""
    decode_at: torch.Tensor
    """Where the decodes' tokens lie among the stacked tokens."""
    decode_tables: list[torch.Tensor]
    decode_starts: list[int]
    total: int
    last: slice | torch.Tensor
    """Each row's last token: all of them when every row is one token."""

    @classmethod
    def of(cls, rows: Sequence[Row]) -> _Layout:
        sizes = [int(tokens.shape[0]) for tokens, _, _ in rows]
        ends = list(accumulate(sizes))
        spans = [slice(end - size, end) for size, end in zip(sizes, ends, strict=True)]
        decodes = [i for i, size in enumerate(sizes) if size == 1]
        last = slice(None) if len(decodes) == len(rows) else torch.tensor(ends) - 1
        at = torch.tensor([spans[i].start for i in decodes], dtype=torch.long)
        tables, starts = [rows[i][1] for i in decodes], [rows[i][2] for i in decodes]
        return cls(rows, spans, decodes, at, tables, starts, ends[-1], last)

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
    ) -> torch.Tensor:
        """(tokens, heads, head_dim) outputs of one layer: each row of several tokens causally over its
        cache and itself, the rows of one token together."""
        tables, starts = self.decode_tables, self.decode_starts
        if len(self.decodes) == len(self.rows):
            return ops.attn_decode(q, k, v, keys, values, tables, starts)
        pieces: dict[int, torch.Tensor] = {}
        if self.decodes:
            at = self.decode_at
            decoded = ops.attn_decode(q[at], k[at], v[at], keys, values, tables, starts)
            pieces.update(zip(self.decodes, decoded.split(1), strict=True))
        for i, ((_, table, start), span) in enumerate(zip(self.rows, self.spans, strict=True)):
            if i not in pieces:
                heads_first = (t[span].transpose(0, 1) for t in (q, k, v))
                pieces[i] = ops.attn_prefill(*heads_first, keys, values, table, start).transpose(0, 1)
        if len(pieces) == 1:
            return pieces[0]
        return torch.cat([pieces[i] for i in range(len(self.rows))])
