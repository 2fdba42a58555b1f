"""`crucible validate --target batching`: each policy in the simulator and in the real engine, same slice.

Every policy runs in the sandbox, as in a search: the job's instance carries an "engine" setting, so the
target serves the slice twice with the same scheduler, once priced by the cost model and once run on real
kernels, and returns both sets of metrics. The slice is scaled down to fit the engine on 2 cores: token
counts and the token budget divided by `token_divisor` (KV blocks are `block_tokens` after the division,
the size the profile's attention was measured at), outputs capped at `max_output`, arrivals made `load`
times as dense. Policies are ranked by mean TTFT (lower is better).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import targets
from targets.base import Instance, WorkloadError
from targets.batching.target import DEFAULTS, load_workload
from targets.costmodel.model import DEFAULT_PROFILE

from .errors import UserError
from .validation import kendall_tau, require_torch, run_candidates

RANKED_BY = "ttft_mean_ms"
"""Mean TTFT: every request counts, and unlike a share meeting SLOs it does not saturate on a short slice."""
COMPARED = ("ttft_mean_ms", "ttft_p99_ms", "tpot_mean_ms", "throughput_tok_s", "slo_attainment")


def batching_instance(
    workload: str | None = None,
    requests: str = "0:200",
    capacity: int = 128,
    block_tokens: int = 8,
    load: float = 25.0,
    token_divisor: int = 8,
    max_output: int = 32,
    ttft_slo_s: float = 1.0,
    tpot_slo_s: float = 0.02,
    profile: str = DEFAULT_PROFILE,
    seed: int = 0,
) -> Instance:
    """The scaled-down slice both the simulator and the engine serve; bad input is a one-line error."""
    target = targets.load("batching")
    workload = workload or target.default_config()["workload"]
    try:
        start, stop = (int(x) for x in requests.split(":"))
    except ValueError:
        raise UserError(f"--requests takes START:STOP, got {requests!r}") from None
    try:
        n = load_workload(workload).n
    except WorkloadError as exc:
        raise UserError(str(exc)) from None
    if not 0 <= start < stop <= n or min(capacity, block_tokens, token_divisor) < 1 or max_output < 0:
        raise UserError(
            f"need 0 <= START < STOP <= {n} requests, a capacity, block size and token divisor of at least "
            "1, a positive load and a non-negative output cap"
        )
    if load <= 0:
        raise UserError(f"--load must be positive, got {load:g}")
    config: dict[str, Any] = {
        **{k: v for k, v in DEFAULTS.items() if k in ("token_budget", "max_seqs")},
        "capacity": capacity,
        "block_tokens": block_tokens * token_divisor,  # divided with the trace's tokens, as in the profile
        "load": load,
        "token_divisor": token_divisor,
        "max_output": max_output,
        "requests": [start, stop],
        "ttft_slo_s": ttft_slo_s,
        "tpot_slo_s": tpot_slo_s,
        "profile": profile,
        "engine": {"seed": seed},
    }
    label = f"{Path(workload).name}[{start}:{stop}]@{capacity}x{load:g}/{token_divisor}"
    instance = Instance(workload, config, label)
    try:
        target.instances(workload, {k: v for k, v in config.items() if k != "engine"})
    except WorkloadError as exc:
        raise UserError(str(exc)) from None
    return instance


def validate_batching(
    candidates: list[str], instance: Instance, sandbox: str = "auto", as_json: bool = False
) -> dict[str, Any]:
    """Run every candidate (a heuristic file, a baseline name, or srpt) on the instance in the sandbox, one at
    a time so the engine's timings have the cores; print both rankings and the errors; return the report."""
    require_torch("crucible validate")
    target = targets.load("batching")
    rows = run_candidates(target, candidates, instance, sandbox)
    report = validation_report(rows)
    if as_json:
        print(json.dumps({"instance": instance.to_json(), **report}, indent=2, sort_keys=True))
    else:
        Console().print(validation_table(instance.label, report))
        Console().print(
            f"Kendall tau of the rankings by mean TTFT: {report['kendall_tau']:.3f}; "
            f"per-policy error of mean TTFT {report['error_min']:.1%} to {report['error_max']:.1%}",
            highlight=False,
        )
    return report


def validation_report(rows: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Simulated against measured figures per policy, the two rankings, and their agreement."""
    names = list(rows)

    def error(name: str, metric: str) -> float:
        sim, real = rows[name][metric], rows[name][f"engine_{metric}"]
        return abs(sim - real) / real if real else float("inf")

    def ranks(key: str) -> dict[str, int]:
        return {n: i + 1 for i, n in enumerate(sorted(names, key=lambda n: rows[n][key]))}

    sim, real = ranks(RANKED_BY), ranks(f"engine_{RANKED_BY}")
    policies = {
        n: {
            **rows[n],
            "sim_rank": sim[n],
            "engine_rank": real[n],
            **{f"error_{m}": error(n, m) for m in COMPARED},
        }
        for n in names
    }
    errors = [policies[n][f"error_{RANKED_BY}"] for n in names]
    return {
        "ranked_by": RANKED_BY,
        "policies": policies,
        "kendall_tau": kendall_tau(
            [rows[n][RANKED_BY] for n in names], [rows[n][f"engine_{RANKED_BY}"] for n in names]
        ),
        "error_min": min(errors),
        "error_max": max(errors),
    }


def validation_table(title: str, report: dict[str, Any]) -> Table:
    table = Table(title=f"batching, simulator against engine: {title}", min_width=150)
    columns = (
        "policy", "sim rank", "engine rank", "sim TTFT ms", "engine TTFT ms", "error", "sim TTFT p99",
        "engine TTFT p99", "sim TPOT ms", "engine TPOT ms", "sim tok/s", "engine tok/s", "sim SLO",
        "engine SLO", "preempt sim/engine",
    )  # fmt: skip
    for col in columns:
        table.add_column(col, justify="left" if col == "policy" else "right")
    for n, r in sorted(report["policies"].items(), key=lambda kv: kv[1]["engine_rank"]):
        table.add_row(
            n,
            str(r["sim_rank"]),
            str(r["engine_rank"]),
            f"{r['ttft_mean_ms']:.0f}",
            f"{r['engine_ttft_mean_ms']:.0f}",
            f"{r['error_ttft_mean_ms']:.0%}",
            f"{r['ttft_p99_ms']:.0f}",
            f"{r['engine_ttft_p99_ms']:.0f}",
            f"{r['tpot_mean_ms']:.2f}",
            f"{r['engine_tpot_mean_ms']:.2f}",
            f"{r['throughput_tok_s']:.0f}",
            f"{r['engine_throughput_tok_s']:.0f}",
            f"{r['slo_attainment']:.1%}",
            f"{r['engine_slo_attainment']:.1%}",
            f"{r['preemptions']:.0f}/{r['engine_preemptions']:.0f}",
        )
    return table
