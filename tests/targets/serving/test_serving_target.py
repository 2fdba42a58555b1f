"""The serving target on the shipped Mooncake trace: the production routers order as their papers report,
a run searches only the decisions it names, and bad options are one line."""

from __future__ import annotations

import functools

import pytest

from targets.base import Instance, OptionError, WorkloadError
from targets.serving.target import ServingTarget
from verifiers.static import check

TARGET = ServingTarget()
WORKLOAD = TARGET.default_config()["workload"]


def instance(**config: object) -> Instance:
    return TARGET.instances(WORKLOAD, {"requests": "0:3000", **config})[1]


@functools.cache
def baseline(name: str) -> dict[str, float]:
    if name in TARGET.builtin_baselines():
        return TARGET.evaluate_builtin(name, instance())
    return TARGET.evaluate(check(TARGET.baselines()[name], TARGET.signatures), instance(), {})


def test_mooncake_reports_cache_aware_below_load_balancing_below_random_in_mean_ttft() -> None:
    # Qin et al., FAST'25, figure 9: random, load balancing, cache-aware, Conductor's KVCache-centric.
    assert (
        baseline("mooncake_conductor")["ttft_mean_ms"]
        < baseline("least_outstanding")["ttft_mean_ms"]
        < baseline("random")["ttft_mean_ms"]
    )


def test_sglang_reports_cache_aware_hit_rates_far_above_round_robin() -> None:
    assert baseline("sglang_cache_aware")["hit_rate"] > 2 * baseline("round_robin")["hit_rate"]


def test_capacity_is_the_objective_and_every_baseline_has_one() -> None:
    assert TARGET.objective.metric == "capacity"
    assert all(baseline(name)["capacity"] > 0 for name in ("round_robin", "mooncake_conductor"))
    assert baseline("mooncake_conductor")["capacity"] > baseline("round_robin")["capacity"]


def test_the_upper_reference_is_a_bound_above_every_router() -> None:
    assert TARGET.oracles() == ("work_bound",)
    bound = baseline("work_bound")["capacity"]
    assert bound > max(baseline(n)["capacity"] for n in ("mooncake_conductor", "llmd_weighted", "dynamo_kv"))


ODD = '''"""Routes everything to the last instance, serves the newest first, evicts the most recent."""


def route(s, p):
    return s.instance


def priority(r, p):
    return -r.waiting


def evict(b, p):
    return -b.last_access
'''


def program(route: str, priority: str, evict: str) -> str:
    return (
        '"""A mix."""\n\n\n'
        f"def route(s, p):\n    return {route}\n\n\n"
        f"def priority(r, p):\n    return {priority}\n\n\n"
        f"def evict(b, p):\n    return {evict}\n"
    )


ODD = ("s.instance", "-r.waiting", "-b.last_access")
"""Everything to the last instance, the newest first, the most recent evicted."""
DEFAULT = ("-s.outstanding", "r.waiting", "b.last_access")


@pytest.mark.parametrize(("search", "searched"), [("route", 0), ("schedule", 1), ("evict", 2)])
def test_a_run_puts_to_work_only_the_decision_it_searches(search: str, searched: int) -> None:
    odd = check(program(*ODD), TARGET.signatures)
    mixed = check(program(*(ODD[k] if k == searched else DEFAULT[k] for k in range(3))), TARGET.signatures)
    alone = TARGET.evaluate(odd, instance(requests="0:400", search=search), {})
    assert alone == TARGET.evaluate(mixed, instance(requests="0:400", search="all"), {})
    assert alone != TARGET.evaluate(odd, instance(requests="0:400", search="all"), {})


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"instances": 0}, OptionError),
        ({"instances": 1000}, OptionError),
        ({"search": "everything"}, OptionError),
        ({"deployment": "cpu"}, OptionError),
        ({"capacity": 3}, WorkloadError),
    ],
)
def test_bad_options_are_one_line(config: dict[str, object], error: type[Exception]) -> None:
    from targets.base import resolve_options

    with pytest.raises(error) as raised:
        TARGET.instances(WORKLOAD, resolve_options(TARGET.options, config))
    assert "\n" not in str(raised.value)


def test_a_pool_larger_than_the_trace_costs_no_more_memory_than_the_trace() -> None:
    huge = TARGET.evaluate(
        check(program(*DEFAULT), TARGET.signatures), instance(requests="0:200", capacity=10**12), {}
    )
    assert huge["preemptions"] == 0 and huge["capacity"] > 0
