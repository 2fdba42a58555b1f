"""Serving DiT requests on a GPU cluster; the policy is one score per (request, GPU group, plan) option.

Mechanism:
- requests wait in arrival order; a scheduling point is an arrival or a completion;
- at each point, for each of the first WINDOW waiting requests and each GPU count that is a power of two
  up to the free GPUs, the group is the most compact set of free GPUs of that size (best fit within a
  socket, then within a node, then the nodes with the most free GPUs), and the options are the request's
  TOP_PLANS fastest valid plans on that group (xDiT's rules, memory included: see plans.py);
- every option is scored with score(o, p); the highest starts (ties: the earlier request, then fewer
  GPUs), its GPUs are busy until its predicted end, and scoring repeats while GPUs are free;
- a best score below zero means "wait for more GPUs", honoured only while something runs, so an idle
  cluster always starts work;
- the policy only ranks: a plan is valid before it is offered, so no score can start an invalid one.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from numba import njit, types

from verifiers.compiler import FUNCTION_TYPE

from .cost import StepCost, ranked
from .features import OPTION_FEATURES
from .plans import Plan, Request
from .pricing import Pricing
from .topology import Topology
from .workload import Arrival

WINDOW = 32
"""Waiting requests considered per scheduling point, oldest first (a bound on the options scored)."""
TOP_PLANS = 3
"""Plans offered per request and group: its fastest valid ones there."""
WAIT_BELOW = 0.0
"""A best score below this waits for more GPUs (only while something runs)."""
_COLUMNS = OPTION_FEATURES.columns()


def compact_group(topology: Topology, free: Sequence[int], size: int) -> tuple[int, ...] | None:
    """`size` free GPUs as close together as they can be: best fit in one socket, then in one node, then
    from the nodes with the most free GPUs; None if fewer are free."""
    if size > len(free):
        return None
    for level in (topology.socket_of, topology.node_of):
        buckets: dict[int, list[int]] = {}
        for g in free:
            buckets.setdefault(level(g), []).append(g)
        fitting = [b for b in buckets.values() if len(b) >= size]
        if fitting:
            return tuple(sorted(min(fitting, key=len)[:size]))
    by_node: dict[int, list[int]] = {}
    for g in free:
        by_node.setdefault(topology.node_of(g), []).append(g)
    chosen: list[int] = []
    for bucket in sorted(by_node.values(), key=len, reverse=True):
        chosen += bucket[: size - len(chosen)]
        if len(chosen) == size:
            break
    return tuple(sorted(chosen))


def canonical(topology: Topology, group: Sequence[int]) -> tuple[int, ...]:
    """The group renumbered onto the first nodes and sockets, keeping its shape: groups of one shape cost
    the same, so plans are priced once per shape."""
    nodes = sorted({topology.node_of(g) for g in group})
    out = []
    for g in group:
        node = nodes.index(topology.node_of(g))
        sockets = sorted({topology.socket_of(x) for x in group if topology.node_of(x) == topology.node_of(g)})
        socket = sockets.index(topology.socket_of(g))
        peers = sorted(x for x in group if topology.socket_of(x) == topology.socket_of(g))
        out.append(node * topology.gpus_per_node + socket * topology.gpus_per_socket + peers.index(g))
    return tuple(sorted(out))


@functools.lru_cache(maxsize=4096)
def plan_table(request: Request, shape: tuple[int, ...], pricing: Pricing) -> tuple[StepCost, ...]:
    """The valid plans of a request on a group of this shape, fastest first."""
    return tuple(ranked(request, shape, pricing))


@dataclass(frozen=True)
class Alone:
    """What the mechanism and the policy know of one kind of request before it is served."""

    alone_s: float
    fastest_gpus: int
    least_gpu_s: float


@functools.lru_cache(maxsize=1024)
def request_profile(request: Request, gpus: int, pricing: Pricing) -> Alone:
    """Its fastest plan alone on the first `gpus` GPUs (any count), and its least GPU-seconds."""
    best: tuple[float, int] = (math.inf, 0)
    frugal = math.inf
    everything = list(range(gpus))
    for size in range(1, gpus + 1):
        group = compact_group(pricing.topology, everything, size)
        table = plan_table(request, canonical(pricing.topology, group or ()), pricing)
        if table:
            best = min(best, (table[0].total_s, size))
            frugal = min(frugal, table[0].total_s * size)
    if not math.isfinite(best[0]):
        raise ValueError(f"{request.model.name} has no valid plan on {gpus} GPUs of {pricing.topology.name}")
    return Alone(best[0], best[1], frugal)


@dataclass(frozen=True)
class Started:
    """One decision: a request started on a group under a plan, priced part by part."""

    request: int
    at: float
    cost: StepCost

    @property
    def plan(self) -> Plan:
        return self.cost.plan

    @property
    def predicted_s(self) -> float:
        return self.cost.total_s


@dataclass(frozen=True)
class Served:
    """What happened to every request of a stream."""

    arrival: np.ndarray
    deadline: np.ndarray
    """Absolute."""
    finish: np.ndarray
    """NaN if unfinished at the horizon."""
    starts: tuple[Started, ...]
    gpus: int
    end_s: float


def _score_rows(key, X, P, out):  # type: ignore[no-untyped-def]
    for i in range(X.shape[0]):
        out[i] = key(X, i, P)


@functools.cache
def score_all() -> Callable[..., None]:
    """Every option's score in one compiled loop, compiled once per process (not at import)."""
    signature = types.void(FUNCTION_TYPE, types.float64[:, ::1], types.float64[::1], types.float64[::1])
    return njit(signature, cache=True)(_score_rows)


