"""How the kv simulator is checked against the real engine: prefill time saved, predicted and measured.

Each policy replays the same slice twice in one job: in the simulator, which prices the prefill its hits
save with the cost model, and in the engine (targets/kv/reference.py), which prefills every prompt over its
cached prefix and from scratch on real kernels under the same eviction decisions. The slice is scaled to
whole blocks of `block_tokens` tokens, the size the profile's attention was measured at.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from targets.base import Check, Compared, Instance, Option, Shown, Target, Validation, request_window
from targets.costmodel.model import DEFAULT_PROFILE, SHIPPED

from .kernels import cost_model

OPTIONS = (
    Option("requests", "str", "0:200", "slice of the trace, START:STOP"),
    Option("capacity", "int", 300, "KV capacity in blocks", low=1),
    Option("block_tokens", "int", 8, "tokens per KV block in the scaled-down slice", low=1),
    Option("repeats", "int", 3, "timed runs of each prefill (the median is kept)", low=1),
    Option("profile", "path", DEFAULT_PROFILE, "profile the simulator prices kernels with", choices=SHIPPED),
    Option("seed", "int", 0, "seed of the engine's random weights"),
)


def instance(target: Target, workload: str, values: Mapping[str, Any]) -> Instance:
    """The slice both serve; the "engine" setting makes the target replay it in the engine too."""
    n = target.requests(workload)
    assert n is not None, "the kv target's workloads are requests in time order"
    start, stop = request_window(values["requests"], n)
    cost_model(values["profile"])  # a profile that cannot price prefill fails here, not in every job
    config: dict[str, Any] = {
        "capacity": values["capacity"],
        "requests": [start, stop],
        "block_tokens": values["block_tokens"],
        "profile": values["profile"],
        "engine": {"repeats": values["repeats"], "seed": values["seed"]},
    }
    return Instance(workload, config, f"{Path(workload).name}[{start}:{stop}]@{values['capacity']}")


def validation_of(target: Target) -> Validation:
    """How `crucible validate` checks the kv simulator against the engine, on slices of the target's own
    workloads."""
    return Validation(
        options=OPTIONS,
        instance=functools.partial(instance, target),
        compared=(
            Compared("saved ms", "prefill_ms_saved", "engine_prefill_ms_saved"),
            # The share of all prefill time saved: free of how fast the machine ran while it was measured.
            Compared("saved share", "prefill_share_saved", "engine_prefill_share_saved", ".2%"),
        ),
        rank_by="saved ms",
        direction="maximize",
        shown=(
            Shown("hit rate", "block_hit_rate", ".4f"),
            Shown("engine TTFT p50 ms", "engine_ttft_ms_p50", ".2f"),
            Shown("engine TPOT ms", "engine_tpot_ms_mean", ".2f"),
            Shown("engine tok/s", "engine_throughput_tok_s", ".0f"),
        ),
        largest={"max_logit_diff": "engine_max_logit_diff"},
        checks=(
            Check("kendall_tau", at_least=0.8),
            Check("error_max", at_most=0.25),
            Check("max_logit_diff", at_most=1e-4),
        ),
        requires=("torch",),
    )
