"""Plain records for verification: input domains, the properties a target declares, and their verdicts.

Targets build these as data (no Z3 here, so a target imports them cheaply); `verifiers.smt` proves them.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Fault = Literal["division", "log", "sqrt", "overflow"]
Severity = Literal["hard", "soft"]
Verdict = Literal["proved", "counterexample", "unknown"]

_RELATION_OPS = (ast.Eq, ast.LtE, ast.GtE, ast.Lt, ast.Gt)
_FAULT_NAMES: dict[str, str] = {
    "division": "no-division-by-zero",
    "log": "no-log-of-non-positive",
    "sqrt": "no-sqrt-of-negative",
    "overflow": "no-overflow",
}


@dataclass(frozen=True)
class Domain:
    """The inputs of one decision function: a box of feature bounds, narrowed by declared relations.

    A relation is a comparison of linear expressions over feature names, e.g. "age == now - last_access";
    without relations the features are independent within their bounds, which is sound (a superset of the
    reachable states) but may yield counterexamples no mechanism produces.
    """

    bounds: Mapping[str, tuple[float, float]]
    relations: tuple[str, ...] = ()
    integers: frozenset[str] = frozenset()
    """Features that take whole values only; the rest range over the reals within their bounds."""

    def __post_init__(self) -> None:
        unknown = sorted(self.integers - set(self.bounds))
        if unknown:
            raise ValueError(f"integer features without bounds: {', '.join(unknown)}")
        for name, (low, high) in self.bounds.items():
            if not (math.isfinite(low) and math.isfinite(high) and low <= high):
                raise ValueError(f"feature '{name}': bounds [{low}, {high}] must be finite with low <= high")
        for relation in self.relations:
            unknown = sorted(relation_names(relation) - set(self.bounds))
            if unknown:
                raise ValueError(f"relation {relation!r} names unknown features: {', '.join(unknown)}")


def relation_names(relation: str) -> set[str]:
    """The feature names a relation reads; ValueError unless it is one comparison of plain arithmetic."""
    try:
        tree = ast.parse(relation, mode="eval").body
    except SyntaxError:
        raise ValueError(f"relation {relation!r} is not an expression") from None
    if not (isinstance(tree, ast.Compare) and all(isinstance(op, _RELATION_OPS) for op in tree.ops)):
        raise ValueError(f"relation {relation!r} must be a comparison such as 'a == b - c'")
    allowed = (ast.Compare, ast.BinOp, ast.UnaryOp, ast.Name, ast.Constant, ast.Load, ast.cmpop, ast.operator)
    allowed += (ast.unaryop,)
    for node in ast.walk(tree):
        if not isinstance(node, allowed) or (
            isinstance(node, ast.Constant) and type(node.value) not in (int, float)
        ):
            raise ValueError(f"relation {relation!r} may use only names, numbers and arithmetic")
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


@dataclass(frozen=True)
class NoFault:
    """No operation of one kind can fault for any input: a zero divisor, log of x <= 0, sqrt of x < 0,
    or exp / ** overflowing a float."""

    fault: Fault


@dataclass(frozen=True)
class Bounded:
    """The output is defined, finite and within [low, high] for every input."""

    low: float
    high: float


@dataclass(frozen=True)
class Monotone:
    """Raising one feature, all else equal, never lowers (increasing) or raises (decreasing) the output."""

    feature: str
    increasing: bool = True


@dataclass(frozen=True)
class GrowsWith:
    """Raising one feature by d, all else equal, raises the output by at least min_rate * d."""

    feature: str
    min_rate: float


@dataclass(frozen=True)
class Outranks:
    """Any input whose `feature` is at least `at_least` (and where the `given` relations hold) scores above
    any input whose `feature` is below `below`, whatever the other features of either: two inputs apart,
    except the `shared` features, which both read alike (what one decision scores every input against)."""

    feature: str
    at_least: float
    below: float
    shared: tuple[str, ...] = ()
    given: tuple[str, ...] = ()


@dataclass(frozen=True)
class Holds:
    """A predicate holds for every input where the functions are defined.

    The predicate is restricted Python over `out` (the function's output), the outputs of the program's
    other decision functions by name, and the features as `<state_arg>.<feature>`, e.g. "out >= 1".
    """

    predicate: str


Check = NoFault | Bounded | Monotone | GrowsWith | Outranks | Holds


@dataclass(frozen=True)
class Property:
    """One property of a decision function, with the sentence a user reads and what failing it costs."""

    name: str
    statement: str
    function: str
    check: Check
    severity: Severity = "hard"
    """hard: a counterexample rejects the candidate; soft: it is reported only."""

    @property
    def kind(self) -> str:
        """The check in the engine's words, e.g. "monotone(hits, increasing)"."""
        match self.check:
            case NoFault(fault=fault):
                return _FAULT_NAMES[fault]
            case Bounded(low=low, high=high):
                return f"finite-bounded({low:g}, {high:g})"
            case Monotone(feature=feature, increasing=increasing):
                return f"monotone({feature}, {'increasing' if increasing else 'decreasing'})"
            case GrowsWith(feature=feature, min_rate=rate):
                return f"grows-with({feature}, {rate:g})"
            case Outranks(feature=feature, at_least=at_least, below=below):
                return f"outranks({feature} >= {at_least:g} over {feature} < {below:g})"
            case Holds(predicate=predicate):
                return f"holds({predicate})"


def common(
    function: str, low: float, high: float, subject: str = "The output", inputs: str = "input in the domain"
) -> tuple[Property, ...]:
    """The properties every decision function must have: no faulting operation, a finite bounded output."""
    return (
        Property(
            _FAULT_NAMES["division"],
            f"No division, // or % has a zero divisor for any {inputs}.",
            function,
            NoFault("division"),
        ),
        Property(
            _FAULT_NAMES["log"],
            f"log never sees a number <= 0, log1p never one <= -1, for any {inputs}.",
            function,
            NoFault("log"),
        ),
        Property(
            _FAULT_NAMES["sqrt"],
            f"sqrt and fractional powers never see a negative number for any {inputs}.",
            function,
            NoFault("sqrt"),
        ),
        Property(
            _FAULT_NAMES["overflow"],
            f"exp and ** never overflow a float (exp's argument stays <= 709.78) for any {inputs}.",
            function,
            NoFault("overflow"),
        ),
        Property(
            "finite-bounded",
            f"{subject} is defined, finite and within [{low:g}, {high:g}] for every {inputs}.",
            function,
            Bounded(low, high),
        ),
    )


@dataclass(frozen=True)
class Outcome:
    """The verdict on one property: proved, a counterexample (with concrete inputs), or unknown."""

    property: str
    severity: Severity
    verdict: Verdict
    seconds: float
    message: str = ""
    """One line: what was shown, or why nothing was (time limit, non-linearity, an unconfirmed model)."""
    counterexample: dict[str, Any] | None = field(default=None)
    """Inputs (and outputs) in floats that really show the violation when the candidate runs on them."""

    @property
    def rejects(self) -> bool:
        return self.severity == "hard" and self.verdict == "counterexample"
