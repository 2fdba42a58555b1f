"""`crucible profile` and `crucible validate`: real kernels behind the simulators' cost models."""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox.base import BACKENDS
from search.cli import parsing
from search.errors import UserError
from search.settings import DEFAULT_STORE
from targets.base import Option, OptionError, ReferenceFailed, Validation, WorkloadError, resolve_options
from targets.costmodel.shapes import MODELS, TINY

if TYPE_CHECKING:
    from rich.table import Table

    from targets.costmodel.model import Profile


def add_parser(sub: Any, name: str, help_text: str) -> None:
    """Register `profile` or `validate` on the CLI's subparsers."""
    if name == "validate":
        _validate_parser(sub, help_text)
        return
    p = sub.add_parser(name, help=help_text, description=help_text[0].upper() + help_text[1:] + ".")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--output", "-o", default="profile.json", help="profile file to write")
    p.add_argument("--name", help="the profile's name (default: from the device)")
    p.add_argument("--model", choices=sorted(MODELS), default=TINY.name, help="shapes to measure at")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (sandbox jobs use 1)")
    p.add_argument("--groups", default="2", help="comma-separated process counts for collectives")
    p.add_argument("--repeats", type=int, default=7, help="timed runs per shape (the median is kept)")
    p.add_argument("--block", type=int, default=8, help="KV block size in tokens of the attention kernels")
    p.add_argument("--seed", type=int, default=0, help="seed of the held-back split")
    p.add_argument(
        "--deployment",
        metavar="NAME",
        help="measure one GPU's share of a deployment (its shapes, BF16) and print measured against its "
        "published-derived prediction per operator (`crucible deployments` lists them)",
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=0,
        help="measure no shape beyond this many tokens (0: the whole grid)",
    )
    p.add_argument("--from-vidur", metavar="DIR", help="import Vidur's measured GPU CSVs instead")
    p.add_argument(
        "--vidur-set",
        default="h100-vidur",
        help="which of Vidur's CSVs make the profile: h100-vidur (Llama-2-7B on the H100), "
        "h100-vidur-llama2 (Llama-2-7B and -70B), a100-vidur-llama3 (Llama-3-8B and -70B on the A100)",
    )
    p.add_argument("--json", action="store_true", help="the profile's summary as JSON on stdout")
    p.set_defaults(handler=profile)


def profile(args: argparse.Namespace) -> None:
    from rich.console import Console

    from search.validation import require
    from targets.costmodel.model import ProfileError
    from targets.deployments.measured import against_published

    try:
        groups = tuple(int(g) for g in args.groups.split(",") if g)
    except ValueError:
        raise UserError(f"--groups takes comma-separated integers, got {args.groups!r}") from None
    if any(g < 2 for g in groups) or args.threads < 1 or args.repeats < 1 or args.block < 1:
        raise UserError("--groups need 2 or more processes; --threads, --repeats, --block at least 1")
    if not 0 <= args.max_tokens <= 10**6:
        raise UserError(f"--max-tokens takes 0 (the whole grid) to 1e6, got {args.max_tokens}")
    on = None
    if args.deployment:
        from targets.deployments.catalog import SERVING, deployment

        if args.deployment not in SERVING:
            raise UserError(f"--deployment {args.deployment!r}: not one of {', '.join(SERVING)}")
        on = deployment(args.deployment)
    try:
        if args.from_vidur:
            from targets.costmodel.vidur import import_vidur

            result = import_vidur(args.from_vidur, seed=args.seed, name=args.vidur_set)
        else:
            require("crucible profile", ("torch",))
            import torch

            from targets.reference_engine.profiler import Settings
            from targets.reference_engine.profiler import profile as measure

            if args.device == "cuda" and torch.cuda.device_count() < 1:
                raise UserError("--device cuda: no CUDA device is visible")
            if args.device == "cuda" and max(groups) > torch.cuda.device_count():
                groups = tuple(g for g in groups if g <= torch.cuda.device_count())
                parsing.note(f"NCCL groups limited to {torch.cuda.device_count()} visible GPUs")
            if on and args.device == "cuda":  # the deployment's own group, where its GPUs are visible
                groups = (on.tensor_parallel,) if 1 < on.tensor_parallel <= torch.cuda.device_count() else ()
            settings = Settings(
                device=args.device,
                threads=args.threads,
                repeats=args.repeats,
                groups=groups,
                seed=args.seed,
                dtype="bfloat16" if on else "float32",
                max_tokens=args.max_tokens,
            )
            name = args.name or (f"{args.device}-{on.name}" if on else f"{args.device}-measured")
            shape = on.shard if on else MODELS[args.model]
            with Console(stderr=True).status("measuring") as status:
                result = measure(shape, settings, name, args.block, status.update, passes=on is None)
    except ProfileError as exc:
        raise UserError(str(exc)) from None
    result.save(args.output)
    compared = against_published(on, result) if on else []
    if args.json:
        print(json.dumps({**profile_summary(result, args.output), "against_published": compared}, indent=2))
    else:
        Console().print(error_table(result))
        if compared:
            Console().print(comparison_table(on.name if on else "", compared))
    parsing.note(f"wrote {args.output}")