Options = tuple[np.ndarray, list[tuple[int, StepCost]]]


def option_rows(
    now: float, waiting: list[int], free: list[int], arrivals: Sequence[Arrival], profiles: Sequence[Alone],
    gpus: int, pricing: Pricing,
) -> Options:  # fmt: skip
    """The feature rows of every option at `now`, and what each would start."""
    topology = pricing.topology
    rows: list[list[float]] = []
    chosen: list[tuple[int, StepCost]] = []
    sizes = [1 << k for k in range(len(free).bit_length()) if 1 << k <= len(free)]
    groups = {n: compact_group(topology, free, n) for n in sizes}
    for r in waiting[:WINDOW]:
        a, prof = arrivals[r], profiles[r]
        deadline = a.arrival_s + a.deadline_s
        for n, group in groups.items():
            assert group is not None
            table = plan_table(a.request, canonical(topology, group), pricing)
            slow = float(topology.span(group) not in (topology.socket_link.name, "-"))
            for rank, cost in enumerate(table[:TOP_PLANS]):
                p, gpu_s, model = cost.plan, cost.total_s * n, a.request.model
                rows.append([
                    now, a.arrival_s, now - a.arrival_s, deadline, deadline - now, cost.total_s,
                    deadline - now - cost.total_s, prof.alone_s, n, prof.fastest_gpus, float(rank == 0),
                    cost.comm_share, p.ulysses, p.ring, p.cfg, p.pipefusion, p.tensor, gpu_s,
                    min(1.0, prof.least_gpu_s / gpu_s), model.params / 1e9, float(model.video),
                    a.request.sequence, a.request.steps, len(free), gpus, len(waiting), slow,
                ])  # fmt: skip
                chosen.append((r, replace(cost, plan=replace(p, gpus=group))))
    return np.array(rows, dtype=np.float64).reshape(len(rows), len(_COLUMNS)), chosen


