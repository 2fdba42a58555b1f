"""What every `crucible validate` shares: a sandbox job per candidate, rank agreement, the torch check."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from rich.console import Console

from sandbox.choice import choose_sandbox
from sandbox.job import Job, Limits
from targets.base import Instance

from .errors import UserError

ENGINE_LIMITS = Limits(wall_s=7200.0, memory_mb=16384, cpu_s=14400)
"""A replay in the engine runs real kernels for minutes and maps torch: far above a simulator job."""


def require_torch(command: str) -> None:
    """A clear one-line error where the torch extra is not installed."""
    if importlib.util.find_spec("torch") is None:
        raise UserError(f"{command} needs PyTorch: pip install 'crucible[torch]'")


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


def candidate_jobs(target: Any, names: list[str], instance: Instance) -> dict[str, Job]:
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
                raise UserError(
                    f"{name}: neither a readable heuristic file nor a baseline ({known})"
                ) from None
            jobs[path.stem] = Job(target.name, source, (instance,), limits=ENGINE_LIMITS)
    return jobs


def run_candidates(
    target: Any, names: list[str], instance: Instance, sandbox: str
) -> dict[str, dict[str, float]]:
    """Each candidate's metrics on the instance (simulator and engine), one job at a time in the sandbox:
    the engine's timings need the cores to themselves. A job that does not end ok is a one-line error."""
    jobs = candidate_jobs(target, names, instance)
    box, reason = choose_sandbox(sandbox)
    err = Console(stderr=True)
    err.print(f"sandbox: {box.name} ({reason})", markup=False, highlight=False)
    rows: dict[str, dict[str, float]] = {}
    with err.status("running") as status:
        for name, job in jobs.items():
            status.update(f"{name}: simulator and engine on {instance.label}")
            result = box.run(job)
            if result.status != "ok":
                raise UserError(f"{name}: {result.status}: {result.message}")
            rows[name] = result.instances[0].metrics
    return rows
