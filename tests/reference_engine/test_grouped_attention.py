"""The engine's attention kernels with grouped KV heads (Llama-3's): each query head attends over the KV head
of its group, exactly as over that head repeated; what `crucible profile --deployment` times."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from targets.reference_engine import ops  # noqa: E402

pytestmark = pytest.mark.torch


def test_grouped_kv_heads_attend_as_the_same_heads_repeated() -> None:
    g = torch.Generator().manual_seed(0)
    heads, kv, dim, block, ctx = 8, 2, 16, 4, 10
    pool_k, pool_v = (torch.randn(16, kv, block, dim, generator=g) for _ in range(2))
    table = torch.randperm(16, generator=g)[:4]
    q = torch.randn(heads, 3, dim, generator=g)
    k, v = (torch.randn(kv, 3, dim, generator=g) for _ in range(2))
    grouped = ops.attn_prefill(q, k, v, pool_k.clone(), pool_v.clone(), table, ctx)
    repeat = heads // kv
    expanded = ops.attn_prefill(
        q,
        k.repeat_interleave(repeat, 0),
        v.repeat_interleave(repeat, 0),
        pool_k.repeat_interleave(repeat, 1),
        pool_v.repeat_interleave(repeat, 1),
        table,
        ctx,
    )
    assert torch.allclose(grouped, expanded, atol=1e-5)

    qd = torch.randn(2, heads, dim, generator=g)
    kd, vd = (torch.randn(2, kv, dim, generator=g) for _ in range(2))
    tables, ctxs = [table, torch.randperm(16, generator=g)[:4]], [ctx, 5]
    decoded = ops.attn_decode(qd, kd, vd, pool_k.clone(), pool_v.clone(), tables, ctxs)
    plain = ops.attn_decode(
        qd,
        kd.repeat_interleave(repeat, 1),
        vd.repeat_interleave(repeat, 1),
        pool_k.repeat_interleave(repeat, 1),
        pool_v.repeat_interleave(repeat, 1),
        tables,
        ctxs,
    )
    assert torch.allclose(decoded, plain, atol=1e-5)
