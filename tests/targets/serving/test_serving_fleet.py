"""The fleet's mechanism: one instance is the batching simulator, a cached prefix skips its prefill, memory
holds, the router's decision is the key's, and each instance evicts by its key."""

from __future__ import annotations

import numpy as np
import pytest

from targets.batching.compiled_scheduler import Pricing, serve_priced
from targets.batching.kernels import cost_model
from targets.batching.scheduler import Limits
from targets.batching.trace import Requests
from targets.serving.fleet import ROUND_ROBIN, Fleet, Policies, Prefixes, replay
from targets.serving.target import DEFAULT_SOURCE, compiled_keys

BT = 16
SLO = (5.0, 0.5)
PRICING = Pricing.of(cost_model(on="h100-llama3-8b"), 256, 64)
NONE = np.zeros(0)


def keys(
    route: str = "-s.outstanding",
    priority: str = "r.waiting",
    evict: str = "b.last_access",
) -> Policies:
    source = (
        '"""A test policy."""\n\n\n'
        f"def route(s, p):\n    return {route}\n\n\n"
        f"def priority(r, p):\n    return {priority}\n\n\n"
        f"def evict(b, p):\n    return {evict}\n"
    )
    r, q, e = compiled_keys(source)
    return Policies(r, NONE, q, NONE, e, NONE)


def trace(prompts: list[list[int]], arrivals: list[float], outputs: list[int] | None = None) -> tuple:
    """Requests whose prompts are the given chains of block ids (each a full block of BT tokens)."""
    ids: dict[tuple[int, ...], int] = {}
    parent, depth, blocks, offsets = [], [], [], [0]
    for prompt in prompts:
        for k in range(len(prompt)):
            chain = tuple(prompt[: k + 1])
            if chain not in ids:
                ids[chain] = len(ids)
                parent.append(ids[chain[:-1]] if k else -1)
                depth.append(k + 1)
            blocks.append(ids[chain])
        offsets.append(len(blocks))
    n = len(prompts)
    out = np.array(outputs or [4] * n, dtype=np.int64)
    requests = Requests(np.array(arrivals, dtype=float), np.array([len(p) * BT for p in prompts]), out)
    first = np.array([blocks[offsets[r]] for r in range(n)], dtype=np.int64)
    a = np.asarray
    prefixes = Prefixes(
        a(offsets, np.int64), a(blocks, np.int64), a(parent, np.int64), a(depth, np.int64), first
    )
    return requests, prefixes


def run(
    requests: Requests,
    prefixes: Prefixes,
    n: int = 1,
    pool: int = 64,
    policies: Policies | None = None,
    follow: list[int] | None = None,
):
    fleet = Fleet(n, Limits(pool, BT, 256, 64), 1e-5)
    routes = None if follow is None else np.array(follow, dtype=np.int64)
    return replay(requests, prefixes, fleet, policies or keys(), PRICING, SLO, 1e6, follow=routes)


def distinct_requests(n: int = 60) -> tuple:
    rng = np.random.default_rng(0)
    prompts = [[1000 * r + k for k in range(int(rng.integers(1, 12)))] for r in range(n)]
    arrivals = np.cumsum(rng.exponential(0.02, n)).tolist()
    return trace(prompts, arrivals, rng.integers(1, 40, n).tolist())


def test_one_instance_without_shared_prefixes_is_the_batching_simulator() -> None:
    requests, prefixes = distinct_requests()
    fleet = run(requests, prefixes, pool=400).served
    alone = serve_priced(requests, Limits(400, BT, 256, 64), keys().schedule, NONE, PRICING, SLO, 1e6)
    assert fleet.iterations == alone.iterations
    np.testing.assert_array_equal(fleet.first_token, alone.first_token)
    np.testing.assert_array_equal(fleet.finish, alone.finish)


def test_a_preempted_request_finds_its_own_prefix_cached_and_recomputes_less() -> None:
    requests, prefixes = distinct_requests()
    fleet = run(requests, prefixes, pool=40).served
    alone = serve_priced(requests, Limits(40, BT, 256, 64), keys().schedule, NONE, PRICING, SLO, 1e6)
    assert fleet.preemptions.sum() > 0 and alone.preemptions.sum() > 0  # the small pool made both preempt
    assert fleet.end_s <= alone.end_s
    assert fleet.unfinished == alone.unfinished == 0


def test_a_cached_prefix_skips_its_prefill() -> None:
    shared = list(range(200))
    requests, prefixes = trace([[*shared, 500], [*shared, 600]], [0.0, 10.0])
    replayed = run(requests, prefixes, pool=420)
    assert replayed.hit_tokens.tolist() == [0.0, 200 * BT]
    ttft = replayed.served.first_token - replayed.served.arrival
    assert ttft[1] < ttft[0] / 3