def serve(
    arrivals: Sequence[Arrival], gpus: int, pricing: Pricing, key: Callable[..., float], params: np.ndarray,
    horizon_s: float,
) -> Served:  # fmt: skip
    """Replay the stream on the first `gpus` GPUs of the topology until every request ends or the horizon."""
    profiles = [request_profile(a.request, gpus, pricing) for a in arrivals]
    n = len(arrivals)
    arrival = np.array([a.arrival_s for a in arrivals])
    finish = np.full(n, np.nan)
    free = list(range(gpus))
    running: list[tuple[float, int, tuple[int, ...]]] = []  # (end, request, group)
    waiting: list[int] = []
    starts: list[Started] = []
    now, upcoming = 0.0, 0
    while now <= horizon_s:
        while upcoming < n and arrivals[upcoming].arrival_s <= now:
            waiting.append(upcoming)
            upcoming += 1
        while free and waiting:
            X, chosen = option_rows(now, waiting, free, arrivals, profiles, gpus, pricing)
            if not chosen:
                break
            scores = np.empty(len(chosen))
            score_all()(key, X, params, scores)
            scores = np.where(np.isnan(scores), -np.inf, scores)
            best = int(np.argmax(scores))  # the first of equals: earlier request, then fewer GPUs
            if scores[best] < WAIT_BELOW and running:
                break
            r, cost = chosen[best]
            group = cost.plan.gpus
            starts.append(Started(r, now, cost))
            running.append((now + cost.total_s, r, group))
            free = [g for g in free if g not in group]
            waiting.remove(r)
        next_arrival = arrivals[upcoming].arrival_s if upcoming < n else math.inf
        next_end = min((end for end, _, _ in running), default=math.inf)
        if not math.isfinite(min(next_arrival, next_end)):
            break
        now = min(next_arrival, next_end)
        for item in [x for x in running if x[0] <= now]:
            running.remove(item)
            finish[item[1]] = item[0]
            free = sorted(free + list(item[2]))
    deadline = arrival + np.array([a.deadline_s for a in arrivals])
    return Served(arrival, deadline, finish, tuple(starts), gpus, min(now, horizon_s))


METRICS = ("slo_attainment", "latency_mean_s", "latency_p99_s", "gpu_utilization", "unfinished")
TIME_PARTS = {
    "compute": ("gemm", "elementwise", "attention"),
    "dispatch": ("dispatch",),
    "ulysses": ("ulysses_all_to_all",),
    "ring": ("ring_p2p",),
    "tensor": ("tensor_all_reduce",),
    "pipefusion": ("pipefusion_p2p", "pipeline_bubble", "warmup", "pipeline_fill"),
    "cfg": ("cfg_all_gather",),
    "outside": ("outside",),
}
"""The served GPU time's parts (cost.py's, grouped by what they are spent on): the `time_<part>` metrics are
their shares of every busy GPU-second, over the plans the policy chose."""


def time_shares(served: Served) -> dict[str, float]:
    """Where the chosen plans' GPU time went, as shares of it: `crucible dit plan --explain`, summed over the
    starts (each weighted by its GPUs and the part of it served before the end)."""
    spent = dict.fromkeys(TIME_PARTS, 0.0)
    for start in served.starts:
        c = start.cost
        seconds = {**{k: c.pipelined_steps * v for k, v in c.parts.items()}, **c.once}
        weight = c.plan.degree * min(1.0, (served.end_s - start.at) / c.total_s) if c.total_s > 0 else 0.0
        for group, names in TIME_PARTS.items():
            spent[group] += weight * sum(seconds[n] for n in names)
    total = sum(spent.values())
    return {f"time_{k}": v / total if total > 0 else 0.0 for k, v in spent.items()}


def serving_metrics(served: Served) -> dict[str, float]:
    """SLO attainment (finished by the deadline), latency (unfinished: up to the end), GPU busy share, and
    the busy time's shares by part (time_shares)."""
    end = served.end_s
    finish = np.where(np.isnan(served.finish), end, served.finish)
    latency = finish - served.arrival
    ok = ~np.isnan(served.finish) & (served.finish <= served.deadline + 1e-9)
    busy = sum(min(s.predicted_s, end - s.at) * s.plan.degree for s in served.starts)
    span = max(end - float(served.arrival.min()), 1e-9)
    return {
        "slo_attainment": float(ok.mean()),
        "latency_mean_s": float(latency.mean()),
        "latency_p99_s": float(np.percentile(latency, 99)),
        "gpu_utilization": float(busy / (served.gpus * span)),
        "unfinished": float(np.isnan(served.finish).sum()),
        **time_shares(served),
    }