def comparison_table(deployment: str, rows: list[dict[str, Any]]) -> Any:
    """Measured against the deployment's published-derived prediction, per operator."""
    from rich.table import Table

    table = Table(title=f"measured / predicted by {deployment} (published figures and Vidur's fits)")
    for column in rows[0]:
        table.add_column(column, justify="left" if column == "operator" else "right")
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    return table


def profile_summary(profile: Profile, output: str) -> dict[str, Any]:
    """What `profile --json` prints: where the profile went, what it measured, and each fit's terms,
    coefficients and error on the measurements held back from it (null where none were)."""

    def number(x: float) -> float | None:
        return x if math.isfinite(x) else None

    fits = [*profile.operators.items()]
    fits += [(f"{op}/{g}", f) for op, by in profile.collectives.items() for g, f in by.items()]
    return {
        "output": str(Path(output).resolve()),
        "name": profile.name,
        "device": profile.device,
        "source": profile.source,
        "model": profile.model.name,
        "fits": [
            {
                "operator": name,
                "terms": list(fit.terms),
                "coef_ms": list(fit.coef),
                "samples": len(fit.samples),
                "held_back": held_back,
                "median_error": number(median),
                "worst_error": number(worst),
            }
            for name, fit in fits
            for median, worst, held_back in [fit.errors()]
        ],
    }


def error_table(profile: Profile) -> Table:
    """Median and worst relative error of each fit on the measurements it did not see."""
    from rich.table import Table

    table = Table(title=f"profile {profile.name} ({profile.device}): fit error on held-back measurements")
    for col in ("operator", "held back", "median error", "worst error"):
        table.add_column(col, justify="right" if col != "operator" else "left")
    for op, median, worst, n in profile.error_table():
        table.add_row(op, str(n), f"{median:.1%}", f"{worst:.1%}")
    return table


@functools.cache
def _validations() -> dict[str, Validation]:
    """target name -> its Validation, for the targets that declare one (loaded once)."""
    import targets

    found: dict[str, Validation] = {}
    for name in targets.names():
        declared = targets.load(name).validation()
        if declared is not None:
            found[name] = declared
    return found


