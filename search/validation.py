"""`crucible validate`, for any target that declares a Validation: each policy in the simulator and in the
real engine on the same slice, the two rankings, their agreement, each figure's error and the target's checks.

Every policy runs in the sandbox, as in a search, one job at a time so the engine's timings have the cores.
A validation may declare a `rounds` option: every policy is then served that many times, in turns (all
policies once, then all again), each figure is the median over the rounds, and a pair of policies whose
order the engine's rounds do not settle (a signed-rank test on their per-round differences) is left out of
the rankings' agreement: the engine has not told them apart, so their order is no evidence for or against
the simulator. A validation that prices the simulator as the engine's jobs measured the machine
(`calibrated`) leaves out, likewise, the pairs whose simulated order turns within the speeds the jobs
measured.
What is compared, ranked, shown and checked is the target's declaration (targets.base.Validation); this
module knows no target."""

from __future__ import annotations

import importlib.util
import statistics
from collections.abc import Set as AbstractSet
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sandbox.choice import choose_sandbox
from sandbox.job import Job, Limits
from search.errors import UserError
from search.jobs import job, run
from search.stats.signed_rank import signed_rank_p
from targets.base import Instance, Rounds, Validation

ENGINE_LIMITS = Limits(wall_s=7200.0, memory_mb=16384, cpu_s=14400)
"""A replay in the engine runs real kernels for minutes and maps torch: far above a simulator job."""


EXTRA_MODULES = {"router": ("starlette", "uvicorn", "httpx")}
"""The modules of an extra whose name is not its one module's."""


def require(command: str, extras: tuple[str, ...]) -> None:
    """A clear one-line error where a module of an extra the command needs is missing."""
    for extra in extras:
        for module in EXTRA_MODULES.get(extra, (extra,)):
            if importlib.util.find_spec(module) is None:
                raise UserError(f"{command} needs {module}: pip install 'crucible[{extra}]'")


def kendall_tau(
    a: list[float], b: list[float], unsettled: AbstractSet[tuple[int, int]] = frozenset()
) -> float:
    """Kendall's tau-b of two score lists, which discounts ties.

    Policies that make the same decisions tie exactly in the simulator, while the engine's measurements
    of them differ by noise; tau-b neither rewards nor punishes either order of such a pair. `unsettled`
    names pairs (i < j) whose order b did not establish (its repeats disagree): such a pair is no evidence
    either way, so it is left out of both rankings rather than charged as a tie of b alone.
    """
    pairs = [(i, j) for i in range(len(a)) for j in range(i + 1, len(a)) if (i, j) not in unsettled]
    sign = [(a[i] - a[j]) * (b[i] - b[j]) for i, j in pairs]
    untied_a = sum(a[i] != a[j] for i, j in pairs)
    untied_b = sum(b[i] != b[j] for i, j in pairs)
    if not untied_a or not untied_b:
        return 1.0 if untied_a == untied_b else 0.0
    return (sum(s > 0 for s in sign) - sum(s < 0 for s in sign)) / (untied_a * untied_b) ** 0.5


def candidate_jobs(target: Any, names: list[str], instance: Instance) -> dict[str, Job]:
    """A job per candidate: a heuristic file, a baseline in candidate form, or a built-in mechanism."""
    baselines = target.baselines()
    jobs: dict[str, Job] = {}
    for name in names:
        if name in baselines:
            jobs[name] = job(target.name, baselines[name], (instance,), limits=ENGINE_LIMITS)
        elif name in target.builtin_baselines():
            jobs[name] = job(target.name, "", (instance,), builtin=name, limits=ENGINE_LIMITS)
        else:
            path = Path(name)
            try:
                source = path.read_text()
            except (OSError, UnicodeDecodeError):
                known = ", ".join([*baselines, *target.builtin_baselines()])
                raise UserError(
                    f"{name}: neither a readable heuristic file nor a baseline ({known})"
                ) from None
            jobs[path.stem] = job(target.name, source, (instance,), limits=ENGINE_LIMITS)
    return jobs


def run_candidates(jobs: dict[str, Job], label: str, sandbox: str, rounds: int = 1) -> Rounds:
    """Each candidate's metrics on the instance (simulator and engine) in each round, one job at a time in
    the sandbox: the engine's timings need the cores to themselves. Rounds take turns, so a machine that
    slows down for a while slows every policy's figures alike. A job that does not end ok is a one-line
    error."""
    box, reason = choose_sandbox(sandbox)
    err = Console(stderr=True)
    err.print(f"sandbox: {box.name} ({reason})", markup=False, highlight=False)
    served: Rounds = {name: [] for name in jobs}
    with err.status("running") as status:
        for round_ in range(1, rounds + 1):
            for name, each in jobs.items():
                status.update(f"{name}: {label}, round {round_} of {rounds}")
                (result,) = run(box, [each])
                if result.status != "ok":
                    raise UserError(f"{name}: {result.status}: {result.message}")
                served[name].append(result.instances[0].metrics)
    return served


