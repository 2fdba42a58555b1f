"""How the batching simulator is checked against the real engine: each policy serves one slice twice.

In one job per policy the target serves the slice with the same scheduler, once priced by the cost model
and once run on real kernels (targets/batching/reference.py), and returns both sets of metrics. The slice is
scaled down to fit the engine on 2 cores: token counts and the token budget divided by `token_divisor`
(KV blocks are `block_tokens` after the division, the size the profile's attention was measured at),
outputs capped at `max_output`, arrivals made `load` times as dense. Policies are ranked by mean TTFT:
every request counts, and unlike a share meeting SLOs it does not saturate on a short slice. The checks
are kv's: the rankings agree (Kendall tau-b >= 0.8) and every policy's mean TTFT is within 25 % of the
engine's. An engine serving is one run of a queue near saturation, where a pass timed a few per cent long
changes which requests share the next iterations and moves a mean TTFT by up to 20 %; so every policy is
served `rounds` times in turns, its medians compared, and a pair whose order the engine's rounds do not
settle (search/validation.py: a signed-rank test on the pair's per-round differences) is left out of tau-b
(no evidence either way).
Both sides time the same clock (the thread's CPU time), so the profile that prices the simulator should
be measured on the machine, and under the load, the engine runs on; and as a CPU's speed drifts by tens of
per cent within an hour, even idle, and from one process to the next by a fifth, every engine job first
times the profile's whole forward passes again (passes no larger than an iteration, a few seconds), and at
the end the simulator serves the slice once more with every pass as much slower as the jobs' median, and
at the fastest and the slowest job's speed: a pair it orders one way at one of these speeds and the other
way at another (policies a per cent or two apart, where a queue's order turns with its speed) is one it
does not resolve on this machine, and is left out of tau-b as the engine's unsettled pairs are. So that
the agreement rests on most pairs, at least half must be left in.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from targets.base import (
    Calibration,
    Check,
    Compared,
    Instance,
    Option,
    OptionError,
    Rounds,
    Validation,
    request_window,
)
from targets.costmodel.model import PASS, SHIPPED, load_profile, slowed

from .kernels import PASSES_VS_PROFILE

if TYPE_CHECKING:
    from .target import BatchingTarget

PASSES_PROFILE = "cpu-2core-passes"
"""The default pricing: this machine idle with its forward passes timed whole (the engine runs passes, not
operators one by one; `cpu-2core` predates timed passes and prices a pass as its operators alone)."""
CHECKS = (
    Check("kendall_tau", at_least=0.8),
    Check("error_max", at_most=0.25),
    Check("pairs_compared", at_least=0.5),
)
"""What an engine validation must show: the rankings agree, every policy's ranked figure within 25 %, and
at least half of the pairs compared."""
OPTIONS = (
    Option("requests", "str", "0:200", "slice of the trace, START:STOP"),
    Option("capacity", "int", 128, "KV capacity in blocks", low=1),
    Option("block_tokens", "int", 8, "tokens per KV block in the scaled-down slice", low=1),
    Option("load", "float", 25.0, "arrivals made this many times as dense", low=0.0),
    Option("token_divisor", "int", 8, "token counts divided by this", low=1),
    Option("max_output", "int", 32, "output lengths capped at this", low=0),
    Option("ttft_slo_s", "float", 1.0, "TTFT SLO in seconds", low=0.0),
    Option("tpot_slo_s", "float", 0.02, "TPOT SLO in seconds", low=0.0),
    Option("profile", "path", PASSES_PROFILE, "profile the simulator prices kernels with", choices=SHIPPED),
    Option("seed", "int", 0, "seed of the engine's random weights and prompts"),
    Option(
        "rounds",
        "int",
        5,
        "servings of each policy in turns (medians kept; pairs they do not settle are left out)",
        low=1,
    ),
    Option(
        "retime_passes",
        "bool",
        True,
        "time the profile's passes again in every engine job and price the simulator as they ran",
    ),
)


def instance(target: BatchingTarget, workload: str, values: Mapping[str, Any]) -> Instance:
    """The scaled-down slice both serve; the "engine" setting makes the target serve it in the engine too."""
    if values["load"] <= 0:
        raise OptionError(f"option load must be positive, got {values['load']:g}")
    start, stop = request_window(values["requests"], target.requests(workload))
    divisor = values["token_divisor"]
    from .target import configured  # here: the target module builds its validation from this one

    defaults = configured({})  # the cpu's: the engine is the tiny model on this machine
    config: dict[str, Any] = {
        **{k: defaults[k] for k in ("token_budget", "max_seqs")},
        "capacity": values["capacity"],
        "block_tokens": values["block_tokens"] * divisor,  # divided with the trace's tokens, as profiled
        "load": values["load"],
        "token_divisor": divisor,
        "max_output": values["max_output"],
        "requests": [start, stop],
        "ttft_slo_s": values["ttft_slo_s"],
        "tpot_slo_s": values["tpot_slo_s"],
        "profile": values["profile"],
    }
    target.instances(workload, config)  # a slice the machine cannot serve fails here, once
    if values["retime_passes"] and PASS not in load_profile(str(values["profile"])).operators:
        raise OptionError(
            f"option retime_passes: profile {values['profile']} has no timed forward passes to time again; "
            "give --retime-passes false, or a profile `crucible profile` measured (it times passes)"
        )
    label = f"{Path(workload).name}[{start}:{stop}]@{values['capacity']}x{values['load']:g}/{divisor}"
    engine = {"seed": values["seed"], "time_passes": values["retime_passes"]}
    return Instance(workload, {**config, "engine": engine}, label)


def priced_as_measured(
    instance: Instance, values: Mapping[str, Any], served: Rounds, folder: Path
) -> Calibration | None:
    """The slice for the simulator alone, priced by its profile with every pass as much slower as the
    median over the engine's jobs of their passes timed again, and at their fastest and slowest (profiles
    written into `folder`); that median and the range. None where no job timed its passes."""
    ratios = [row[PASSES_VS_PROFILE] for rows in served.values() for row in rows if PASSES_VS_PROFILE in row]
    if not ratios:
        return None
    profile = load_profile(str(instance.config["profile"]))
    config = {k: v for k, v in instance.config.items() if k != "engine"}

    def at(factor: float, name: str) -> Instance:
        path = folder / f"{name}.json"
        slowed(profile, factor).save(path)
        return replace(instance, config=config | {"profile": str(path)})

    factor = statistics.median(ratios)
    return Calibration(
        priced=at(factor, "median"),
        band=(at(min(ratios), "fastest"), at(max(ratios), "slowest")),
        figures={PASSES_VS_PROFILE: factor, f"{PASSES_VS_PROFILE}_range": [min(ratios), max(ratios)]},
    )


def validation_of(target: BatchingTarget) -> Validation:
    """How `crucible validate` checks the target's simulator against the engine: its slices are the
    target's own instances, scaled down."""
    return Validation(
        options=OPTIONS,
        instance=functools.partial(instance, target),
        compared=(
            Compared("mean TTFT ms", "ttft_mean_ms", "engine_ttft_mean_ms", ".0f"),
            Compared("TTFT p99 ms", "ttft_p99_ms", "engine_ttft_p99_ms", ".0f"),
            Compared("TPOT ms", "tpot_mean_ms", "engine_tpot_mean_ms", ".2f"),
            Compared("tok/s", "throughput_tok_s", "engine_throughput_tok_s", ".0f"),
            Compared("SLO met", "slo_attainment", "engine_slo_attainment", ".1%"),
            Compared("preemptions", "preemptions", "engine_preemptions", ".0f"),
        ),
        rank_by="mean TTFT ms",
        direction="minimize",
        checks=CHECKS,
        requires=("torch",),
        calibrated=priced_as_measured,
    )
