"""Replays a slice of a Mooncake trace through SGLang's real RadixCache; run by SGLang's own Python.

Each request is served as SGLang's scheduler serves a prefill: match the prompt's cached prefix, lock it,
evict from the tree until the new tokens fit the token pool, allocate them, insert the prompt and unlock.
The cache is RadixCache, or with --tree-core the UnifiedRadixCache SGLang serves with, on that tree core
(its nodes are stamped with a logical access counter, not the clock).
A block's tokens are made from its hash id (id * 512 + position), so two prompts share exactly the
prefix blocks they share in the trace. The trace's clock stands in for time.monotonic in the cache (and
the exported strategy), so time features count the trace's seconds as Crucible's do. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from array import array
from types import SimpleNamespace

import torch
from sglang.srt.mem_cache import radix_cache
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey
from sglang.srt.mem_cache.unified_cache.components import ComponentType
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
from sglang.srt.plugins import load_plugins

BLOCK = 512
CRUCIBLE = ("search", "targets", "verifiers", "sandbox", "ui")
"""Crucible's packages: an exported module must import none of them."""


class TraceClock:
    """The trace's time in seconds, set request by request."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def requests(path: str, start: int, stop: int) -> list[tuple[float, list[int], array]]:
    """(time in s, tokens per block, prompt tokens) of requests [start, stop), stably sorted by time."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if start <= i < stop:
                rows.append(json.loads(line))
    rows.sort(key=lambda r: r["timestamp"])
    out = []
    for r in rows:
        ids, n = r["hash_ids"], r["input_length"]
        sizes = [BLOCK] * (len(ids) - 1) + [n - BLOCK * (len(ids) - 1)]
        tokens = array("q", (h * BLOCK + i for h, size in zip(ids, sizes, strict=True) for i in range(size)))
        out.append((r["timestamp"] / 1e3, sizes, tokens))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trace")
    parser.add_argument("--requests", required=True, help="START:STOP")
    parser.add_argument("--capacity-tokens", type=int, required=True)
    parser.add_argument("--policy", default="lru")
    parser.add_argument("--config", default=None, help="the policy's keyword arguments, JSON")
    parser.add_argument("--tree-core", choices=("python", "rust"), help="UnifiedRadixCache on this core")
    args = parser.parse_args()

    load_plugins()  # an exported policy registers itself here, through its entry point
    clock = TraceClock()
    radix_cache.time = SimpleNamespace(monotonic=clock, perf_counter=time.perf_counter)
    start, stop = (int(x) for x in args.requests.split(":"))
    trace = requests(args.trace, start, stop)

    allocator = TokenToKVPoolAllocator(
        args.capacity_tokens, dtype=torch.float32, device="cpu", kvcache=None, need_sort=False
    )
    params = CacheInitParams(
        disable=False,
        req_to_token_pool=None,
        token_to_kv_pool_allocator=allocator,
        page_size=1,
        eviction_policy=args.policy,
        eviction_policy_config=json.loads(args.config) if args.config else None,
    )
    if args.tree_core:
        params.tree_components = (ComponentType.FULL,)
        params.tree_core_backend = args.tree_core
        cache = UnifiedRadixCache(params)
        strategy = getattr(cache.tree_core, "eviction_strategy", None)  # the Rust core keeps its own
    else:
        cache = RadixCache(params)
        strategy = cache.eviction_strategy
    if hasattr(strategy, "clock"):
        strategy.clock = clock

    counts = dict.fromkeys(("blocks", "hit_blocks", "tokens", "hit_tokens", "evicted_tokens", "uncached"), 0)
    began = time.perf_counter()
    for now, sizes, tokens in trace:
        clock.now = now
        key = RadixKey(tokens)
        match = cache.match_prefix(MatchPrefixParams(key=key))
        cached, node = match.device_prefix_len, match.last_device_node
        lock = cache.lock(node)
        end = 0
        for size in sizes:
            end += size
            counts["blocks"] += 1
            counts["tokens"] += size
            if end <= cached:
                counts["hit_blocks"] += 1
                counts["hit_tokens"] += size
        need = len(tokens) - cached
        short = need - allocator.available_size()
        if short > 0:
            counts["evicted_tokens"] += cache.evict(EvictParams(num_tokens=short)).num_tokens_evicted
        got = min(need, allocator.available_size())
        counts["uncached"] += need - got
        if got > 0:
            fresh = allocator.alloc(got)
            value = torch.cat([cache.path_device_indices(node), fresh])
            key = RadixKey(tokens[: cached + got])  # the first `cached` values are the tree's own, locked
            cache.insert(InsertParams(key=key, value=value, prev_prefix_len=cached))
        cache.unlock(lock)
    counts["held_tokens"] = allocator.available_size() + cache.evictable_size() + cache.protected_size()
    counts["requests"] = len(trace)
    counts["seconds"] = round(time.perf_counter() - began, 3)
    counts["block_hit_rate"] = counts["hit_blocks"] / counts["blocks"]
    counts["token_hit_rate"] = counts["hit_tokens"] / counts["tokens"]
    counts["strategy"] = f"{type(strategy).__module__}.{type(strategy).__name__}" if strategy else None
    counts["crucible_modules"] = sorted(m for m in sys.modules if m.split(".")[0] in CRUCIBLE)
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