def simulated_again(served: Rounds, jobs: dict[str, Job], priced: Instance, sandbox: str) -> Rounds:
    """Every round's figures with the simulator's replaced by each job's on `priced` (the simulator alone,
    priced as the machine was measured during the rounds); the engine's stay the rounds'."""
    again = run_candidates(_on(jobs, priced), "the simulator priced as measured", sandbox)
    return {name: [{**row, **again[name][0]} for row in rows] for name, rows in served.items()}


def unresolved_pairs(
    served: Rounds, jobs: dict[str, Job], band: tuple[Instance, ...], metric: str, sandbox: str
) -> set[tuple[str, str]]:
    """Pairs of policies the simulator orders one way at the speed it was priced at (`served`) and the other
    way at a speed of `band` (the fastest and slowest the engine's jobs measured): near-equal policies
    whose order turns with the machine's speed, so the simulator does not resolve them on this machine."""
    at = [served] + [
        run_candidates(_on(jobs, priced), "the simulator at the measured speeds", sandbox) for priced in band
    ]
    return turning({name: [each[name][0] for each in at] for name in served}, metric)


def _on(jobs: dict[str, Job], instance: Instance) -> dict[str, Job]:
    """The same candidates' jobs on another instance."""
    return {name: replace(job, instances=(instance,)) for name, job in jobs.items()}


def medians(served: Rounds) -> dict[str, dict[str, float]]:
    """Each policy's figures as the median over its rounds (the simulator's are the same in every round)."""
    return {
        name: {metric: statistics.median(r[metric] for r in runs) for metric in runs[0]}
        for name, runs in served.items()
    }


SETTLING_LEVEL = 1 / 8
"""The one-sided level at which a pair's rounds settle its order: three rounds all one way is the least
evidence that does (p = 1/8); of five, one round the other way still does when its difference is one of
the pair's two smallest (p = 1/16 or 3/32), not when it is larger (5/32 and up)."""


def unsettled(served: Rounds, metric: str) -> set[tuple[str, str]]:
    """Pairs of policies whose order the engine's rounds do not settle: the signed-rank test on the pair's
    per-round differences does not reach SETTLING_LEVEL.

    Rounds are paired: round i of every policy was served within minutes of the others, so a machine that
    slows down between rounds moves both figures of a pair alike and does not unsettle its order, while a
    pair whose difference is below one serving's noise goes one way in some rounds and the other in others.
    Testing the differences' signs and sizes rather than asking every round to agree means more rounds
    settle more pairs, not fewer. With one round nothing is unsettled (no noise has been seen)."""
    names = list(served)
    if not names or len(served[names[0]]) < 2:
        return set()

    def p(a: str, b: str) -> float:
        return signed_rank_p([ra[metric] - rb[metric] for ra, rb in zip(served[a], served[b], strict=True)])

    return {(a, b) for a, b in _pairs(names) if p(a, b) > SETTLING_LEVEL}


def turning(servings: Rounds, metric: str) -> set[tuple[str, str]]:
    """Pairs of policies ordered one way in one serving and the other way in another."""

    def signs(a: str, b: str) -> set[bool]:
        return {ra[metric] < rb[metric] for ra, rb in zip(servings[a], servings[b], strict=True)}

    return {(a, b) for a, b in _pairs(list(servings)) if len(signs(a, b)) > 1}


def _pairs(names: list[str]) -> set[tuple[str, str]]:
    """Every pair of policies, each once, in the order they are listed."""
    return {(a, b) for i, a in enumerate(names) for b in names[i + 1 :]}


def relative_error(simulated: float, measured: float) -> float | None:
    """|simulated - measured| / |measured|; None where the engine measured zero and the simulator did not."""
    if measured:
        return abs(simulated - measured) / abs(measured)
    return 0.0 if simulated == measured else None