def measured_under(profile: str) -> str:
    """Where and under what load the pricing profile was measured, beside the load now: a CPU runs the
    same kernels slower on a loaded machine, so a profile of another load biases every figure alike."""
    from targets.costmodel.model import ProfileError, load_profile

    try:
        meta = load_profile(profile).meta
    except ProfileError as exc:
        raise UserError(str(exc)) from None
    load = meta.get("load_average")
    then = f"load average {load[0]:g} to {load[1]:g}" if load else "load not recorded"
    date = meta.get("date", "on an unrecorded date")
    return f"profile {profile}: measured {date}, {then}; load average now {os.getloadavg()[0]:.2f}"


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _validate_parser(sub: Any, help_text: str) -> None:
    """`crucible validate`: the common flags; the options of the chosen target's validation are flags of
    their own too (`--requests 0:40`), resolved once the target is loaded."""
    v = sub.add_parser(
        "validate",
        help=help_text,
        description=help_text[0].upper() + help_text[1:] + ".",
        epilog="Each option of the target's validation is a flag: --NAME VALUE (`crucible targets show "
        "TARGET` lists them).",
    )
    v.set_defaults(handler=validate, option_flags=True)
    v.add_argument("--target", default="kv", metavar="TARGET", help="whose simulator to check (default kv)")
    v.add_argument(
        "--candidates",
        nargs="+",
        help="heuristic files, or names of the target's baselines (a wrong name lists them); required "
        "unless --against",
    )
    v.add_argument(
        "--against",
        metavar="SYSTEM",
        help="a real system to check the simulator's decisions against, one by one (a target's "
        "reference: serving has sglang-router), instead of ranking --candidates in the engine",
    )
    v.add_argument("--workload", help="trace file or gen:<kind>:<seed> (default: the shipped workload)")
    v.add_argument("--sandbox", default="auto", choices=BACKENDS, help="where the jobs run (default auto)")
    v.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    v.add_argument("--check", action="store_true", help="exit 1 if a check the target declares fails")
    v.add_argument(
        "--db", default=DEFAULT_STORE, help=f"store the validation records into (default {DEFAULT_STORE})"
    )


def _validation_options(args: argparse.Namespace, options: tuple[Option, ...]) -> dict[str, str]:
    """The validation's option flags among the words the parser did not know, as texts by option name."""
    known = {_flag(o.name): o.name for o in options}
    given: dict[str, str] = {}
    words = list(args.extra)
    while words:
        word = words.pop(0)
        flag, eq, value = word.partition("=")
        if flag not in known:
            flags = ", ".join(known) or "none"
            raise OptionError(f"{flag} is not an option of validate --target {args.target} ({flags})")
        if not eq:
            if not words:
                raise OptionError(f"{flag} needs a value")
            value = words.pop(0)
        given[known[flag]] = value
    return given


def validate(args: argparse.Namespace) -> None:
    from rich.console import Console

    from search.service import load_target
    from search.validation import (
        candidate_jobs,
        report,
        require,
        run_candidates,
        simulated_again,
        summary,
        table,
        unresolved_pairs,
    )

    target = load_target(args.target)
    if args.against:
        return _against(args, target)
    if not args.candidates:
        raise UserError("validate needs --candidates (or --against SYSTEM)")
    validation = target.validation()
    if validation is None:
        validated = ", ".join(_validations()) or "none"
        raise UserError(f"target {args.target} has no engine to validate against; those that do: {validated}")
    known = {o.name: o for o in validation.options}
    try:
        given = _validation_options(args, validation.options)
        values = resolve_options(validation.options, {n: known[n].parse(text) for n, text in given.items()})
        workload = args.workload or target.default_config()["workload"]
        if Path(workload).is_file():  # the job runs elsewhere: a path relative to here would not be found
            workload = str(Path(workload).resolve())
        instance = validation.instance(workload, values)
    except OptionError as exc:
        raise UserError(str(exc)) from None
    jobs = candidate_jobs(target, args.candidates, instance)
    # Every mistake in the arguments is named before a missing engine dependency is.
    require(f"crucible validate --target {args.target}", validation.requires)
    if "profile" in values:
        parsing.note(measured_under(values["profile"]))
    served = run_candidates(jobs, instance.label, args.sandbox, int(values.get("rounds", 1)))
    measured: dict[str, Any] = {}
    unresolved: set[tuple[str, str]] = set()
    if validation.calibrated:
        with tempfile.TemporaryDirectory(prefix="crucible-validate-") as folder:
            calibration = validation.calibrated(instance, values, served, Path(folder))
            if calibration:
                measured = calibration.figures
                served = simulated_again(served, jobs, calibration.priced, args.sandbox)
                metric = validation.ranked.simulated
                unresolved = unresolved_pairs(served, jobs, calibration.band, metric, args.sandbox)
    result = report(validation, served, measured, unresolved)
    run_id = _record(args, target, values, instance, jobs, served, validation, result)
    if args.json:
        shown = {"target": args.target, "instance": instance.to_json(), "run_id": run_id, **result}
        print(json.dumps(shown, indent=2))
    else:
        console = Console()
        out = table(validation, instance.label, result)
        if not console.is_terminal:  # piped output is as wide as the table, never cut at 80 columns
            console = Console(width=max(80, Console(width=100_000).measure(out).maximum))
        console.print(out)
        for line in summary(validation, result):
            console.print(line, highlight=False, markup=False)
        parsing.note(f"recorded as run {run_id} (crucible runs show {run_id})")
    if args.check and not all(check["passed"] for check in result["checks"]):
        raise SystemExit(1)


