"""The dit target's behaviour sample: scheduling points, each the options the mechanism would score there.

The mechanism starts the highest-scoring option and waits when that score is below zero (while something
runs), then scores afresh on what is left; so two scores that order every option of every point alike, and
put the same options below zero, serve any stream alike. The points are the mechanism's own (option_rows
on real clusters, request kinds and plans), so every relation of OPTION_FEATURES holds as it does in a run.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np

from .features import OPTION_FEATURES
from .plans import Request
from .pricing import Pricing, gpu_pricing
from .serving import option_rows, request_profile
from .topology import TOPOLOGIES
from .workload import MIXES, Arrival, kinds

POINTS = 32
"""Scheduling points in the sample: enough that scores which agree on a few choices but not all differ."""
CLUSTERS = ("h100-nvlink", "l40-pcie", "h100-nvlink-x2", "l40-pcie-x2")
"""One NVLink node, one PCIe node across sockets, nodes over a network: groups of every span, and clusters
where a request's fastest GPU count is not the whole cluster."""
IDLE = 0.25
"""Share of points at which every GPU is free (a request's whole-cluster plans are offered only there)."""
WAITING = (1, 6)
"""Fewest and most requests waiting at a point."""


@functools.cache
def behaviour_sample() -> tuple[tuple[Mapping[str, float], ...], ...]:
    """Seeded scheduling points (the same in every process): the options each would score."""
    rng = np.random.default_rng(29)
    requests = sorted({r for mix in MIXES for r in kinds(mix)}, key=repr)
    points = []
    while len(points) < POINTS:
        pricing = gpu_pricing(TOPOLOGIES[CLUSTERS[len(points) % len(CLUSTERS)]])
        gpus = pricing.topology.gpus
        now = float(rng.uniform(10.0, 600.0))
        count = int(rng.integers(WAITING[0], WAITING[1] + 1))
        arrivals = [_waiting(rng, requests, now, gpus, pricing) for _ in range(count)]
        arrivals.sort(key=lambda a: a.arrival_s)
        size = gpus if rng.random() < IDLE else int(rng.integers(1, gpus))
        free = sorted(rng.choice(gpus, size=size, replace=False).tolist())
        profiles = [request_profile(a.request, gpus, pricing) for a in arrivals]
        rows, _ = option_rows(now, list(range(count)), free, arrivals, profiles, gpus, pricing)
        if len(rows) > 1:
            names = OPTION_FEATURES.names
            points.append(tuple(dict(zip(names, map(float, row), strict=True)) for row in rows))
    return tuple(points)


def _waiting(
    rng: np.random.Generator, requests: list[Request], now: float, gpus: int, pricing: Pricing
) -> Arrival:
    """A request of a shipped mix waiting at `now`, its deadline a few times its fastest time alone: some
    still feasible, some already late."""
    request = requests[int(rng.integers(len(requests)))]
    alone = request_profile(request, gpus, pricing).alone_s
    waited = float(np.exp(rng.uniform(np.log(0.01), np.log(now))))
    return Arrival(request, now - waited, float(rng.uniform(1.0, 8.0)) * alone)
