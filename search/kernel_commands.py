"""`crucible profile` and `crucible validate`: real kernels behind the simulators' cost models."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import targets
from sandbox.choice import BACKENDS
from targets.base import Instance
from targets.costmodel.model import DEFAULT_PROFILE, Profile, ProfileError
from targets.costmodel.shapes import MODELS, TINY
from targets.kv.kernels import cost_model
from targets.kv.target import load_workload

from .batching_validate import batching_instance, validate_batching
from .errors import UserError
from .validation import kendall_tau, require_torch, run_candidates

_err = Console(stderr=True)


def add_parsers(sub: Any) -> None:
    """Register the subcommands on the CLI's subparsers."""
    p = sub.add_parser("profile", help="measure kernel times with PyTorch and fit the cost model")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--output", "-o", default="profile.json", help="profile file to write")
    p.add_argument("--name", help="the profile's name (default: from the device)")
    p.add_argument("--model", choices=sorted(MODELS), default=TINY.name, help="shapes to measure at")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (sandbox jobs use 1)")
    p.add_argument("--groups", default="2", help="comma-separated process counts for collectives")
    p.add_argument("--repeats", type=int, default=7, help="timed runs per shape (the median is kept)")
    p.add_argument("--block", type=int, default=8, help="KV block size in tokens of the attention kernels")
    p.add_argument("--seed", type=int, default=0, help="seed of the held-back split")
    p.add_argument("--from-vidur", metavar="DIR", help="import Vidur's measured H100 CSVs instead")

    v = sub.add_parser("validate", help="rank policies in the simulator and in the real engine, side by side")
    v.add_argument("--target", default="kv", choices=("kv", "batching"))
    v.add_argument(
        "--candidates",
        nargs="+",
        required=True,
        help="heuristic files, or names of the target's baselines (lru, fifo, ..., belady)",
    )
    v.add_argument("--workload", help="trace file or gen:<kind>:<seed> (default: the shipped workload)")
    v.add_argument("--requests", help="slice of the trace, START:STOP (default: kv 0:200, batching 0:200)")
    v.add_argument("--capacity", type=int, help="KV capacity in blocks (default: kv 300, batching 128)")
    v.add_argument("--profile", default=DEFAULT_PROFILE, help="profile the simulator prices kernels with")
    v.add_argument("--seed", type=int, default=0, help="seed of the engine's random weights")
    v.add_argument("--sandbox", default="auto", choices=BACKENDS)
    v.add_argument("--block-tokens", type=int, default=8, help="tokens per block in the scaled-down replay")
    kv = v.add_argument_group("kv")
    kv.add_argument("--repeats", type=int, default=3, help="timed runs of each prefill (the median is kept)")
    batching = v.add_argument_group("batching")
    batching.add_argument("--load", type=float, default=25.0, help="arrivals made this many times as dense")
    batching.add_argument("--token-divisor", type=int, default=8, help="token counts divided by this")
    batching.add_argument("--max-output", type=int, default=32, help="output lengths capped at this")
    batching.add_argument("--ttft-slo", type=float, default=1.0, help="TTFT SLO in seconds")
    batching.add_argument("--tpot-slo", type=float, default=0.02, help="TPOT SLO in seconds")
    v.add_argument("--json", action="store_true", help="machine-readable result on stdout")


def profile(args: argparse.Namespace) -> None:
    try:
        groups = tuple(int(g) for g in args.groups.split(",") if g)
    except ValueError:
        raise UserError(f"--groups takes comma-separated integers, got {args.groups!r}") from None
    if any(g < 2 for g in groups) or args.threads < 1 or args.repeats < 1 or args.block < 1:
        raise UserError("--groups need 2 or more processes; --threads, --repeats, --block at least 1")
    try:
        if args.from_vidur:
            from targets.costmodel.vidur import import_vidur

            result = import_vidur(args.from_vidur, seed=args.seed)
        else:
            require_torch("crucible profile")
            import torch

            from targets.costmodel.profiler import Settings
            from targets.costmodel.profiler import profile as measure

            if args.device == "cuda" and torch.cuda.device_count() < 1:
                raise UserError("--device cuda: no CUDA device is visible")
            if args.device == "cuda" and max(groups) > torch.cuda.device_count():
                groups = tuple(g for g in groups if g <= torch.cuda.device_count())
                _err.print(f"NCCL groups limited to {torch.cuda.device_count()} visible GPUs", markup=False)
            settings = Settings(
                device=args.device, threads=args.threads, repeats=args.repeats, groups=groups, seed=args.seed
            )
            name = args.name or f"{args.device}-measured"
            with _err.status("measuring") as status:
                result = measure(MODELS[args.model], settings, name, args.block, status.update)
    except ProfileError as exc:
        raise UserError(str(exc)) from None
    result.save(args.output)
    Console().print(error_table(result))
    _err.print(f"wrote {args.output}", markup=False)


def error_table(profile: Profile) -> Table:
    """Median and worst relative error of each fit on the measurements it did not see."""
    table = Table(title=f"profile {profile.name} ({profile.device}): fit error on held-back measurements")
    for col in ("operator", "held back", "median error", "worst error"):
        table.add_column(col, justify="right" if col != "operator" else "left")
    for op, median, worst, n in profile.error_table():
        table.add_row(op, str(n), f"{median:.1%}", f"{worst:.1%}")
    return table


