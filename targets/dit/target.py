"""The dit target: which request gets how many GPUs under which plan, on a cluster serving DiT requests."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from targets.base import (
    Command,
    FeatureRegistry,
    Instance,
    Objective,
    Option,
    OptionError,
    TargetBase,
    WorkloadError,
    resolve_options,
)
from targets.trace_files import parsed
from verifiers.compiler import param_vector, to_numba
from verifiers.program import Program, Signature
from verifiers.properties import Property
from verifiers.static import check

from .behaviour import behaviour_sample
from .commands import COMMANDS
from .features import OPTION_FEATURES
from .pricing import gpu_pricing
from .properties import PROPERTIES
from .serving import METRICS, WAIT_BELOW, request_profile, serve, serving_metrics
from .topology import TOPOLOGIES, topology
from .workload import MIXES, Arrival, generate, kinds, load_trace, parse_generator

SCORE = Signature(
    name="score",
    features=OPTION_FEATURES.names,
    state_arg="o",
    doc="Score a valid (waiting request, group of free GPUs, plan) option; the highest starts while GPUs "
    "are free; a best score below zero waits for more GPUs (only while something runs).",
)
SHIPPED_WORKLOAD = "gen:images:0"

OPTIONS = (
    Option("topology", "str", "h100-nvlink", "the cluster serving the requests", choices=tuple(TOPOLOGIES)),
    Option("gpus", "int", 8, "GPUs of the topology used (its first ones)", low=1, high=64),
    Option("requests", "int", 120, "requests a generated workload has", low=2, high=100_000),
    Option("load", "float", 0.8, "arrival rate as a share of what the cluster serves one GPU per request",
           low=0.01, high=10.0),
    Option("slo_scale", "float", 4.0, "a generated request's deadline: this x its fastest time alone",
           low=1.0, high=1000.0),
    Option("train_share", "float", 0.3, "the share of the stream tuned on (the rest is only scored)",
           low=0.05, high=0.95),
)  # fmt: skip


class DiTTarget(TargetBase):
    """DiT serving on a GPU cluster; the objective is the share of requests finished by their deadline."""

    name = "dit"
    description = (
        "Serve Diffusion Transformer requests (image and video models, each needing several GPUs to be "
        "fast) on a GPU cluster whose links differ (NVLink in a node, PCIe and UPI across sockets, a "
        "network across nodes). At every arrival and completion the mechanism enumerates the valid "
        "options: a waiting request, a compact group of free GPUs of a power-of-two size, and one of the "
        "request's fastest parallel plans there (degrees of Ulysses and ring sequence parallelism, CFG "
        "parallelism, PipeFusion and tensor parallelism, as xDiT runs them, priced by a topology-aware "
        "cost model). Each option is scored with score(o, p); the highest starts and holds its GPUs for "
        "its predicted time, and scoring repeats while GPUs are free. A best score below zero waits for "
        "more GPUs, unless nothing runs. A plan fastest alone is not always best for the queue behind it. "
        "Maximize the share of requests finished by their deadline."
    )
    signatures = (SCORE,)
    objective = Objective("slo_attainment", "maximize")
    report_metrics = METRICS
    integer_metrics = ("unfinished",)
    options = OPTIONS

    def default_config(self) -> dict[str, Any]:
        return {"workload": SHIPPED_WORKLOAD, **{o.name: o.default for o in OPTIONS}}

    def registry(self, signature: str) -> FeatureRegistry:
        if signature != SCORE.name:
            raise KeyError(signature)
        return OPTION_FEATURES

    def instances(self, workload: str, config: Mapping[str, Any]) -> list[Instance]:
        settings = _settings(config)
        arrivals = stream(workload, settings)  # a bad workload or cluster fails here
        cut = max(1, int(len(arrivals) * settings["train_share"]))
        name = f"{Path(workload).name}@{settings['topology']}x{settings['gpus']}"
        return [
            Instance(workload, {**settings, "window": [0, cut]}, f"{name}[:{cut}]", "train"),
            Instance(workload, settings, name, "eval"),
        ]

    def files(self, instance: Instance) -> tuple[str, ...]:
        return () if parse_generator(instance.workload) else (str(Path(instance.workload).resolve()),)

    def properties(self) -> tuple[Property, ...]:
        return PROPERTIES

    def evaluate(self, program: Program, instance: Instance, params: Mapping[str, float]) -> dict[str, float]:
        return run(instance, _compiled(program.source), param_vector(program, params))

    def evaluate_builtin(self, name: str, instance: Instance) -> dict[str, float]:
        raise KeyError(f"the dit target has no built-in baselines (asked for {name!r})")

    def commands(self) -> tuple[Command, ...]:
        return COMMANDS

    def behaviour_sample(self, signature: str) -> tuple[tuple[Mapping[str, float], ...], ...]:
        """Scheduling points on real clusters: the options the mechanism would score at each."""
        if signature != SCORE.name:
            raise KeyError(signature)
        return behaviour_sample()

    def behaviour_cuts(self, signature: str) -> tuple[float, ...]:
        """A best score below zero waits: which options a score puts below it is part of its behaviour."""
        if signature != SCORE.name:
            raise KeyError(signature)
        return (WAIT_BELOW,)

    def mechanism_params(self) -> tuple[str, ...]:
        """The mechanism reads no PARAMS: a score's order and its side of zero are its whole behaviour."""
        return ()


