"""`crucible profile` and `crucible validate`: real kernels behind the simulators' cost models."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import targets
from sandbox.choice import BACKENDS, choose_sandbox
from sandbox.job import Job, Limits
from targets.base import Instance
from targets.kernels.costmodel import DEFAULT_PROFILE, Profile, ProfileError
from targets.kernels.models import MODELS, TINY
from targets.kv.kernels import cost_model
from targets.kv.target import load_workload

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
    v.add_argument("--requests", default="0:200", help="slice of the trace, START:STOP (default 0:200)")
    v.add_argument("--capacity", type=int, default=300, help="cache capacity in blocks")
    v.add_argument("--block-tokens", type=int, default=8, help="tokens per block in the scaled-down replay")
    v.add_argument("--profile", default=DEFAULT_PROFILE, help="profile the simulator prices prefill with")
    v.add_argument("--repeats", type=int, default=3, help="timed runs of each prefill (the median is kept)")
    v.add_argument("--seed", type=int, default=0, help="seed of the engine's random weights")
    v.add_argument("--sandbox", default="auto", choices=BACKENDS)
    v.add_argument("--json", action="store_true", help="machine-readable result on stdout")


def _user_error(message: str) -> Exception:
    from .cli import UserError

    return UserError(message)


def require_torch(command: str) -> None:
    """A clear one-line error where the torch extra is not installed."""
    if importlib.util.find_spec("torch") is None:
        raise _user_error(f"{command} needs PyTorch: pip install 'crucible[torch]'")


def profile(args: argparse.Namespace) -> None:
    try:
        groups = tuple(int(g) for g in args.groups.split(",") if g)
    except ValueError:
        raise _user_error(f"--groups takes comma-separated integers, got {args.groups!r}") from None
    if any(g < 2 for g in groups) or args.threads < 1 or args.repeats < 1 or args.block < 1:
        raise _user_error("--groups need 2 or more processes; --threads, --repeats, --block at least 1")
    try:
        if args.from_vidur:
            from targets.kernels.vidur import import_vidur

            result = import_vidur(args.from_vidur, seed=args.seed)
        else:
            require_torch("crucible profile")
            import torch

            from targets.kernels.measure import Settings
            from targets.kernels.measure import profile as measure

            if args.device == "cuda" and torch.cuda.device_count() < 1:
                raise _user_error("--device cuda: no CUDA device is visible")
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
        raise _user_error(str(exc)) from None
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


ENGINE_LIMITS = Limits(wall_s=7200.0, memory_mb=16384, cpu_s=14400)
"""A replay in the engine runs real kernels for minutes and maps torch: far above a simulator job."""


def kendall_tau(a: list[float], b: list[float]) -> float:
    """Kendall's tau-b of two score lists, which discounts ties.

    Policies that make the same decisions tie exactly in the simulator, while the engine's measurements
    of them differ by noise; tau-b neither rewards nor punishes either order of such a pair.
    """
    pairs = [(i, j) for i in range(len(a)) for j in range(i + 1, len(a))]
    sign = [(a[i] - a[j]) * (b[i] - b[j]) for i, j in pairs]
    untied_a = sum(a[i] != a[j] for i, j in pairs)
    untied_b = sum(b[i] != b[j] for i, j in pairs)
    if not untied_a or not untied_b:
        return 1.0 if untied_a == untied_b else 0.0
    return (sum(s > 0 for s in sign) - sum(s < 0 for s in sign)) / (untied_a * untied_b) ** 0.5


def _candidate_jobs(target: Any, names: list[str], instance: Instance) -> dict[str, Job]:
    """A job per candidate: a heuristic file, a baseline in candidate form, or a built-in mechanism."""
    baselines = target.baselines()
    jobs: dict[str, Job] = {}
    for name in names:
        if name in baselines:
            jobs[name] = Job(target.name, baselines[name], (instance,), limits=ENGINE_LIMITS)
        elif name in target.builtin_baselines():
            jobs[name] = Job(target.name, "", (instance,), builtin=name, limits=ENGINE_LIMITS)
        else:
            path = Path(name)
            try:
                source = path.read_text()
            except (OSError, UnicodeDecodeError):
                known = ", ".join([*baselines, *target.builtin_baselines()])
                raise _user_error(
                    f"{name}: neither a readable heuristic file nor a baseline ({known})"
                ) from None
            jobs[path.stem] = Job(target.name, source, (instance,), limits=ENGINE_LIMITS)
    return jobs


def validate(args: argparse.Namespace) -> None:
    if args.target != "kv":
        raise _user_error("validate supports --target kv; the batching target is not built yet")
    require_torch("crucible validate")
    try:
        start, stop = (int(x) for x in args.requests.split(":"))
    except ValueError:
        raise _user_error(f"--requests takes START:STOP, got {args.requests!r}") from None
    target = targets.load(args.target)
    workload = args.workload or target.default_config()["workload"]
    config: dict[str, Any] = {
        "capacity": args.capacity,
        "requests": [start, stop],
        "block_tokens": args.block_tokens,
        "profile": args.profile,
        "engine": {"repeats": args.repeats, "seed": args.seed},
    }
    n = load_workload(workload).n_requests
    if not 0 <= start < stop <= n or args.capacity < 1 or args.block_tokens < 1 or args.repeats < 1:
        raise _user_error(
            f"need 0 <= START < STOP <= {n} requests, and a capacity, block size and repeats of at least 1"
        )
    cost_model(args.profile)  # a profile that cannot price prefill fails here, not in every job
    instance = Instance(workload, config, f"{Path(workload).name}[{start}:{stop}]@{args.capacity}")
    jobs = _candidate_jobs(target, args.candidates, instance)
    sandbox, reason = choose_sandbox(args.sandbox)
    _err.print(f"sandbox: {sandbox.name} ({reason})", markup=False, highlight=False)
    rows: dict[str, dict[str, float]] = {}
    with _err.status("replaying") as status:
        for name, job in jobs.items():  # one at a time: the engine's timings need the cores to themselves
            status.update(f"{name}: simulator and engine on {instance.label}")
            result = sandbox.run(job)
            if result.status != "ok":
                raise _user_error(f"{name}: {result.status}: {result.message}")
            rows[name] = result.instances[0].metrics
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
