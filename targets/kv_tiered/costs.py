"""What a tier's hit is worth on a deployment (targets/deployments/): prefill, and the loads that replace it.

Loads are priced serially before the prefill of what was not reused (no layer-by-layer overlap as HiCache
and LMCache do, so a load costs its whole transfer), and a disk block crosses the drive and then the PCIe
link. Writes to the lower tiers are off the request's path (asynchronous in HiCache, LMCache and vLLM) and
cost it nothing. With tensor parallelism each GPU holds its heads' share of every block and loads it over
its own link from its own drive, in parallel with the others.

The default stays `llama3-8b-h100`, the pricing kv-tiered's recorded figures were made with (Llama-2-7B's
operator fits, attention at the GEMM's cost per multiply-accumulate); every GPU deployment prices it too.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from targets.base import Command, CommandResult, Option
from targets.deployments.catalog import DEPLOYMENTS
from targets.deployments.deployment import Deployment
from targets.kv.trace import Trace

DEFAULT_DEPLOYMENT = "llama3-8b-h100"


@functools.lru_cache(maxsize=8)
def request_costs(
    deployment: Deployment, trace: Trace
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per request and reused prefix, and per block, what the mechanism weighs: `prefill[offsets[r] + r + i]`
    the prefill of request r with its first i blocks reused (a prompt reused whole still computes its last
    block, as vLLM does), and each block's compute time over its prefix and its load times from host memory
    and from disk."""
    lengths = np.diff(trace.offsets)
    reused = np.concatenate([np.minimum(np.arange(n + 1), max(n - 1, 0)) for n in lengths])
    request = np.repeat(np.arange(trace.n_requests), lengths + 1)
    tokens = np.concatenate(([0], np.cumsum(trace.block_tokens[trace.blocks])))
    start = tokens[trace.offsets[:-1]]
    cached = (tokens[trace.offsets[request] + reused] - start[request]).astype(np.float64)
    new = np.maximum(trace.input_tokens[request] - cached, 1.0)
    prefill = deployment.prefill_ms(new, cached)

    block_tokens = trace.block_tokens.astype(np.float64)
    prefix = np.zeros(trace.n_blocks)
    for b in range(trace.n_blocks):  # dense ids are in first-seen order: a parent comes before its children
        p = trace.parent[b]
        prefix[b] = block_tokens[b] + (prefix[p] if p >= 0 else 0.0)
    recompute = deployment.compute_ms(block_tokens, prefix - block_tokens)
    host, disk = deployment.load_ms(block_tokens)
    return prefill, recompute, host, disk


def costs(values: Mapping[str, Any]) -> CommandResult:
    """Each deployment's price of a block: its bytes, loading it from host memory or disk, computing it."""
    tokens, context = float(values.get("tokens") or 512), float(values.get("context") or 16384)
    rows = []
    for d in DEPLOYMENTS.values():
        host, disk = (float(x[0]) for x in d.load_ms(np.array([tokens])))
        near, far = (float(d.compute_ms(np.array([tokens]), np.array([c]))[0]) for c in (0.0, context))
        rows.append(
            {
                "deployment": d.name,
                "GPUs": d.tensor_parallel,
                "MiB per GPU": round(tokens * d.kv_bytes_per_token() / 2**20, 3),
                "host load ms": round(host, 3),
                "disk load ms": round(disk, 3),
                "compute ms, first": round(near, 3),
                f"compute ms, after {context:g}": round(far, 3),
            }
        )
    title = f"a block of {tokens:g} tokens: its KV bytes on each GPU, loading it back, computing it again"
    return CommandResult(title, tuple(rows[0]), rows, rows)


COMMANDS = (
    Command(
        "costs",
        "what each deployment charges for a block: KV bytes per GPU, its load from host memory and from "
        "disk, and computing it first in a prompt or after a long cached context",
        (
            Option("tokens", "int", 512, "tokens in the block", low=1),
            Option(
                "context", "int", 16384, "cached tokens before the block, for the second compute time", low=0
            ),
        ),
        costs,
    ),
)