def _against(args: argparse.Namespace, target: Any) -> None:
    """`validate --against SYSTEM`: the target's reference run, its table or JSON, `--check` its checks."""
    from rich.console import Console
    from rich.table import Table

    references = target.references()
    if args.against not in references:
        known = ", ".join(references) or "none"
        raise UserError(
            f"target {args.target} is not checked against {args.against!r}; it is against: {known}"
        )
    reference = references[args.against]
    try:
        given = _validation_options(args, reference.options)
        values = resolve_options(
            reference.options,
            {n: o.parse(given[n]) for n, o in _by_name(reference.options).items() if n in given},
        )
        workload = args.workload or target.default_config()["workload"]
        result = reference.run(target, workload, values)
    except (OptionError, WorkloadError, ReferenceFailed) as exc:
        raise UserError(str(exc)) from None
    checks = result.data.get("checks", [])
    if args.json:
        print(json.dumps({"target": args.target, "against": args.against, **result.data}, indent=2))
    else:
        table = Table(title=result.title)
        for column in result.columns:
            table.add_column(column.replace("_", " "))
        for row in result.rows:
            table.add_row(*(_cell(row[c]) for c in result.columns))
        console = Console()
        if not console.is_terminal:  # piped output is as wide as the table, never cut at 80 columns
            console = Console(width=max(80, Console(width=100_000).measure(table).maximum))
        console.print(table)
        for check in checks:
            verdict = "passed" if check["passed"] else "FAILED"
            line = f"{check['name']}: {_cell(check['value'])} (needs {check['bound']}): {verdict}"
            console.print(line, highlight=False, markup=False)
    if args.check and not all(check["passed"] for check in checks):
        raise SystemExit(1)


def _by_name(options: tuple[Option, ...]) -> dict[str, Option]:
    return {o.name: o for o in options}


def _cell(value: Any) -> str:
    return f"{value:.1%}" if isinstance(value, float) and 0 <= value <= 1 else str(value)


def _record(
    args: argparse.Namespace,
    target: Any,
    values: dict[str, Any],
    instance: Any,
    jobs: dict[str, Any],
    served: Any,
    validation: Validation,
    result: dict[str, Any],
) -> str:
    """The validation as a run of the store (kind validate): each policy's median figures, simulator's and
    engine's, and the rankings' agreement as its marker."""
    from search.service import open_service
    from search.service.records import Policy
    from search.validation import medians

    config = {"target": target.name, "workload": instance.workload, "options": values}
    policies = [
        Policy(name, jobs[name].source, [{"label": instance.label, "role": "eval", "metrics": metrics}])
        for name, metrics in medians(served).items()
    ]
    marker = {k: result[k] for k in ("kendall_tau", "ranked_by") if k in result}
    metric = validation.ranked.simulated
    return open_service(args.db).record_scores(
        "validate", target.name, target.name, config, policies, metric, marker
    )