def report(
    validation: Validation,
    served: Rounds,
    calibration: dict[str, Any] | None = None,
    unresolved: AbstractSet[tuple[str, str]] = frozenset(),
) -> dict[str, Any]:
    """Per policy, its median metrics over the rounds, both ranks and each compared figure's error; then
    the rankings' agreement over the pairs the engine settled (the unsettled ones: pairs whose order changes
    between rounds) and the simulator resolved (`unresolved`: pairs whose order changes within the speeds
    the machine was measured at), the share of each and of the pairs compared, the ranking figure's error
    range, the `largest` figures, how the engine's jobs measured the machine (`calibration`, where the
    validation prices the simulator by it) and every check with its verdict."""
    rows = medians(served)
    names = list(rows)
    ranked = validation.ranked
    best_first = validation.direction == "maximize"

    def ranks(metric: str) -> dict[str, int]:
        ordered = sorted(names, key=lambda n: rows[n][metric], reverse=best_first)
        return {n: i + 1 for i, n in enumerate(ordered)}

    sim, engine = ranks(ranked.simulated), ranks(ranked.measured)
    policies = {
        n: {
            **rows[n],
            "sim_rank": sim[n],
            "engine_rank": engine[n],
            f"{ranked.simulated}_rounds": [r[ranked.simulated] for r in served[n]],
            f"{ranked.measured}_rounds": [r[ranked.measured] for r in served[n]],
            **{
                f"error_{c.simulated}": relative_error(rows[n][c.simulated], rows[n][c.measured])
                for c in validation.compared
            },
        }
        for n in names
    }
    errors = [e for n in names if (e := policies[n][f"error_{ranked.simulated}"]) is not None]
    flips = unsettled(served, ranked.measured)
    left_out = flips | set(unresolved)
    pairs = len(_pairs(names))
    figures: dict[str, Any] = {
        "kendall_tau": kendall_tau(
            [rows[n][ranked.simulated] for n in names],
            [rows[n][ranked.measured] for n in names],
            {(i, j) for i, a in enumerate(names) for j, b in enumerate(names) if (a, b) in left_out},
        ),
        "engine_settled": (pairs - len(flips)) / pairs if pairs else 1.0,
        "pairs_compared": (pairs - len(left_out)) / pairs if pairs else 1.0,
        "error_min": min(errors, default=None),
        "error_max": max(errors, default=None),
        **{name: max(rows[n][metric] for n in names) for name, metric in validation.largest.items()},
    }
    checks = [
        {
            "figure": c.figure,
            "bound": c.bound(),
            "value": figures[c.figure],
            "passed": figures[c.figure] is not None and c.passed(figures[c.figure]),
        }
        for c in validation.checks
    ]
    return {
        "ranked_by": ranked.simulated,
        "direction": validation.direction,
        "rounds": len(next(iter(served.values()), [])),
        "unsettled": sorted(flips),
        "unresolved": sorted(unresolved),
        "calibration": calibration or {},
        "policies": policies,
        **figures,
        "checks": checks,
    }


def table(validation: Validation, title: str, result: dict[str, Any]) -> Table:
    """Both ranks, each compared figure simulated and measured (the ranking figure's error beside it),
    and the target's other shown metrics; policies in the engine's order."""
    out = Table(title=f"simulator against engine: {title}")
    ranked = validation.ranked
    columns = ["policy", "sim rank", "engine rank"]
    for c in validation.compared:
        columns += [f"sim {c.label}", f"engine {c.label}", *(["error"] if c is ranked else [])]
    columns += [s.label for s in validation.shown]
    for col in columns:
        out.add_column(col, justify="left" if col == "policy" else "right")
    for name, row in sorted(result["policies"].items(), key=lambda item: item[1]["engine_rank"]):
        cells = [name, str(row["sim_rank"]), str(row["engine_rank"])]
        for c in validation.compared:
            cells += [format(row[c.simulated], c.fmt), format(row[c.measured], c.fmt)]
            if c is ranked:
                error = row[f"error_{c.simulated}"]
                cells.append("n/a" if error is None else f"{error:.1%}")
        cells += [format(row[s.metric], s.fmt) for s in validation.shown]
        out.add_row(*cells)
    return out


def summary(validation: Validation, result: dict[str, Any]) -> list[str]:
    """The report's figures in words: agreement, error range, largest figures, each check's verdict."""
    low, high = result["error_min"], result["error_max"]
    errors = "n/a" if low is None else f"{low:.1%} to {high:.1%}"
    lines = [
        f"Kendall tau of the rankings by {validation.rank_by}: {result['kendall_tau']:.3f}; "
        f"per-policy error of {validation.rank_by} {errors}"
    ]
    if result["rounds"] > 1:
        left_out = ", ".join(f"{a} ~ {b}" for a, b in result["unsettled"]) or "none"
        lines.append(
            f"medians of {result['rounds']} rounds; the engine settled {result['engine_settled']:.0%} of "
            f"the pairs; left out (its order by {validation.rank_by} changes between rounds): {left_out}"
        )
    if result["unresolved"]:
        left_out = ", ".join(f"{a} ~ {b}" for a, b in result["unresolved"])
        lines.append(
            f"left out too (the simulator's order by {validation.rank_by} changes within the speeds the "
            f"engine's jobs measured): {left_out}; {result['pairs_compared']:.0%} of the pairs compared"
        )
    for figure, value in result["calibration"].items():
        shown = ", ".join(f"{v:.3g}" for v in value) if isinstance(value, list) else f"{value:.3g}"
        lines.append(f"the simulator priced as the engine's jobs measured the machine: {figure} {shown}")
    lines += [f"largest {name}: {result[name]:.3g}" for name in validation.largest]
    for check in result["checks"]:
        value = "n/a" if check["value"] is None else f"{check['value']:.3g}"
        verdict = "ok" if check["passed"] else "FAILS"
        lines.append(f"check {check['figure']} {check['bound']}: {value} {verdict}")
    return lines
