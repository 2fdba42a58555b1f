"""How the fleet simulator is checked against real processes: each policy serves one slice twice.

In one job per policy the target serves the slice in the simulator (every iteration priced by the CPU
profile of the reference engine's model) and on real processes (process_fleet.py: N engine processes,
each running every iteration as a forward pass, behind a router process applying the policy to the state
the engines report), and returns both sets of metrics. The slice is scaled to the engine on 2 cores as
the batching validation scales its own: token counts divided by `token_divisor` (so a trace block of 512
tokens is a KV block of 8, the size the profile's attention was measured at), outputs capped at
`max_output`, arrivals made `load` times as dense. Policies are ranked by mean TTFT, which every request
counts, and the checks are batching's: the rankings agree (Kendall tau-b >= 0.8) and every policy's mean
TTFT is within 25 % of the processes'. The rounds and the pairs the engine does not settle are batching's
too (targets/batching/validation.py says why each is there); the simulator is priced as fast as the
engines ran, each job's engines' total pass time over the profile's price of the same passes: the rate
at which the processes' clock ran (a median over passes would follow the many cheap decodes).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from targets.base import Compared, Instance, Option, OptionError, Validation, request_window
from targets.batching.validation import CHECKS, PASSES_PROFILE, priced_as_measured
from targets.costmodel.model import PASS, SHIPPED, load_profile
from targets.deployments.catalog import CPU

if TYPE_CHECKING:
    from .target import ServingTarget

OPTIONS = (
    Option("requests", "str", "0:300", "slice of the trace, START:STOP"),
    Option("instances", "int", 4, "engine processes behind the router", low=1, high=16),
    Option(
        "capacity",
        "int",
        4096,
        "KV blocks of each engine (of 8 tokens: 256 MiB of the model's KV)",
        low=1,
        high=1 << 20,
    ),
    Option("token_budget", "int", 256, "tokens per iteration of each engine", low=1, high=65536),
    Option("max_seqs", "int", 64, "requests in one batch at most, per engine", low=1, high=4096),
    Option("load", "float", 32.0, "arrivals made this many times as dense", low=0.0, open_low=True, high=1e6),
    Option(
        "token_divisor", "int", 64, "token counts divided by this (it must divide the trace's block)", low=1
    ),
    Option("max_output", "int", 24, "output lengths capped at this", low=1),
    Option("ttft_slo_s", "float", 2.0, "TTFT SLO in seconds", low=0.0, open_low=True),
    Option("tbt_slo_s", "float", 0.1, "TBT SLO in seconds", low=0.0, open_low=True),
    Option("profile", "path", PASSES_PROFILE, "profile the simulator prices kernels with", choices=SHIPPED),
    Option(
        "search",
        "str",
        "all",
        "which of a program's functions run (route, schedule, evict or all); the others run as the target's "
        "defaults, in the simulator and in the processes alike",
        choices=("route", "schedule", "evict", "all"),
    ),
    Option("seed", "int", 0, "seed of the engines' random weights and of the prompts' tokens"),
    Option(
        "rounds",
        "int",
        3,
        "servings of each policy in turns (medians kept; pairs they do not settle are left out)",
        low=1,
    ),
    Option(
        "retime_passes",
        "bool",
        True,
        "price the simulator as fast as the engines ran their passes (their median against the profile's "
        "price of the same passes)",
    ),
)


def instance(target: ServingTarget, workload: str, values: Mapping[str, Any]) -> Instance:
    """The scaled-down slice both serve; the "engine" setting makes the target serve it on processes too."""
    start, stop = request_window(values["requests"], target.requests(workload))
    config: dict[str, Any] = {
        "deployment": CPU,
        "profile": values["profile"],
        "requests": [start, stop],
        **{k: values[k] for k in ("instances", "capacity", "token_budget", "max_seqs", "load", "search")},
        **{k: values[k] for k in ("token_divisor", "max_output", "ttft_slo_s", "tbt_slo_s")},
    }
    target.instances(workload, config)  # a slice the engines cannot serve fails here, once
    if values["retime_passes"] and PASS not in load_profile(str(values["profile"])).operators:
        raise OptionError(
            f"option retime_passes: profile {values['profile']} has no timed forward passes to time again; "
            "give --retime-passes false, or a profile `crucible profile` measured (it times passes)"
        )
    label = (
        f"{Path(workload).name}[{start}:{stop}]x{values['instances']}@{values['capacity']}"
        f"x{values['load']:g}/{values['token_divisor']}"
    )
    engine = {"seed": values["seed"], "time_passes": values["retime_passes"]}
    return Instance(workload, {**config, "engine": engine}, label)


def validation_of(target: ServingTarget) -> Validation:
    """How `crucible validate --target serving` checks the fleet simulator against real processes."""
    return Validation(
        options=OPTIONS,
        instance=functools.partial(instance, target),
        compared=(
            Compared("mean TTFT ms", "ttft_mean_ms", "engine_ttft_mean_ms", ".0f"),
            Compared("TTFT p90 ms", "ttft_p90_ms", "engine_ttft_p90_ms", ".0f"),
            Compared("TBT p50 ms", "tbt_p50_ms", "engine_tbt_p50_ms", ".1f"),
            Compared("hit rate", "hit_rate", "engine_hit_rate", ".1%"),
            Compared("imbalance", "imbalance", "engine_imbalance", ".2f"),
            Compared("preemptions", "preemptions", "engine_preemptions", ".0f"),
        ),
        rank_by="mean TTFT ms",
        direction="minimize",
        checks=CHECKS,
        requires=("torch", "router"),
        calibrated=priced_as_measured,
    )
