"""Toy workloads: `gen:<seed>`, a stream of keys with a popular few and a scan now and then."""

from __future__ import annotations

import functools
import random

from targets.base import WorkloadError

REQUESTS = 2000


def keys(workload: str) -> tuple[int, ...]:
    """The key stream a workload names; WorkloadError for anything but gen:<seed>."""
    kind, _, seed = workload.partition(":")
    if kind != "gen" or not seed.isdigit():
        raise WorkloadError(f"toy workloads are gen:<seed>, got {workload!r}")
    return _generated(int(seed))


@functools.cache
def _generated(seed: int) -> tuple[int, ...]:
    rng = random.Random(seed)
    stream: list[int] = []
    while len(stream) < REQUESTS:
        if rng.random() < 0.05:  # a scan of keys used once: recency alone keeps them too long
            start = rng.randrange(1000, 100_000)
            stream += range(start, start + 12)
        else:
            stream.append(int(rng.paretovariate(1.2)) % 40)
    return tuple(stream[:REQUESTS])
