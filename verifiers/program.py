"""Plain records for candidate programs: the signatures a target asks for and a checked candidate."""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Signature:
    """One decision function a target asks for: `name(state_arg, params_arg)` over named features."""

    name: str
    features: tuple[str, ...]
    state_arg: str = "b"
    params_arg: str = "p"
    doc: str = ""


@dataclass(frozen=True)
class ParamRange:
    """A tunable constant: its range, whether it is searched on a log scale, and its default."""

    name: str
    low: float
    high: float
    log: bool = False
    default: float | None = None

    @property
    def initial(self) -> float:
        """The default if given, else the middle of the range (geometric for log ranges)."""
        if self.default is not None:
            return self.default
        if self.log:
            return math.sqrt(self.low * self.high)
        return (self.low + self.high) / 2.0


@dataclass(frozen=True)
class Program:
    """A candidate that passed the static check: its source, parsed once, and what it declares."""

    source: str
    docstring: str
    params: tuple[ParamRange, ...]
    functions: dict[str, ast.FunctionDef]

    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def defaults(self) -> dict[str, float]:
        return {p.name: p.initial for p in self.params}


def is_docstring(stmt: ast.stmt) -> bool:
    """Whether a statement is a bare string, which is allowed only as a module or function docstring."""
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def node_count(fn: ast.FunctionDef) -> int:
    """Statements and expressions in a function body, docstring excluded: the size a program is capped by."""
    body = fn.body[1:] if fn.body and is_docstring(fn.body[0]) else fn.body
    return sum(isinstance(n, ast.expr | ast.stmt) for stmt in body for n in ast.walk(stmt))