def test_a_prompt_is_never_all_hit_its_last_token_is_computed() -> None:
    requests, prefixes = trace([[1, 2, 3], [1, 2, 3]], [0.0, 1.0])
    assert run(requests, prefixes).hit_tokens.tolist() == [0.0, 2 * BT]


def test_every_request_finishes_in_a_pool_barely_larger_than_the_longest() -> None:
    rng = np.random.default_rng(1)
    roots = [list(range(100 * s, 100 * s + 6)) for s in range(5)]
    prompts = [roots[int(rng.integers(5))] + [10_000 + r, 20_000 + r] for r in range(80)]
    requests, prefixes = trace(prompts, np.cumsum(rng.exponential(0.01, 80)).tolist(), [30] * 80)
    replayed = run(requests, prefixes, n=2, pool=12)
    assert replayed.served.unfinished == 0
    assert replayed.hit_tokens.sum() > 0


def test_least_outstanding_spreads_and_a_prefix_key_follows_the_cache() -> None:
    shared = list(range(8))
    prompts = [[*shared, 100 + r] for r in range(6)]
    arrivals = [float(r) * 10 for r in range(6)]  # each finishes before the next arrives
    requests, prefixes = trace(prompts, arrivals)
    spread = run(requests, prefixes, n=3, policies=keys(route="-s.tree_blocks")).routed
    assert sorted(set(spread.tolist())) == [0, 1, 2]
    follow = run(requests, prefixes, n=3, policies=keys(route="s.cached_blocks")).routed
    assert follow.tolist() == [0] * 6  # the first goes to instance 0 (a tie), and the prefix stays there


def test_a_recorded_routing_is_followed_while_the_key_still_scores_every_instance() -> None:
    shared = list(range(8))
    requests, prefixes = trace([[*shared, 100 + r] for r in range(4)], [10.0 * r for r in range(4)])
    alone = run(requests, prefixes, n=3, policies=keys(route="s.cached_blocks"))
    assert alone.routed.tolist() == [0, 0, 0, 0]
    assert alone.best.tolist() == [0b111, 0b001, 0b001, 0b001]  # a tie at first, then the cache
    followed = run(requests, prefixes, n=3, policies=keys(route="s.cached_blocks"), follow=[2, 1, 1, 0])
    assert followed.routed.tolist() == [2, 1, 1, 0]
    assert followed.best.tolist() == [0b111, 0b100, 0b110, 0b110]  # the key's view of the followed fleet


def test_a_replay_stopped_before_a_request_is_the_fleet_that_request_meets() -> None:
    requests, prefixes = distinct_requests(20)
    fleet = Fleet(2, Limits(400, BT, 256, 64), 1e-5)
    whole = replay(requests, prefixes, fleet, keys(), PRICING, SLO, 1e6)
    cut = replay(requests, prefixes, fleet, keys(), PRICING, SLO, 1e6, stop_before=12)
    assert (cut.routed[12:] == -1).all() and (cut.routed[:12] == whole.routed[:12]).all()
    finished = whole.served.finish[:12] <= requests.arrival_s[12]
    np.testing.assert_array_equal(cut.served.finish[:12][finished], whole.served.finish[:12][finished])
    assert np.isnan(cut.served.finish[:12][~finished]).all()


def test_round_robin_is_built_in() -> None:
    requests, prefixes = trace([[r] for r in range(7)], [0.1 * r for r in range(7)])
    policies = keys()
    rr = Policies(policies.route, NONE, policies.schedule, NONE, policies.evict, NONE, ROUND_ROBIN)
    assert run(requests, prefixes, n=3, policies=rr).routed.tolist() == [0, 1, 2, 0, 1, 2, 0]


@pytest.mark.parametrize(("evict", "hits"), [("b.last_access", (3, 4)), ("-b.last_access", (4, 3))])
def test_each_instance_evicts_the_lowest_score_first(evict: str, hits: tuple[int, int]) -> None:
    a, b, c = [1, 2, 3, 4, 90], [5, 6, 7, 8, 91], [300, 301, 302, 303, 304]
    # A pool of 14 blocks caches a and b (5 blocks each); c (6 blocks with its output) evicts two:
    # least recently used, a's last two; most recently used, b's.
    found = []
    for again in ([1, 2, 3, 4, 92], [5, 6, 7, 8, 93]):
        requests, prefixes = trace([a, b, c, again], [0.0, 10.0, 20.0, 30.0], [2] * 4)
        found.append(run(requests, prefixes, pool=14, policies=keys(evict=evict)).hit_tokens[3] / BT)
    assert tuple(found) == hits


def test_the_default_policies_compile() -> None:
    assert len(compiled_keys(DEFAULT_SOURCE)) == 3
