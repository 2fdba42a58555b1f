"""The batching target: request scheduling under continuous batching, the policy one `priority(r, p)` key."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from targets.base import (
    MOST,
    WINDOW,
    FeatureRegistry,
    Instance,
    Objective,
    Option,
    Requirable,
    TargetBase,
    Validation,
    WorkloadError,
    request_window,
)
from targets.costmodel.model import DEFAULT_PROFILE, SHIPPED
from targets.deployments.catalog import CPU, SERVING, deployment
from targets.export import Export
from targets.trace_files import parsed
from verifiers.compiler import param_vector, to_numba
from verifiers.program import Program, Signature
from verifiers.properties import Property
from verifiers.static import check

from .behaviour import behaviour_sample
from .capacity import GOAL, capacity
from .compiled_scheduler import Pricing, serve_priced
from .export import vllm_export
from .features import ORACLE_COLUMNS, ORACLE_REMAINING, REQUEST_FEATURES
from .kernels import PASSES_VS_PROFILE, cost_model, engine_executor, passes_vs_profile
from .metrics import METRICS, serving_metrics
from .properties import PROPERTIES, REQUIRABLE
from .scheduler import Executor, Limits, Served, serve
from .trace import Requests, load_azure
from .validation import validation_of

PRIORITY = Signature(
    name="priority",
    features=REQUEST_FEATURES.names,
    state_arg="r",
    doc="Score a live request; the highest is served (and admitted) first, the lowest preempted first.",
)
_SRPT = Signature(name="priority", features=(*REQUEST_FEATURES.names, ORACLE_REMAINING.name), state_arg="r")
_SRPT_SOURCE = '''"""Oracle SRPT: the request with the least work left (pending and output tokens) first."""


def priority(r, p):
    return -(r.pending + r.remaining_output)
'''
TOKEN_BUDGET = "token_budget"
"""A PARAMS name the mechanism reads: the per-iteration token budget (the prefill chunk size), in trace
tokens. vLLM and Sarathi-Serve fix it per deployment from the latency target rather than per iteration, so
it is one constant, tuned per instance like any other; a candidate that does not declare it runs with the
instance's budget."""
SHIPPED_WORKLOAD = "azure_conv_head.csv"
DEFAULTS: dict[str, Any] = {
    "capacity": 2048,
    "block_tokens": 16,
    "token_budget": 2048,
    "max_seqs": 256,
    "load": 0.4,
    "ttft_slo_s": 5.0,
    "tpot_slo_s": 0.1,
}
"""The shipped configuration on the CPU: KV blocks of 16 tokens (vLLM's), a 2,048-token budget (vLLM V1's
online default), and a load at which the tiny model on the measured 2-core profile queues and preempts."""
ON_GPU: dict[str, Any] = {"load": 3.0, "ttft_slo_s": 1.0, "tpot_slo_s": 0.05, "token_budget": 512}
"""What changes on a GPU deployment: an interactive SLO (time to first token 1 s, 50 ms a token, as chat
services target); a token budget of 512, Sarathi-Serve's for strict TPOT SLOs (Agrawal et al., OSDI 2024),
since a 2,048-token prefill chunk alone takes most of 50 ms on an H100; and a load just past the capacity of
every baseline on h100-llama3-8b and the shipped trace (oracle SRPT's is about 2.9). The KV capacity is the
blocks that fit on the GPU (Deployment.kv_blocks)."""
DEPLOYMENT = Option(
    "deployment",
    "str",
    CPU,
    "the model and GPUs that price each iteration (`crucible deployments` lists them); cpu: the tiny model "
    "on the CPU profile `profile`, as the reference engine runs it",
    choices=(CPU, *SERVING),
)
OPTIONS = (
    DEPLOYMENT,
    Option(
        "load",
        "float",
        None,
        f"arrivals as many times as dense as the trace's (default {DEFAULTS['load']:g} on the cpu, "
        f"{ON_GPU['load']:g} on a GPU deployment)",
        low=0.001,
    ),
    Option(
        "capacity",
        "int",
        None,
        f"KV cache capacity in blocks (default {DEFAULTS['capacity']} on the cpu; on a GPU deployment the "
        "blocks that fit beside the weights and activations)",
        low=1,
        high=MOST,
    ),
    Option("block_tokens", "int", DEFAULTS["block_tokens"], "tokens per KV block", low=1, high=MOST),
    Option(
        "token_budget",
        "int",
        None,
        "tokens per iteration (so also the prefill chunk) unless a candidate tunes PARAMS['token_budget'] "
        f"(default {DEFAULTS['token_budget']} on the cpu, {ON_GPU['token_budget']} on a GPU deployment)",
        low=1,
        high=MOST,
        tune=(64, 16384),
    ),
    Option(
        "max_seqs",
        "int",
        DEFAULTS["max_seqs"],
        "requests in one batch at most",
        low=1,
        high=MOST,
        tune=(1, 1024),
    ),
    Option(
        "ttft_slo_s",
        "float",
        None,
        f"time-to-first-token SLO in seconds (default {DEFAULTS['ttft_slo_s']:g} on the cpu, "
        f"{ON_GPU['ttft_slo_s']:g} on a GPU deployment)",
        low=0.0,
    ),
    Option(
        "tpot_slo_s",
        "float",
        None,
        f"time-per-output-token SLO in seconds (default {DEFAULTS['tpot_slo_s']:g} on the cpu, "
        f"{ON_GPU['tpot_slo_s']:g} on a GPU deployment)",
        low=0.0,
    ),
    Option(
        "profile",
        "path",
        DEFAULT_PROFILE,
        "kernel profile that prices each iteration on the cpu: a shipped one or a file written by "
        "`crucible profile`",
        choices=SHIPPED,
    ),
    Option(
        "admit_whole_prompt",
        "bool",
        None,
        "admit a waiting request only if its whole prompt's KV blocks are free, as vLLM V1 does by default "
        "(scheduler_reserve_full_isl); unset, its first chunk's blocks suffice",
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


def shipped_workload_path() -> Path:
    return Path(str(resources.files("targets.batching") / "workloads" / SHIPPED_WORKLOAD))


class BatchingTarget(TargetBase):
    """Request scheduling under a KV block budget; the objective is the share of requests meeting the SLOs."""

    name = "batching"
    description = (
        "Order the requests of an LLM server that batches continuously, as vLLM V1 and Sarathi-Serve do. "
        "Each iteration is one forward pass over at most a token budget of tokens: one token for each "
        "decoding request and prefill chunks for the others. Keys and values live in a paged pool of "
        "fixed-size blocks. At the start of every iteration each live request is scored with priority(r, p): "
        "running requests are served highest first, and one that needs a block when none is free preempts "
        "the lowest-scored running request, which later recomputes everything; then waiting requests are "
        "admitted highest first while they fit. A candidate may declare PARAMS['token_budget'] (tokens per "
        "iteration, so also the prefill chunk). Maximize the share of requests that meet both the "
        "time-to-first-token and the time-per-output-token SLOs."
    )
    signatures = (PRIORITY,)
    objective = Objective("slo_attainment", "maximize")
    report_metrics = (
        "slo_attainment", "capacity", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
        "throughput_tok_s", "preemptions",
    )  # fmt: skip
    integer_metrics = ("preemptions",)
    """Counts, shown as whole numbers."""
    options = OPTIONS
    sweep_roles: tuple[str, ...] = ("eval",)
    """Instances whose metrics include the capacity sweep (capacity.py): a sweep costs about ten replays,
    so tuning trials on the train share skip it while capacity is not the objective."""

    def default_config(self) -> dict[str, Any]:
        return {"workload": str(shipped_workload_path()), **DEFAULTS}

    def registry(self, signature: str) -> FeatureRegistry:
        if signature != PRIORITY.name:
            raise KeyError(signature)
        return REQUEST_FEATURES

    def instances(self, workload: str, config: Mapping[str, Any]) -> list[Instance]:
        config = configured(config)
        if isinstance(config.get("requests"), str):
            config["requests"] = list(request_window(config["requests"], load_workload(workload).n))
        for name in ("capacity", "block_tokens", "token_budget", "max_seqs"):
            value = config[name]
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MOST:
                raise WorkloadError(f"{name} must be a positive whole number up to {MOST:.0e}, got {value!r}")
        requests = instance_requests(Instance(workload, config))  # a bad trace or size fails here
        instance_limits(Instance(workload, config))
        priced_by(config)
        cut = max(1, int(requests.n * float(config.get("train_share", 0.3))))
        on = "" if config["deployment"] == CPU else f"{config['deployment']}:"
        name = f"{Path(workload).name}@{on}{config['capacity']}x{config['load']:g}"
        return [
            Instance(workload, {**config, "requests": _window(config, 0, cut)}, f"{name}[:{cut}]", "train"),
            Instance(workload, config, name, "eval"),
        ]

    def behaviour_sample(self, signature: str) -> tuple[tuple[Mapping[str, float], ...], ...]:
        """Iterations to plan: live requests drawn in every state, within REQUEST_FEATURES' relations."""
        if signature != PRIORITY.name:
            raise KeyError(signature)
        return behaviour_sample()

    def behaviour_cuts(self, signature: str) -> tuple[float, ...]:
        """The scheduler compares keys only with one another: it serves in their order, values aside."""
        return ()

    def mechanism_params(self) -> tuple[str, ...]:
        """The scheduler reads the token budget from PARAMS: two keys that order alike differ by it."""
        return (TOKEN_BUDGET,)

    def requests(self, workload: str) -> int:
        """How many requests the trace holds, in time order (what a holdout of its tail splits)."""
        return load_workload(workload).n

    def files(self, instance: Instance) -> tuple[str, ...]:
        profile = str(instance.config.get("profile", DEFAULT_PROFILE))
        paths = [instance.workload] if Path(instance.workload).is_file() else []
        paths += [profile] if profile not in SHIPPED else []
        return tuple(str(Path(p).resolve()) for p in paths)

    def exports(self) -> dict[str, Export]:
        """Where a batching program runs outside Crucible: vLLM's V1 scheduler, as request priority."""
        return {"vllm": vllm_export(DEFAULTS["ttft_slo_s"], DEFAULTS["tpot_slo_s"])}

    def properties(self) -> tuple[Property, ...]:
        return PROPERTIES

    def requirable(self) -> dict[str, Requirable]:
        return dict(REQUIRABLE)

    def builtin_baselines(self) -> tuple[str, ...]:
        return ("srpt",)

    def oracles(self) -> tuple[str, ...]:
        return ("srpt",)  # it reads each request's true output length

    def validation(self) -> Validation:
        return validation_of(self)

    def evaluate(self, program: Program, instance: Instance, params: Mapping[str, float]) -> dict[str, float]:
        values = param_vector(program, params)
        budget = params.get(TOKEN_BUDGET, program.defaults().get(TOKEN_BUDGET))
        return self._metrics(instance, _compiled(program.source), values, budget)

    def evaluate_builtin(self, name: str, instance: Instance) -> dict[str, float]:
        if name == "srpt":
            return self._metrics(instance, _srpt_key(), np.zeros(0), None)
        raise KeyError(f"unknown built-in baseline {name!r} (have {', '.join(self.builtin_baselines())})")

    def _metrics(
        self, instance: Instance, key: Any, params: np.ndarray, budget: float | None
    ) -> dict[str, float]:
        requests, limits = instance_requests(instance), instance_limits(instance, budget)
        slo = slo_s(instance)
        model = priced_by(instance.config)
        pricing = Pricing.of(model, limits.token_budget, limits.max_seqs)
        metrics = serving_metrics(simulate(instance, requests, limits, key, params, pricing), slo)
        engine = instance.config.get("engine")
        if instance.role in self.sweep_roles and not engine:
            metrics |= swept_capacity(instance, limits, key, params, pricing, metrics["slo_attainment"])
        if engine:
            if engine.get("time_passes"):  # just before the engine, in its process: as it will run
                metrics[PASSES_VS_PROFILE] = passes_vs_profile(model, limits)
            executor = engine_executor(requests, limits, engine)
            measured = serving_metrics(run(instance, requests, limits, key, params, executor), slo)
            metrics |= {f"engine_{k}": v for k, v in measured.items()}
        return metrics


def configured(config: Mapping[str, Any]) -> dict[str, Any]:
    """The options with every default filled in: the cpu's, or a GPU deployment's (ON_GPU, and the KV
    blocks that fit on it at the block size, token budget and batch size chosen)."""
    config = {"deployment": CPU, **config}
    on = DEPLOYMENT.check(config["deployment"])
    if on == CPU:
        return {**DEFAULTS, **config}
    filled = {**DEFAULTS, **ON_GPU, **config}
    if "capacity" not in config:
        sizes = (filled["block_tokens"], filled["token_budget"], filled["max_seqs"])
        if all(isinstance(x, int) and 1 <= x <= MOST for x in sizes):  # else instances() says which is bad
            filled["capacity"] = deployment(on).kv_blocks(*sizes)
            if filled["capacity"] < 1:
                raise WorkloadError(
                    f"on {on} no KV block of {sizes[0]} tokens fits beside the weights and activations of "
                    f"{sizes[1]} tokens and {sizes[2]} sequences; choose smaller sizes or set capacity"
                )
    return filled


def priced_by(config: Mapping[str, Any]) -> Any:
    """The cost model that prices an instance's iterations: its deployment's, or on the cpu its profile's."""
    return cost_model(str(config.get("profile", DEFAULT_PROFILE)), str(config.get("deployment", CPU)))


def swept_capacity(
    instance: Instance,
    limits: Limits,
    key: Any,
    params: np.ndarray,
    pricing: Pricing,
    at_start: float | None = None,
) -> dict[str, float]:
    """The policy's capacity as a load factor (capacity.py's sweep over the instance's `load`) and in
    requests per second (that load times the window's arrival rate at load 1). `at_start`: the attainment
    a whole replay of the instance already measured at its own load, which the sweep then reuses."""
    slo = slo_s(instance)
    start = float({**DEFAULTS, **instance.config}["load"])
    late = late_limit(instance_requests(instance).n, GOAL)  # a load changes arrivals, not how many

    def attainment(load: float) -> float:
        if load == start and at_start is not None:
            return at_start
        loaded = replace(instance, config={**instance.config, "load": load})
        served = simulate(loaded, instance_requests(loaded), limits, key, params, pricing, late)
        return serving_metrics(served, slo)["slo_attainment"]

    found = capacity(attainment, start, GOAL)
    plain = instance_requests(replace(instance, config={**instance.config, "load": 1.0}))
    span = float(plain.arrival_s[-1] - plain.arrival_s[0])
    rate = (plain.n - 1) / span if span > 0 else 0.0
    return {"capacity": found, "capacity_rps": found * rate}


def run(
    instance: Instance, requests: Requests, limits: Limits, key: Any, params: np.ndarray, executor: Executor
) -> Served:
    """The mechanism over an instance's requests with one executor, up to the instance's horizon."""
    return serve(requests, limits, key, params, executor, slo_s(instance), horizon_s(instance, requests))


def simulate(
    instance: Instance,
    requests: Requests,
    limits: Limits,
    key: Any,
    params: np.ndarray,
    pricing: Pricing,
    late: int = -1,
) -> Served:
    """`run` with the cost model's prices, compiled whole (the same decisions, far fewer seconds); stopped
    once more than `late` requests (0 or more) are sure to miss the TTFT SLO."""
    horizon = horizon_s(instance, requests)
    return serve_priced(requests, limits, key, params, pricing, slo_s(instance), horizon, late)


def late_limit(n: int, goal: float) -> int:
    """The most of n requests that may miss an SLO with the share that meet it still at least `goal`, as
    serving_metrics computes that share."""
    return max((late for late in range(n + 1) if (n - late) / n >= goal), default=-1)


def horizon_s(instance: Instance, requests: Requests) -> float:
    """When a replay stops: an hour after the last arrival unless the instance says."""
    return float(instance.config.get("horizon_s", float(requests.arrival_s[-1]) + 3600.0))


def instance_requests(instance: Instance) -> Requests:
    """The requests of an instance: its slice of the trace at its load, with tokens divided by
    `token_divisor` and outputs capped at `max_output` where those are set (for the real engine)."""
    config = {**DEFAULTS, **instance.config}
    window = config.get("requests")
    bounds = (int(window[0]), int(window[1])) if window else None
    scale = (float(config["load"]), int(config.get("token_divisor", 1)), int(config.get("max_output", 0)))
    return _shaped(load_workload(instance.workload), bounds, scale)


def instance_limits(instance: Instance, budget: float | None = None) -> Limits:
    """The machine of an instance; token sizes (block, budget) are divided like the trace's tokens."""
    config = {**DEFAULTS, **instance.config}
    divisor = int(config.get("token_divisor", 1))
    tokens = float(config["token_budget"] if budget is None else budget)
    requests = instance_requests(instance)
    # An iteration never computes more tokens than the window holds, nor runs more requests than it has:
    # a larger budget or batch cap behaves as these do, and sizes no table beyond them.
    total = int((requests.prompt_tokens + requests.output_tokens).sum())
    limits = Limits(
        kv_blocks=int(config["capacity"]),
        block_tokens=max(1, int(config["block_tokens"]) // divisor),
        token_budget=max(1, min(round(tokens / divisor), total)),
        max_seqs=min(int(config["max_seqs"]), requests.n),
        admit_whole_prompt=bool(config.get("admit_whole_prompt")),
    )
    try:
        limits.check(requests)
    except ValueError as exc:
        raise WorkloadError(str(exc)) from None
    return limits


def slo_s(instance: Instance) -> tuple[float, float]:
    """The TTFT and TPOT SLOs in seconds."""
    config = {**DEFAULTS, **instance.config}
    return float(config["ttft_slo_s"]), float(config["tpot_slo_s"])


def _window(config: Mapping[str, Any], start: int, stop: int) -> list[int]:
    """A slice of the instance's own window (the whole trace if it has none)."""
    base = int(config["requests"][0]) if config.get("requests") else 0
    return [base + start, base + stop]


@functools.lru_cache(maxsize=8)
def _shaped(requests: Requests, window: tuple[int, int] | None, scale: tuple[float, int, int]) -> Requests:
    """Each shape of a trace is made once per process, not per trial."""
    if window:
        requests = requests.slice(*window)
    return requests.scaled(*scale)


def load_workload(workload: str) -> Requests:
    """A workload is an Azure LLM inference trace (CSV) path."""
    return parsed(workload, load_azure)


@functools.lru_cache(maxsize=16)
def _compiled(source: str) -> Callable[..., float]:
    """Compile a candidate once per process, however many trials and instances evaluate it."""
    return to_numba(check(source, [PRIORITY]), PRIORITY.name, ORACLE_COLUMNS)


@functools.cache
def _srpt_key() -> Callable[..., float]:
    return to_numba(check(_SRPT_SOURCE, [_SRPT]), PRIORITY.name, ORACLE_COLUMNS)


__all__ = ["METRICS", "BatchingTarget"]
