"""The serving target: a router over N batching instances with prefix caches, on a named GPU deployment."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from targets.base import (
    MOST,
    WINDOW,
    Decisions,
    FeatureRegistry,
    Instance,
    Objective,
    Option,
    OptionError,
    Reference,
    TargetBase,
    Validation,
    WorkloadError,
    request_window,
)
from targets.batching.capacity import GOAL, capacity
from targets.batching.compiled_scheduler import Pricing
from targets.batching.kernels import cost_model
from targets.batching.scheduler import Limits
from targets.batching.trace import Requests
from targets.costmodel.model import DEFAULT_PROFILE
from targets.deployments.catalog import CPU, DEFAULT, SERVING, deployment
from targets.export import Export
from verifiers.compiler import param_vector, to_numba
from verifiers.program import Program, Signature
from verifiers.properties import Property
from verifiers.static import check

from .behaviour import evict_sample, priority_sample, route_sample
from .export import router_export
from .features import EVICT_FEATURES, ROUTE_FEATURES, SCHEDULE_COLUMNS, SCHEDULE_FEATURES
from .fleet import BY_KEY, POWER_OF_TWO, PREFIX_HASH, RANDOM, ROUND_ROBIN, Fleet, Policies, Prefixes, replay
from .metrics import fleet_metrics, fleet_timelines
from .properties import PROPERTIES
from .sources import Keyed, Sources
from .validation import validation_of
from .workload import request_count, requests_of, shipped_workload_path

ROUTE = Signature(
    name="route",
    features=ROUTE_FEATURES.names,
    state_arg="s",
    doc="Score one instance for the arriving request (s: the request against that instance's state); the "
    "highest score gets the request, ties the first instance.",
)
PRIORITY = Signature(
    name="priority",
    features=SCHEDULE_FEATURES.names,
    state_arg="r",
    doc="Score a live request on its instance; the highest is served (and admitted) first, the lowest "
    "preempted first.",
)
EVICT = Signature(
    name="evict",
    features=EVICT_FEATURES.names,
    state_arg="b",
    doc="Score a cached block no running request holds; the lowest is evicted first.",
)
SIGNATURES = (ROUTE, PRIORITY, EVICT)
SEARCHED = {
    "route": ("route",),
    "schedule": ("priority",),
    "evict": ("evict",),
    "all": ("route", "priority", "evict"),
}
"""Which of a candidate's functions a run puts to work; the others run as the defaults below."""
DEFAULT_SOURCE = '''"""Least outstanding requests; first come, first served; least recently used out first."""


def route(s, p):
    return -s.outstanding


def priority(r, p):
    return r.waiting


def evict(b, p):
    return b.last_access
'''
"""What a function a run does not search is: each system's most common default."""
BUILTIN = {
    "round_robin": ROUND_ROBIN,
    "random": RANDOM,
    "power_of_two": POWER_OF_TWO,
    "prefix_hash": PREFIX_HASH,
}
"""Routers that are mechanism variants rather than keys, with FCFS and LRU on every instance.
round_robin: SGLang's and vLLM's routers' `round_robin`. random: theirs, and the Mooncake paper's first
baseline (a fixed seed). power_of_two: two instances drawn at random, the one
with fewer outstanding requests (Mitzenmacher's power of two choices; sglang-router's `power_of_two`).
prefix_hash: consistent hashing of the prompt's first blocks (workload.AFFINITY_BLOCKS), the session
affinity of vLLM's production-stack router and of Envoy's ring hash; with a fixed fleet a ring is a fixed
map, so the id is hashed (splitmix64's multiplier) modulo the instances."""
EXPORTED_BLOCK_TOKENS = 512
"""The block an exported router cuts prompts into: the shipped Mooncake trace's, which its prefix
features were searched at."""
BOUND = "work_bound"
"""The upper reference, a bound: the load at which the fleet would be busy all the time serving the
cheapest 90 % of the requests (capacity's goal lets a policy leave the rest late), every prompt prefilled
past the longest prefix any earlier request had (a cache that never evicts, shared by the whole fleet) at
the deployment's full-budget prefill rate, every output token decoded in a full batch of `max_seqs`. No
router or scheduler sustains more; the SLOs only lower it."""
DEFAULTS: dict[str, Any] = {
    "deployment": DEFAULT,
    "instances": 8,
    "load": 2.5,
    "search": "all",
    "ttft_slo_s": 3.0,
    "tbt_slo_s": 0.1,
    "token_budget": 2048,
    "max_seqs": 256,
}
"""The shipped fleet: 8 instances of Llama-3-8B on an H100 each; a 2,048-token budget (vLLM V1's online
default); SLOs of 3 s to the first token (Mooncake's conversation prompts average 12,500 tokens) and 100 ms
a token (the TBT SLO of the Mooncake paper's experiments); and a load near the baselines' capacity."""
OPTIONS = (
    Option(
        "deployment",
        "str",
        DEFAULTS["deployment"],
        "the model and GPUs of every instance (`crucible deployments` lists them)",
        choices=SERVING,
    ),
    Option("instances", "int", DEFAULTS["instances"], "engine instances behind the router", low=1, high=64),
    Option(
        "load",
        "float",
        DEFAULTS["load"],
        "arrivals as many times as dense as the trace's",
        low=0.001,
        high=1e6,
    ),
    Option(
        "search",
        "str",
        DEFAULTS["search"],
        "which decision a run searches: route (the router), schedule (each instance's priority), evict "
        "(each instance's cache) or all; the others run as least outstanding, FCFS and LRU",
        choices=tuple(SEARCHED),
    ),
    Option(
        "ttft_slo_s",
        "float",
        DEFAULTS["ttft_slo_s"],
        "time-to-first-token SLO in seconds",
        low=0.0,
        open_low=True,
        high=1e6,
    ),
    Option(
        "tbt_slo_s",
        "float",
        DEFAULTS["tbt_slo_s"],
        "time-between-tokens SLO in seconds (a request's mean)",
        low=0.0,
        open_low=True,
        high=1e6,
    ),
    Option(
        "token_budget",
        "int",
        DEFAULTS["token_budget"],
        "tokens per iteration on each instance",
        low=1,
        high=65536,
        tune=(256, 8192),
    ),
    Option(
        "max_seqs",
        "int",
        DEFAULTS["max_seqs"],
        "requests in one batch at most, per instance",
        low=1,
        high=4096,
        tune=(16, 1024),
    ),
    Option(
        "capacity",
        "int",
        None,
        "KV blocks per instance (default: what fits on the deployment's GPUs)",
        low=1,
        high=MOST,
    ),
    WINDOW,
    Option(
        "train_share",
        "float",
        0.3,
        "share of the requests, from the start, that PARAMS are tuned on",
        low=0.01,
        high=1.0,
    ),
)
HORIZON_S = 600.0
"""A replay stops this long after the last arrival; requests unfinished then count as late."""


