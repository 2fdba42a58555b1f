"""The kv target in SGLang: `priority(b, p)` as the eviction strategy of SGLang's radix cache.

SGLang evicts whole tree nodes (an edge of any number of tokens), Crucible blocks of 512 tokens; the module
scores a node as its last block, the one Crucible would evict first, with the node's own counters. What
SGLang's nodes carry (last_access_time, creation_time, hit_count, key, parent) gives the time features, the
hits and the block position; ghost history is kept by the strategy itself (a node dropped from the tree
leaves its blocks' hashes behind). Features that need the history of accesses, the siblings or the whole
population are not on a node: a program reading them is refused.
"""

from __future__ import annotations

from targets.export import Export

SGLANG_VERSION = "0.5.23"

_SGLANG_FEATURES = {
    "now": "now",
    "last_access": "node.last_access_time",
    "inserted_at": "node.creation_time",
    "age": "now - node.last_access_time",
    "lifetime": "now - node.creation_time",
    "hits": "max(node.hit_count - 1, 0)",
    "depth": "self._last_block(node)[0]",
    "tokens": "self._last_block(node)[1]",
    "prefix_tokens": "self._last_block(node)[2]",
    "evictions": "self._ghost(node, now)[0]",
    "since_evicted": "self._ghost(node, now)[1]",
    "parent_age": "self._parent_age(node, now)",
}
"""Each feature SGLang's tree node gives, as an expression in Strategy._features (hit_count counts the
insertion that created the node, so hits, which count reuses, is one less)."""

_SGLANG_TEMPLATE = '''"""$name: a Crucible kv policy as an eviction strategy of SGLang's radix cache.

Exported by `crucible export` from $origin. SGLang evicts the evictable leaf node with the lowest
priority first, as Crucible evicts its lowest-scored block; a node is scored as its last block of
BLOCK_TOKENS tokens. PARAMS are the tuned constants; --radix-eviction-policy-config '{"name": value}'
overrides them (and BLOCK_TOKENS, as "block_tokens").

Load: `pip install` the folder holding this file into SGLang's environment (its entry point in the
`sglang.srt.plugins` group calls register()), then start SGLang with its Python radix tree core:
    SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python python -m sglang.launch_server \\
        --model-path MODEL --radix-eviction-policy $name
"""

import math
import time
import weakref
from types import SimpleNamespace

from sglang.srt.mem_cache.evict_policy import EvictionStrategy

$prelude

NAME = "$name"
PARAMS = $params
BLOCK_TOKENS = 512
"""Tokens per block in Crucible's features (depth, tokens, ghost history)."""
NEVER_S = 1.0e6
"""since_evicted of a block never evicted, as in Crucible."""


$function

class Strategy(EvictionStrategy):
    """Scores a node by priority(b, p) over the features of its last block."""

    def __init__(self, block_tokens=BLOCK_TOKENS, **params):
        unknown = sorted(set(params) - set(PARAMS))
        if unknown:
            raise ValueError(f"{NAME}: unknown parameters {unknown}; it has {sorted(PARAMS)}")
        self.params = SimpleNamespace(**{**PARAMS, **{k: float(v) for k, v in params.items()}})
        self.block_tokens = int(block_tokens)
        self.clock = time.monotonic  # the clock RadixCache stamps its nodes with
        self._ghosts = {}  # block hash -> (times evicted, time of the latest eviction)

    def get_priority(self, node):
        now = self.clock()
        try:
            score = float(priority(self._features(node, now), self.params))
        except (ArithmeticError, ValueError):  # a math domain error ranks lowest, as NaN does in Crucible
            return -math.inf
        return -math.inf if math.isnan(score) else score

    def _features(self, node, now):
        return SimpleNamespace(
$features        )

    def _last_block(self, node):
        """(depth, tokens, prefix tokens) of the node's last block: its position counts from the root."""
        end = _end(node)
        depth = -(-end // self.block_tokens)
        return depth, end - self.block_tokens * (depth - 1), end

    def _parent_age(self, node, now):
        """now - the latest access of the block before the node's last block (0 for a first block)."""
        depth = self._last_block(node)[0]
        if depth == 1:
            return 0.0
        before = (depth - 1) * self.block_tokens  # the parent block ends here
        start = _end(node) - len(node.key)
        while start >= before:  # the parent block lies in an ancestor
            node = node.parent
            start -= len(node.key)
        return now - node.last_access_time

    def _ghost(self, node, now):
        """(evictions, since_evicted) of the node's blocks: the most evicted and the latest eviction."""
        evictions, latest = 0, None
        for block in self._blocks(node):
            count, at = self._ghosts.get(block, (0, None))
            evictions = max(evictions, count)
            if at is not None and (latest is None or at > latest):
                latest = at
        return evictions, NEVER_S if latest is None else min(now - latest, NEVER_S)

    def _blocks(self, node):
        """Hashes of the blocks that end in the node, each a hash of its tokens and the prefix before it.

        Kept on the node while its key is unchanged (a split shortens it); the first time, a finalizer is
        attached: RadixCache drops an evicted node, so when the node goes its blocks become ghosts.
        """
        held = node.__dict__.get("_crucible_blocks")
        if held is not None and held[0] == len(node.key):
            return held[1]
        tokens = []
        for part in reversed(_path(node)):
            tokens.extend(part.key)
        end, start = len(tokens), len(tokens) - len(node.key)
        blocks, chain = [], 0
        for first in range(0, end, self.block_tokens):
            last = min(first + self.block_tokens, end)
            chain = hash((chain, tuple(tokens[first:last])))
            if last > start:
                blocks.append(chain)
        if held is None:
            held = [len(node.key), blocks]
            node._crucible_blocks = held
            weakref.finalize(node, self._evicted, held)
        else:
            held[0], held[1] = len(node.key), blocks
        return blocks

    def _evicted(self, held):
        now = self.clock()
        for block in held[1]:
            count = self._ghosts.get(block, (0, None))[0]
            self._ghosts[block] = (count + 1, now)


def _path(node):
    """The node and its ancestors below the root, deepest first."""
    path = []
    while node.parent is not None:
        path.append(node)
        node = node.parent
    return path


def _end(node):
    """Tokens from the root to the end of the node."""
    return sum(len(n.key) for n in _path(node))


def register():
    """Add NAME to SGLang's eviction policies; SGLang's plugin loader calls it in every process."""
    from sglang.srt.arg_groups.choices import RADIX_EVICTION_POLICY_CHOICES, add_radix_eviction_policy_choices
    from sglang.srt.mem_cache import utils

    if NAME not in RADIX_EVICTION_POLICY_CHOICES:
        add_radix_eviction_policy_choices([NAME])
    utils._EVICTION_POLICY_FACTORIES[NAME] = Strategy  # SGLang has no public registration call yet
'''

SGLANG = Export(
    engine="sglang",
    title=f"SGLang {SGLANG_VERSION}'s radix tree node",
    signature="priority",
    features=_SGLANG_FEATURES,
    template=_SGLANG_TEMPLATE,
    entry_point=("sglang.srt.plugins", "register"),
    load="pip install DIR into SGLang's environment, then start it with "
    "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python and --radix-eviction-policy $name",
)
