"""What the exported strategy reads off SGLang's real tree nodes; run by SGLang's own Python.

Builds a RadixCache (page size 1) and the strategy named on the command line (a program reading every
feature SGLang exposes, block_tokens 4), then on the trace clock: inserts A = 1..10 at t=10 and B = 1..6,
50, 51, 52 at t=20 (splitting A into U = 1..6 and A' = 7..10; B' = 50..52), evicts everything at t=30 and
inserts A again at t=40. Prints one JSON line: the features of U, A' and B' at t=25 and of the new A at
t=45, as the strategy computes them.
"""

from __future__ import annotations

import argparse
import json
import time
from array import array
from types import SimpleNamespace

import torch
from sglang.srt.mem_cache import radix_cache
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey
from sglang.srt.plugins import load_plugins


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--policy", required=True)
    args = parser.parse_args()
    load_plugins()
    now = [0.0]
    radix_cache.time = SimpleNamespace(monotonic=lambda: now[0], perf_counter=time.perf_counter)
    allocator = TokenToKVPoolAllocator(64, dtype=torch.float32, device="cpu", kvcache=None, need_sort=False)
    params = CacheInitParams(
        disable=False,
        req_to_token_pool=None,
        token_to_kv_pool_allocator=allocator,
        page_size=1,
        eviction_policy=args.policy,
        eviction_policy_config={"block_tokens": 4},
    )
    cache = RadixCache(params)
    strategy = cache.eviction_strategy
    strategy.clock = lambda: now[0]

    def serve(tokens: list[int]) -> None:
        key = RadixKey(array("q", tokens))
        match = cache.match_prefix(MatchPrefixParams(key=key))
        fresh = allocator.alloc(len(tokens) - match.device_prefix_len)
        value = torch.cat([cache.path_device_indices(match.last_device_node), fresh])
        cache.insert(InsertParams(key=key, value=value))

    def features(n) -> dict[str, float]:
        strategy.get_priority(n)  # scored as at an eviction: the strategy starts watching the node
        return {k: float(v) for k, v in vars(strategy._features(n, now[0])).items()}

    a, b = list(range(1, 11)), [1, 2, 3, 4, 5, 6, 50, 51, 52]
    now[0] = 10.0
    serve(a)
    now[0] = 20.0
    serve(b)
    now[0] = 25.0
    leaves = {"A'": cache.root_node.children[1].children[7], "B'": cache.root_node.children[1].children[50]}
    shown = {"U": features(cache.root_node.children[1]), **{k: features(v) for k, v in leaves.items()}}
    del leaves
    now[0] = 30.0
    evicted = cache.evict(EvictParams(num_tokens=64)).num_tokens_evicted
    now[0] = 40.0
    serve(a)
    now[0] = 45.0
    shown["A again"] = features(cache.root_node.children[1])
    print(json.dumps({"features": shown, "evicted": evicted}))


if __name__ == "__main__":
    main()
