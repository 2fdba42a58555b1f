"""What the prefix-cache tests of kv and kv-tiered share: random prefix trees of requests, and a key that
records every row it scores."""

from __future__ import annotations

import numba
import numpy as np
from hypothesis import strategies as st

from targets.kv.trace import Trace, build_trace
from verifiers.compiler import SIGNATURE


@st.composite
def prefix_traces(draw: st.DrawFn) -> Trace:
    """Requests that extend random earlier prefixes, so the ids form a tree with shared branches; half of them
    arrive with the one before, as many do in Mooncake traces (a key's scores are kept between those)."""
    paths: list[list[int]] = []
    next_id = 0
    records = []
    t = 0
    for line in range(draw(st.integers(1, 40))):
        base: list[int] = []
        if paths and draw(st.booleans()):
            earlier = draw(st.sampled_from(paths))
            base = earlier[: draw(st.integers(1, len(earlier)))]
        fresh = draw(st.integers(0 if base else 1, 6))
        path = base + list(range(next_id, next_id + fresh))
        next_id += fresh
        paths.append(path)
        t += draw(st.integers(0, 5000)) if draw(st.booleans()) else 0
        tokens = 512 * (len(path) - 1) + draw(st.integers(1, 512))
        records.append(
            (line + 1, {"timestamp": t, "input_length": tokens, "output_length": 1, "hash_ids": path})
        )
    return build_trace(records, source="generated")


@numba.njit(SIGNATURE)
def recording_lru(X: np.ndarray, j: int, P: np.ndarray) -> float:
    """LRU that copies every row it scores into P (P[0] counts them), so a test can read the features."""
    n, width = int(P[0]), X.shape[1]
    if 1 + (n + 1) * width <= P.shape[0]:
        P[1 + n * width : 1 + (n + 1) * width] = X[j]
        P[0] = n + 1
    return X[j, 1]
