"""A random-weight decoder-only transformer over a paged KV cache of real tensors, built from the ops.

Llama-shaped (RMSNorm, fused QKV, multi-head attention, SiLU-gated MLP) without rotary embeddings: the
causal mask over the cached context is what prefix reuse must get right, and random weights need no
positions to make every logit depend on every earlier token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from targets.kernels.models import ModelShape

from . import ops


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
    """Seeded random weights; prefill and decode write new keys and values into the slots they are given."""

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

    @torch.inference_mode()
    def prefill(self, tokens: torch.Tensor, pool: KVPool, table: torch.Tensor, ctx: int) -> torch.Tensor:
        """Logits after the last of `tokens`, which follow `ctx` tokens cached in `table`'s first blocks.

        `table` lists the blocks of all ctx + len(tokens) positions; the new tokens' keys and values are
        written into theirs, so a block shared with other sequences must not be among them.
        """
        s = self.shape
        n = int(tokens.shape[0])
        x = self.embed[tokens]
        delta = torch.zeros_like(x)
        for li, layer in enumerate(self.layers):
            a, x = ops.norm(x, delta, layer.attn_norm)
            q, k, v = ops.gemm(a, layer.qkv).view(n, 3, s.heads, s.head_dim).permute(1, 2, 0, 3)
            o = ops.attn_prefill(q, k, v, pool.data[li, 0], pool.data[li, 1], table, ctx)
            delta = ops.gemm(o.transpose(0, 1).reshape(n, -1), layer.out)
            a, x = ops.norm(x, delta, layer.mlp_norm)
            delta = ops.gemm(ops.act(ops.gemm(a, layer.up)), layer.down)
        a, _ = ops.norm(x[-1:], delta[-1:], self.final_norm)
        return ops.gemm(a, self.head)[0]

    @torch.inference_mode()
    def decode(
        self, tokens: torch.Tensor, pool: KVPool, tables: list[torch.Tensor], ctxs: list[int]
    ) -> torch.Tensor:
        """One step for a batch: each sequence's new token at position ctx; returns (batch, vocab) logits.

        Its key and value are written at that position, so the table must already hold that block.
        """
        s = self.shape
        b = int(tokens.shape[0])
        x = self.embed[tokens]
        delta = torch.zeros_like(x)
        for li, layer in enumerate(self.layers):
            a, x = ops.norm(x, delta, layer.attn_norm)
            q, k, v = ops.gemm(a, layer.qkv).view(b, 3, s.heads, s.head_dim).unbind(1)
            o = ops.attn_decode(q, k, v, pool.data[li, 0], pool.data[li, 1], tables, ctxs)
            delta = ops.gemm(o.reshape(b, -1), layer.out)
            a, x = ops.norm(x, delta, layer.mlp_norm)
            delta = ops.gemm(ops.act(ops.gemm(a, layer.up)), layer.down)
        a, _ = ops.norm(x, delta, self.final_norm)
        return ops.gemm(a, self.head)