class ServingTarget(TargetBase):
    """A fleet behind a router; the objective is the fleet's capacity under the TTFT and TBT SLOs."""

    name = "serving"
    description = (
        "Route, schedule and cache for a fleet of LLM engine instances behind one router, as a router in "
        "front of N vLLM or SGLang servers does. Every instance batches continuously (chunked prefill under "
        "a token budget, a paged KV pool, preemption by recompute) and keeps the blocks its requests "
        "computed as a prefix cache: a request whose leading prompt blocks an instance holds skips their "
        "prefill there. When a request arrives, route(s, p) scores every instance (s: the request against "
        "that instance's state, its cached prefix and queue there) and the highest gets it. Each instance "
        "orders its requests with priority(r, p), highest first, and evicts the cached block with the "
        "lowest evict(b, p). Maximize the fleet's capacity: the largest load (arrivals as many times as "
        "dense as the trace's) at which at least 90% of requests meet both the time-to-first-token and the "
        "time-between-tokens SLOs."
    )
    signatures = SIGNATURES
    objective = Objective("capacity", "maximize")
    report_metrics = (
        "capacity",
        "slo_attainment",
        "ttft_p50_ms",
        "ttft_p90_ms",
        "ttft_p99_ms",
        "tbt_p50_ms",
        "tbt_p90_ms",
        "tbt_p99_ms",
        "hit_rate",
        "imbalance",
        "goodput_rps",
        "preemptions",
    )
    integer_metrics = ("preemptions",)
    options = OPTIONS

    def default_config(self) -> dict[str, Any]:
        return {"workload": str(shipped_workload_path()), **DEFAULTS}

    def registry(self, signature: str) -> FeatureRegistry:
        return {ROUTE.name: ROUTE_FEATURES, PRIORITY.name: SCHEDULE_FEATURES, EVICT.name: EVICT_FEATURES}[
            signature
        ]

    def properties(self) -> tuple[Property, ...]:
        return PROPERTIES

    def requests(self, workload: str) -> int:
        return request_count(workload)

    def behaviour_sample(self, signature: str) -> Decisions:
        """Arrivals to route, iterations to plan and caches to evict from (behaviour.py)."""
        samples = {ROUTE.name: route_sample, PRIORITY.name: priority_sample, EVICT.name: evict_sample}
        return samples[signature]()

    def builtin_baselines(self) -> tuple[str, ...]:
        return (*BUILTIN, BOUND)

    def instances(self, workload: str, config: Mapping[str, Any]) -> list[Instance]:
        config = {**DEFAULTS, **config}
        n = request_count(workload)
        if isinstance(config.get("requests"), str):
            config["requests"] = list(request_window(config["requests"], n))
        window = config.get("requests")
        start, stop = (int(window[0]), int(window[1])) if window else (0, n)
        fleet_of(Instance(workload, config))  # sizes that fit no request fail here, with one line
        cut = max(1, int((stop - start) * float(config.get("train_share", 0.3))))
        name = f"{Path(workload).name}@{config['deployment']}x{config['instances']}:{config['load']:g}"
        return [
            Instance(workload, {**config, "requests": [start, start + cut]}, f"{name}[:{cut}]", "train"),
            Instance(workload, {**config, "requests": [start, stop]}, name, "eval"),
        ]

    def evaluate(self, program: Program, instance: Instance, params: Mapping[str, float]) -> dict[str, float]:
        """The program's functions that the run searches, the defaults for the others."""
        searched = SEARCHED[str(instance.config.get("search", DEFAULTS["search"]))]
        values = tuple(float(x) for x in param_vector(program, params))
        found, default = Keyed(program.source, values), Keyed(DEFAULT_SOURCE, ())
        route, schedule, evict = (found if name in searched else default for name in _NAMES)
        return _metrics(instance, Sources(route, schedule, evict))

    def oracles(self) -> tuple[str, ...]:
        return (BOUND,)

    def exports(self) -> dict[str, Export]:
        """Where a route function runs outside Crucible: an HTTP router in front of vLLM or SGLang servers."""
        return {"router": router_export(EXPORTED_BLOCK_TOKENS)}

    def references(self) -> dict[str, Reference]:
        from . import router_check as check

        doc = (
            "sglang-router in front of recording backends, replayed in lockstep with the simulated fleet: "
            "each decision against the simulator's baseline for the same policy"
        )
        exported = (
            "a route function exported as a router (crucible export --to router) and run with uvicorn, "
            "replayed the same way: each decision against the simulator running the same function"
        )
        return {
            check.SGLANG_ROUTER: Reference(
                check.SGLANG_ROUTER, doc, check.OPTIONS, check.against_sglang_router
            ),
            check.EXPORTED: Reference(
                check.EXPORTED, exported, check.EXPORTED_OPTIONS, check.against_exported_router
            ),
        }

    def evaluate_builtin(self, name: str, instance: Instance) -> dict[str, float]:
        if name == BOUND:
            return {"capacity": work_bound(instance)}
        if name not in BUILTIN:
            raise KeyError(f"unknown built-in baseline {name!r} (have {', '.join(self.builtin_baselines())})")
        default = Keyed(DEFAULT_SOURCE, ())
        return _metrics(instance, Sources(default, default, default, name))

    def validation(self) -> Validation:
        return validation_of(self)


