"""The Target protocol and its feature registry: what every target declares so the loop stays generic."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Protocol

from verifiers.program import Program, Signature
from verifiers.properties import Domain, Property


@dataclass(frozen=True)
class Feature:
    """One named input of a decision function; rendered into prompts and used by the verifiers."""

    name: str
    unit: str
    low: float
    high: float
    doc: str
    integer: bool = False
    """Takes whole values only (a head count, a GPU count), which the verifier then assumes."""


@dataclass(frozen=True)
class FeatureRegistry:
    """The ordered features of one decision-function argument; the order fixes the column layout."""

    features: tuple[Feature, ...]
    relations: tuple[str, ...] = ()
    """Linear relations the mechanism guarantees between features, e.g. "age == now - last_access"."""

    def __post_init__(self) -> None:
        names = [f.name for f in self.features]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate feature names in registry: {names}")
        self.domain()  # a relation over unknown names fails here, when the target is built

    def domain(self) -> Domain:
        """The features' bounds and relations, as the verifier reads them."""
        integers = frozenset(f.name for f in self.features if f.integer)
        return Domain({f.name: (f.low, f.high) for f in self.features}, self.relations, integers)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.features)

    def columns(self) -> dict[str, int]:
        return {f.name: i for i, f in enumerate(self.features)}

    def __getitem__(self, name: str) -> Feature:
        for f in self.features:
            if f.name == name:
                return f
        raise KeyError(name)

    def __len__(self) -> int:
        return len(self.features)


@dataclass(frozen=True)
class Objective:
    """The primary metric of a target and whether larger is better."""

    metric: str
    direction: Literal["maximize", "minimize"]

    def better(self, a: float, b: float) -> bool:
        return a > b if self.direction == "maximize" else a < b


@dataclass(frozen=True)
class Instance:
    """One workload under one configuration; plain data so it crosses the sandbox boundary as JSON."""

    workload: str
    config: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""
    role: Literal["train", "eval"] = "eval"

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "config": dict(self.config),
            "label": self.label,
            "role": self.role,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Instance:
        return cls(
            workload=data["workload"],
            config=dict(data.get("config", {})),
            label=data.get("label", ""),
            role=data.get("role", "eval"),
        )


class WorkloadError(ValueError):
    """A workload a user supplied cannot be used; the message is one line that says why."""


class Target(Protocol):
    """A mechanism that asks a candidate only for a narrow policy over declared features."""

    name: str
    description: str
    signatures: tuple[Signature, ...]
    objective: Objective
    report_metrics: tuple[str, ...]
    """The metrics a report shows, the objective first."""

    def default_config(self) -> dict[str, Any]:
        """A shipped workload (key "workload") and configuration, so every command runs with no flags."""
        ...

    def registry(self, signature: str) -> FeatureRegistry:
        """The features readable on the state argument of the named decision function."""
        ...

    def instances(self, workload: str, config: Mapping[str, Any]) -> list[Instance]:
        """Instances to tune on (role "train") and to score on (role "eval"); WorkloadError on bad input."""
        ...

    def baselines(self) -> dict[str, str]:
        """Baselines written in the candidate format: name -> source."""
        ...

    def properties(self) -> tuple[Property, ...]:
        """What Z3 proves of every candidate (failing a hard one rejects it): targets/<name>/properties.py."""
        ...

    def builtin_baselines(self) -> tuple[str, ...]:
        """Baselines that are mechanism variants rather than candidates (e.g. an offline optimum)."""
        ...

    def evaluate(self, program: Program, instance: Instance, params: Mapping[str, float]) -> dict[str, float]:
        """Run the mechanism with the candidate's policy; metrics include the objective."""
        ...

    def evaluate_builtin(self, name: str, instance: Instance) -> dict[str, float]:
        """Run a built-in baseline on an instance."""
        ...


def packaged_baselines(package: str) -> dict[str, str]:
    """The baselines a target ships in candidate form: `<package>/baselines/<name>.py`, by name."""
    folder = resources.files(package) / "baselines"
    return {
        Path(entry.name).stem: entry.read_text()
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".py")
    }