def validate(args: argparse.Namespace) -> None:
    if args.target == "batching":
        instance = batching_instance(
            workload=args.workload,
            requests=args.requests or "0:200",
            capacity=args.capacity or 128,
            block_tokens=args.block_tokens,
            load=args.load,
            token_divisor=args.token_divisor,
            max_output=args.max_output,
            ttft_slo_s=args.ttft_slo,
            tpot_slo_s=args.tpot_slo,
            profile=args.profile,
            seed=args.seed,
        )
        validate_batching(args.candidates, instance, sandbox=args.sandbox, as_json=args.json)
    else:
        _validate_kv(args, args.requests or "0:200", args.capacity or 300)


def _validate_kv(args: argparse.Namespace, requests: str, capacity: int) -> None:
    require_torch("crucible validate")
    try:
        start, stop = (int(x) for x in requests.split(":"))
    except ValueError:
        raise UserError(f"--requests takes START:STOP, got {requests!r}") from None
    target = targets.load(args.target)
    workload = args.workload or target.default_config()["workload"]
    config: dict[str, Any] = {
        "capacity": capacity,
        "requests": [start, stop],
        "block_tokens": args.block_tokens,
        "profile": args.profile,
        "engine": {"repeats": args.repeats, "seed": args.seed},
    }
    n = load_workload(workload).n_requests
    if not 0 <= start < stop <= n or capacity < 1 or args.block_tokens < 1 or args.repeats < 1:
        raise UserError(
            f"need 0 <= START < STOP <= {n} requests, and a capacity, block size and repeats of at least 1"
        )
    cost_model(args.profile)  # a profile that cannot price prefill fails here, not in every job
    instance = Instance(workload, config, f"{Path(workload).name}[{start}:{stop}]@{capacity}")
    rows = run_candidates(target, args.candidates, instance, args.sandbox)
    report = validation_report(rows)
    if args.json:
        print(json.dumps({"instance": instance.to_json(), **report}, indent=2, sort_keys=True))
        return
    Console().print(validation_table(f"{instance.label}, x{args.block_tokens}-token blocks", report))
    Console().print(
        f"Kendall tau of the rankings by prefill time saved: {report['kendall_tau']:.3f}; "
        f"worst error {report['worst_error']:.1%}; largest logit difference with and without reuse "
        f"{report['max_logit_diff']:.2e}",
        highlight=False,
    )


def validation_report(rows: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Predicted against measured prefill time saved, per policy, and the agreement of the rankings."""
    names = list(rows)
    predicted = [rows[n]["prefill_ms_saved"] for n in names]
    measured = [rows[n]["engine_prefill_ms_saved"] for n in names]
    errors = [abs(p - m) / m if m > 0 else float("inf") for p, m in zip(predicted, measured, strict=True)]
    # The share of all prefill time saved: free of how fast the machine ran while it was measured.
    shares = {
        n: (
            rows[n]["prefill_ms_saved"] / rows[n]["prefill_ms_total"],
            rows[n]["engine_prefill_ms_saved"] / rows[n]["engine_prefill_ms_full"],
        )
        for n in names
    }
    return {
        "policies": {
            n: {
                "predicted_ms_saved": p,
                "measured_ms_saved": m,
                "error": e,
                "predicted_share": shares[n][0],
                "measured_share": shares[n][1],
                **rows[n],
            }
            for n, p, m, e in zip(names, predicted, measured, errors, strict=True)
        },
        "kendall_tau": kendall_tau(predicted, measured),
        "worst_error": max(errors),
        "max_logit_diff": max(rows[n]["engine_max_logit_diff"] for n in names),
    }


def validation_table(title: str, report: dict[str, Any]) -> Table:
    table = Table(title=f"simulator against engine: {title}", min_width=150)
    columns = (
        "policy",
        "hit rate",
        "sim saved ms",
        "engine saved ms",
        "error",
        "sim share",
        "engine share",
        "sim rank",
        "engine rank",
        "TTFT p50 ms",
        "TPOT ms",
        "tok/s",
    )
    for col in columns:
        table.add_column(col, justify="left" if col == "policy" else "right")
    policies = report["policies"]

    def ranks(key: str) -> dict[str, int]:
        ordered = sorted(policies, key=lambda n: policies[n][key], reverse=True)
        return {n: i + 1 for i, n in enumerate(ordered)}

    sim, eng = ranks("predicted_ms_saved"), ranks("measured_ms_saved")
    for n, row in sorted(policies.items(), key=lambda kv: -kv[1]["measured_ms_saved"]):
        table.add_row(
            n,
            f"{row['block_hit_rate']:.4f}",
            f"{row['predicted_ms_saved']:.1f}",
            f"{row['measured_ms_saved']:.1f}",
            f"{row['error']:.1%}",
            f"{row['predicted_share']:.2%}",
            f"{row['measured_share']:.2%}",
            str(sim[n]),
            str(eng[n]),
            f"{row['engine_ttft_ms_p50']:.2f}",
            f"{row['engine_tpot_ms_mean']:.2f}",
            f"{row['engine_throughput_tok_s']:.0f}",
        )
    return table