_NAMES = ("route", "priority", "evict")


def fleet_of(instance: Instance) -> tuple[Fleet, Pricing]:
    """The instances' limits and the cost model's prices for an instance's configuration: on a deployment,
    or on the CPU (the reference engine's tiny model priced by a profile, with a capacity given)."""
    config = {**DEFAULTS, **instance.config}
    requests, _, block_tokens = _requests(instance)
    budget, seqs = int(config["token_budget"]), int(config["max_seqs"])
    name = str(config["deployment"])
    if name == CPU:
        blocks = int(config["capacity"])
    else:
        try:
            on = deployment(name)
        except KeyError as exc:
            raise OptionError(str(exc.args[0])) from None
        blocks = config.get("capacity") or on.kv_blocks(block_tokens, budget, seqs)
        if blocks < 1:
            raise WorkloadError(f"on {on.name} no KV block of {block_tokens} tokens fits beside the weights")
    limits = Limits(int(blocks), block_tokens, budget, min(seqs, requests.n))
    try:
        limits.check(requests)
    except ValueError as exc:
        raise WorkloadError(f"{exc} on {name}") from None
    pricing = _pricing(name, str(config.get("profile", DEFAULT_PROFILE)), budget, seqs)
    rate = pricing.iteration_ms(np.array([0]), np.array([budget])) / budget / 1e3
    return Fleet(int(config["instances"]), limits, rate), pricing