def _settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The options overlaid on their defaults and checked; WorkloadError for a cluster that cannot be."""
    known = {k: v for k, v in config.items() if k != "window"}
    try:
        settings = resolve_options(OPTIONS, known)
    except OptionError as exc:
        raise WorkloadError(str(exc)) from None
    topology(settings["topology"]).check_gpus(settings["gpus"])
    if "window" in config:
        settings["window"] = list(config["window"])
    return settings


def stream(workload: str, settings: Mapping[str, Any]) -> list[Arrival]:
    """The requests of a workload: a generated stream or a trace, on the settings' cluster."""
    pricing = gpu_pricing(topology(settings["topology"]))
    generator = parse_generator(workload)
    arrivals = parsed(workload, load_trace) if generator is None else []
    requests = {a.request for a in arrivals} if generator is None else set(kinds(generator[0]))
    for request in requests:  # a request no plan fits on this cluster is the user's to fix
        try:
            request_profile(request, settings["gpus"], pricing)
        except ValueError as exc:
            raise WorkloadError(str(exc)) from None
    if generator is not None:
        arrivals = _generated(*generator, settings, pricing.topology.name)
    return arrivals


@functools.lru_cache(maxsize=16)
def _generated_cached(
    mix: str, seed: int, count: int, load: float, slo: float, name: str, gpus: int
) -> tuple:
    pricing = gpu_pricing(TOPOLOGIES[name])
    profiles = {k: request_profile(k, gpus, pricing) for k in kinds(mix)}
    alone = {k: p.alone_s for k, p in profiles.items()}
    frugal = {k: p.least_gpu_s for k, p in profiles.items()}
    return tuple(generate(mix, seed, count, load, slo, alone, frugal, gpus))


def _generated(mix: str, seed: int, settings: Mapping[str, Any], name: str) -> list[Arrival]:
    return list(
        _generated_cached(
            mix, seed, settings["requests"], settings["load"], settings["slo_scale"], name, settings["gpus"]
        )
    )


def run(instance: Instance, key: Callable[..., float], params: np.ndarray) -> dict[str, float]:
    """The mechanism over an instance's stream (its window of it) with one compiled score."""
    settings = _settings(instance.config)
    arrivals = stream(instance.workload, settings)
    window = settings.get("window")
    if window:
        arrivals = arrivals[int(window[0]) : int(window[1])]
        base = arrivals[0].arrival_s
        arrivals = [Arrival(a.request, a.arrival_s - base, a.deadline_s) for a in arrivals]
    pricing = gpu_pricing(topology(settings["topology"]))
    horizon = arrivals[-1].arrival_s + 20 * max(a.deadline_s for a in arrivals)
    return serving_metrics(serve(arrivals, settings["gpus"], pricing, key, params, horizon))


@functools.lru_cache(maxsize=16)
def _compiled(source: str) -> Callable[..., float]:
    """Compile a candidate once per process, however many trials and instances evaluate it."""
    return to_numba(check(source, [SCORE]), SCORE.name, OPTION_FEATURES.columns())


__all__ = ["MIXES", "DiTTarget"]
