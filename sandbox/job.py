"""The job a sandbox runs and the result it returns: plain data that crosses the boundary as JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from targets.base import Instance

Status = Literal["ok", "invalid", "timeout", "oom", "denied", "crashed"]
"""ok: evaluated; invalid: the candidate failed inside the job (check, compile, runtime error);
timeout / oom: a limit killed it; denied: it tried something the sandbox forbids; crashed: anything else."""


@dataclass(frozen=True)
class Limits:
    """Resource limits for one job; the wall-clock limit covers all its trials and instances."""

    wall_s: float = 300.0
    memory_mb: int = 2048
    cpu_s: int = 600
    processes: int = 64
    file_size_mb: int = 64
    output_kb: int = 1024


@dataclass(frozen=True)
class Tuning:
    """How to tune the candidate's PARAMS on the train instances before scoring the eval instances."""

    trials: int = 16
    seed: int = 0
    gate: float | None = None
    """Skip the eval instances when the best train objective is worse than this (the cascade)."""
    seen: tuple[str, ...] = ()
    """Behaviour signatures of programs already evaluated: a candidate that behaves as one is not tuned."""


@dataclass(frozen=True)
class Job:
    """One candidate: its source, the target, where to run it, and whether to tune."""

    target: str
    source: str
    instances: tuple[Instance, ...]
    params: dict[str, float] | None = None
    """Fixed parameter values; None means the program's defaults (the start point of tuning)."""
    tuning: Tuning | None = None
    limits: Limits = field(default_factory=Limits)
    builtin: str = ""
    """Run the target's built-in baseline of this name instead of `source` (a mechanism variant)."""
    skip_check: bool = False
    """Bypass the static check (only the hostile-candidate tests of the sandbox itself use this)."""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["instances"] = [i.to_json() for i in self.instances]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Job:
        return cls(
            target=data["target"],
            source=data["source"],
            instances=tuple(Instance.from_json(i) for i in data["instances"]),
            params=data.get("params"),
            tuning=_tuning(data["tuning"]) if data.get("tuning") else None,
            limits=Limits(**data.get("limits", {})),
            builtin=data.get("builtin", ""),
            skip_check=bool(data.get("skip_check", False)),
        )


def _tuning(data: dict[str, Any]) -> Tuning:
    return Tuning(**{**data, "seen": tuple(data.get("seen", ()))})


@dataclass(frozen=True)
class InstanceResult:
    label: str
    role: str
    metrics: dict[str, float]
    seconds: float


@dataclass(frozen=True)
class TrialRecord:
    """One Optuna trial as the UI shows it: value is None unless the trial completed with a finite one."""

    number: int
    params: dict[str, float]
    value: float | None
    state: str
    """COMPLETE | PRUNED (a non-finite objective) | FAIL, Optuna's names"""


@dataclass(frozen=True)
class Result:
    """What a job produced; `params` are the tuned (or given) values used for the eval instances."""

    status: Status
    message: str = ""
    params: dict[str, float] = field(default_factory=dict)
    instances: tuple[InstanceResult, ...] = ()
    trials: int = 0
    study: tuple[TrialRecord, ...] = ()
    """Every tuning trial in order, so the study's history and parameter importance outlive the job."""
    gated: bool = False
    behaviour: str = ""
    """The program's behaviour signature on the target's sample (empty where the target offers none)."""
    repeated: bool = False
    """Its behaviour signature was one of the job's `seen`: the job stopped before tuning (no instances)."""
    seconds: float = 0.0
    backend: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Result:
        fields = dict(data)
        fields["instances"] = tuple(InstanceResult(**i) for i in data.get("instances", ()))
        fields["study"] = tuple(TrialRecord(**t) for t in data.get("study", ()))
        return cls(**fields)