@functools.lru_cache(maxsize=8)
def _pricing(on: str, profile: str, budget: int, seqs: int) -> Pricing:
    return Pricing.of(cost_model(profile, on), budget, seqs)


def _requests(instance: Instance) -> tuple[Requests, Prefixes, int]:
    """The instance's window of the trace, scaled down where it says so (`token_divisor`, `max_output`:
    the real engine's slice, a trace block then `token_divisor` times fewer tokens)."""
    window = instance.config.get("requests")
    requests, prefixes, block_tokens = requests_of(
        instance.workload, (int(window[0]), int(window[1])) if window else None
    )
    divisor = int(instance.config.get("token_divisor", 1))
    if divisor == 1 and "max_output" not in instance.config:
        return requests, prefixes, block_tokens
    if block_tokens % divisor:
        raise OptionError(
            f"option token_divisor: {divisor} does not divide the trace's block of {block_tokens}"
        )
    scaled = requests.scaled(1.0, divisor, int(instance.config.get("max_output", 0)))
    return scaled, prefixes, block_tokens // divisor


def _metrics(instance: Instance, sources: Sources) -> dict[str, float]:
    """The fleet's figures at the instance's load and its capacity; for a validation's instance (an
    "engine" setting), the figures at its load in the simulator and on real processes instead."""
    config = {**DEFAULTS, **instance.config}
    requests, prefixes, _ = _requests(instance)
    fleet, pricing = fleet_of(instance)
    slo = (float(config["ttft_slo_s"]), float(config["tbt_slo_s"]))
    policies = _policies(sources)

    def at(load: float, give_up: bool) -> Any:
        loaded = requests.scaled(load)
        horizon = float(loaded.arrival_s[-1]) + HORIZON_S
        allowed = int((1 - GOAL) * loaded.n) if give_up else -1
        return replay(loaded, prefixes, fleet, policies, pricing, slo, horizon, allowed)

    load = float(config["load"])
    replayed = at(load, False)
    metrics = fleet_metrics(replayed, slo, fleet.instances)
    engine = instance.config.get("engine")
    if engine:
        return metrics | _on_processes(instance, sources, fleet, pricing, engine)

    def attainment(trial: float) -> float:
        if trial == load:
            return metrics["slo_attainment"]
        replayed = at(trial, True)
        return 0.0 if replayed.gave_up else fleet_metrics(replayed, slo, fleet.instances)["slo_attainment"]

    metrics["capacity"] = capacity(attainment, load, GOAL)
    return metrics | (fleet_timelines(replayed) if instance.role == "eval" else {})


