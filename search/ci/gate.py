"""The regression gate: a champion's score against a reference (its previous stored score, a baseline),
judged by the alert and fail thresholds as a relative worsening of the objective."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from search.ci.config import Thresholds

Level = Literal["ok", "alert", "fail"]
LEVELS: tuple[Level, ...] = ("ok", "alert", "fail")


@dataclass(frozen=True)
class Check:
    """One comparison: `change` is the relative change of the objective, positive when better."""

    against: str
    """"previous" (the champion's last stored score) or "baseline <name>"."""
    reference: float
    score: float
    change: float
    level: Level

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return f"{self.change:+.2%} against {self.against} ({self.reference:.4f} -> {self.score:.4f})"


def relative_change(score: float, reference: float, maximize: bool) -> float:
    """(score - reference) / |reference|, signed so that positive is better; the plain difference at 0."""
    delta = score - reference if maximize else reference - score
    return delta / abs(reference) if reference else delta


def judge(against: str, score: float, reference: float, maximize: bool, thresholds: Thresholds) -> Check:
    change = relative_change(score, reference, maximize)
    level: Level = "ok"
    if -change > thresholds.fail:
        level = "fail"
    elif -change > thresholds.alert:
        level = "alert"
    return Check(against, reference, score, change, level)


def worst(levels: list[Level]) -> Level:
    return max(levels, key=LEVELS.index, default="ok")