def _on_processes(
    instance: Instance, sources: Sources, fleet: Fleet, pricing: Pricing, engine: Mapping[str, Any]
) -> dict[str, float]:
    """The slice on N engine processes behind a router process: their figures, as `engine_` metrics; and
    where asked, how much slower the engines ran their passes than the profile prices those very passes
    (their total time over their total price), which the validation prices the simulator with."""
    import tempfile

    from targets.batching.kernels import PASSES_VS_PROFILE
    from targets.costmodel.shapes import MODELS

    try:
        from .process_fleet import Setup, replay_on_processes
    except ImportError as exc:  # Docker's sandbox image holds the core packages and torch, not the router's
        raise WorkloadError(
            f"the fleet's processes need the router extra (starlette, uvicorn, httpx), which this sandbox "
            f"lacks ({exc.name} is missing): run the validation with --sandbox process"
        ) from None

    config = {**DEFAULTS, **instance.config}
    requests, prefixes, _ = _requests(instance)
    loaded = requests.scaled(float(config["load"]))
    slo = (float(config["ttft_slo_s"]), float(config["tbt_slo_s"]))
    seed = int(engine.get("seed", 0))
    setup = Setup(fleet.instances, fleet.limits, slo, seed, fleet.prefill_s_per_token, MODELS["tiny"].vocab)
    horizon = float(loaded.arrival_s[-1]) + HORIZON_S
    with tempfile.TemporaryDirectory(prefix="crucible-fleet-") as folder:
        replayed, passes = replay_on_processes(loaded, prefixes, setup, sources, horizon, Path(folder))
    measured = {f"engine_{k}": v for k, v in fleet_metrics(replayed, slo, fleet.instances).items()}
    if engine.get("time_passes") and passes:  # the clock's rate: the time the passes took over their price
        priced = sum(pricing.iteration_ms(p.starts, p.tokens) for p in passes)
        measured[PASSES_VS_PROFILE] = sum(p.ms for p in passes) / priced
    return measured


def _policies(sources: Sources) -> Policies:
    """The compiled keys of a fleet's policies, as the simulator runs them."""
    route, schedule, evict = (
        (compiled_keys(keyed.source)[k], np.array(keyed.params, dtype=np.float64))
        for k, keyed in enumerate((sources.route, sources.schedule, sources.evict))
    )
    return Policies(*route, *schedule, *evict, BUILTIN[sources.builtin] if sources.builtin else BY_KEY)


@functools.lru_cache(maxsize=16)
def compiled_keys(source: str) -> tuple[Callable[..., float], ...]:
    """A program's three keys compiled once per process, however many trials evaluate it."""
    program = check(source, SIGNATURES)
    return (
        to_numba(program, ROUTE.name, ROUTE_FEATURES.columns()),
        to_numba(program, PRIORITY.name, SCHEDULE_COLUMNS),
        to_numba(program, EVICT.name, EVICT_FEATURES.columns()),
    )


def work_bound(instance: Instance) -> float:
    """BOUND's load: the fleet's seconds over the seconds of work at load 1 of the cheapest requests that
    capacity's goal needs served (90 % of them: a policy may leave the dearest tenth late)."""
    config = {**DEFAULTS, **instance.config}
    requests, prefixes, block_tokens = _requests(instance)
    fleet, pricing = fleet_of(instance)
    seen: set[int] = set()
    uncached = np.zeros(requests.n)
    for r in range(requests.n):
        blocks = prefixes.blocks[prefixes.offsets[r] : prefixes.offsets[r + 1]]
        hit = 0
        while hit < blocks.size and int(blocks[hit]) in seen:
            hit += 1
        prompt = int(requests.prompt_tokens[r])
        uncached[r] = prompt - min(hit, (prompt - 1) // block_tokens) * block_tokens
        seen.update(int(b) for b in blocks)
    seqs = fleet.limits.max_seqs
    context = int(np.mean(requests.prompt_tokens + requests.output_tokens / 2))
    decode_s = pricing.iteration_ms(np.full(seqs, context), np.ones(seqs, dtype=np.int64)) / seqs / 1e3
    work = uncached * fleet.prefill_s_per_token + (requests.output_tokens - 1) * decode_s
    needed = np.sort(work)[: int(np.ceil(GOAL * requests.n))]
    span = float(requests.arrival_s[-1] - requests.arrival_s[0])
    return fleet.instances * span / float(needed.sum()) if needed.sum() > 0 else float(config["load"])
