"""Z3 proofs of a candidate's properties over its whole input domain, in a child process with a hard limit.

One checked AST, walked by the compiler's `ExprVisitor` after `unroll`, is read in three algebras:
intervals over the domain's box, which settle most fault and bound properties at once; Z3 reals, to search
the whole domain for the rest; and Python floats, to replay a model Z3 finds on the function as it runs.
The statements become one term: both arms of an `if` are translated and merged with If(), and every
operation that can fault (a division, log, sqrt, exp, `**`) carries the condition under which it faults,
guarded by the path that reaches it (the branch, the short-circuit of `and`/`or`, the arm of a conditional).

Reals and IEEE doubles. Features and PARAMS are Z3 reals within their bounds, so a proof covers every
double in the domain; literals are the exact rational value of their double. +, -, *, /, //, %, min, max,
abs, clamp, floor, ceil and comparisons are exact in real arithmetic; each double operation rounds instead
(relative error 2**-53), and products can overflow to inf or underflow to 0.0 where reals do not. A
verdict is therefore about the real-valued function, and what it leaves unproved is rounding: a divisor
that is non-zero in reals but rounds to 0.0 (e.g. 1 / (1e-200 * 1e-200)), an intermediate product that
overflows while the output is bounded, a comparison decided the other way by one ulp. exp is the one
place where underflow is modelled (exp(x) is 0.0 from x = -745.133 down, as in doubles), because
"exp(-x) > 0" is the proof such a divisor would otherwise get wrongly. Interval bounds (verifiers/intervals)
move one ulp outward wherever a double operation rounded, so they hold for the reals.

log, exp, sqrt and non-small powers are not in real arithmetic. They are uninterpreted functions with
facts that hold for the real functions and their doubles alike (monotone, signs, log(1) = 0, exp(0) = 1,
log(x) <= x - 1, bounds at 1 and at the edges of the doubles), instantiated for the applications the
formula contains; integer powers up to 8 are products (non-linear, so Z3 may answer
unknown). The side conditions of the fault properties (x > 0 for log, x >= 0 for sqrt, x != 0 for a
divisor, x <= 709.78 for exp) are exact and usually linear. A model Z3 finds may still rest on the
abstraction, so every model is replayed in floats: only a violation the float run really shows is a
counterexample. A model the floats refute adds the doubles' values at its arguments as facts and Z3 is
asked again (a few rounds); what is still unconfirmed is `unknown`, as are time-outs and Z3's own
give-ups. Unknown is never shown as proved.

Domains. Features range independently over their bounds (whole numbers where declared so), narrowed
only by the relations a registry declares (kv: age == now - last_access, inserted_at <= last_access,
...). A proof over this superset of the reachable states is sound; a counterexample may be a state no
mechanism reaches where a relation between its features goes undeclared.

Two-copy properties (monotone, grows-with) compare the function at two inputs that differ in one feature
and in the features a declared relation ties to it (e.g. `now` and `last_access` for `age`); all else is
equal. They and `holds` are judged where the function is defined, since faults have properties of their
own, and a proof whose premises are unsatisfiable is reported as unknown (vacuous), not as proved.
"""

from __future__ import annotations

import ast
import math
import multiprocessing
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from multiprocessing.connection import Connection
from typing import Any, Generic, Protocol, TypeVar

import z3

from verifiers.compiler import ExprVisitor, unroll
from verifiers.intervals import DOMAINS, Intervals
from verifiers.program import Program
from verifiers.properties import (
    Bounded,
    Domain,
    Fault,
    GrowsWith,
    Holds,
    Monotone,
    NoFault,
    Outcome,
    Outranks,
    Property,
    Verdict,
    relation_names,
)

DBL_MAX = sys.float_info.max
EXP_MAX = 709.782712893384
"""The largest double x for which math.exp(x) is finite; above it math.exp raises OverflowError."""
EXP_ZERO = -745.1332191019412
"""The largest double x for which math.exp(x) rounds to 0.0 (exp of the next double up is 5e-324)."""
LOG_RANGE = (-744.5, 709.8)
"""log of a positive double lies within these (log(5e-324) = -744.44, log(DBL_MAX) = 709.78)."""
EXPANDED_POWERS = 8
"""Integer exponents up to this magnitude are products in Z3; others are uninterpreted functions."""
SECONDS_PER_PROPERTY = 2.0
REFINEMENTS = 4
"""Times a model the floats refute is answered with the doubles' values before the verdict is unknown."""

V = TypeVar("V")
B = TypeVar("B")

_VERBS: dict[Fault, str] = {
    "division": "divides by zero",
    "log": "takes the log of a number out of its domain",
    "sqrt": "takes a root of a negative number",
    "overflow": "overflows a float",
}


# The algebras one translation runs over: Z3 reals (to search), Python floats (to replay), and intervals
# (verifiers.intervals, to settle a property over the domain's box without Z3).


class _Algebra(Protocol[V, B]):
    """What each operation of the subset becomes; faults are not its concern (see _Expr). Three implement
    it: _Floats and _Reals here, and verifiers.intervals.Intervals."""

    def const(self, x: float) -> V: ...

    def arith(self, op: str, a: V, b: V) -> V: ...

    def neg(self, a: V) -> V: ...

    def cmp(self, op: str, a: V, b: V) -> B: ...

    def ite(self, c: B, a: V, b: V) -> V: ...

    def all(self, cs: Sequence[B]) -> B: ...

    def any(self, cs: Sequence[B]) -> B: ...

    def negate(self, c: B) -> B: ...

    def apply(self, name: str, a: V) -> V:
        """log, log1p, exp, sqrt, floor or ceil of one value."""
        ...

    def power(self, a: V, exponent: float) -> V: ...


class _Floats(_Algebra[float, bool]):
    """Python float semantics, as `to_python` runs them, except that a fault yields nan or inf, not raise."""

    def const(self, x: float) -> float:
        return x

    def arith(self, op: str, a: float, b: float) -> float:
        match op:
            case "+":
                return a + b
            case "-":
                return a - b
            case "*":
                return a * b
        if b == 0.0:
            return math.nan
        return a / b if op == "/" else a // b if op == "//" else a % b

    def neg(self, a: float) -> float:
        return -a

    def cmp(self, op: str, a: float, b: float) -> bool:
        return _COMPARE[op](a, b)

    def ite(self, c: bool, a: float, b: float) -> float:
        return a if c else b

    def all(self, cs: Sequence[bool]) -> bool:
        return all(cs)

    def any(self, cs: Sequence[bool]) -> bool:
        return any(cs)

    def negate(self, c: bool) -> bool:
        return not c

    def apply(self, name: str, a: float) -> float:
        try:
            match name:
                case "log":
                    return math.log(a) if a > 0 else math.nan
                case "log1p":
                    return math.log1p(a) if a > -1 else math.nan
                case "exp":
                    return math.exp(a)
                case "sqrt":
                    return math.sqrt(a) if a >= 0 else math.nan
                case "floor":
                    return float(math.floor(a)) if math.isfinite(a) else a
                case "ceil":
                    return float(math.ceil(a)) if math.isfinite(a) else a
        except OverflowError:
            return math.inf
        raise ValueError(f"unknown function {name}")

    def power(self, a: float, exponent: float) -> float:
        try:
            return math.pow(a, exponent)
        except ValueError:
            return math.nan
        except OverflowError:
            return math.inf


_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


@dataclass
class _Reals(_Algebra[z3.ArithRef, z3.BoolRef]):
    """Z3 real terms; log, exp, sqrt and powers are uninterpreted, their applications kept for `facts`."""

    functions: dict[str, z3.FuncDeclRef] = field(default_factory=dict)
    applications: dict[tuple[str, int], tuple[z3.ArithRef, z3.ArithRef]] = field(default_factory=dict)

    def const(self, x: float) -> z3.ArithRef:
        return z3.RealVal(str(Fraction(x)))

    def arith(self, op: str, a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
        match op:
            case "+":
                return a + b
            case "-":
                return a - b
            case "*":
                return a * b
            case "/":
                return a / b
            case "//":
                return z3.ToReal(z3.ToInt(a / b))
        return a - b * z3.ToReal(z3.ToInt(a / b))  # Python's %: the sign of the divisor

    def neg(self, a: z3.ArithRef) -> z3.ArithRef:
        return -a

    def cmp(self, op: str, a: z3.ArithRef, b: z3.ArithRef) -> z3.BoolRef:
        return _COMPARE[op](a, b)

    def ite(self, c: z3.BoolRef, a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
        return z3.If(c, a, b)

    def all(self, cs: Sequence[z3.BoolRef]) -> z3.BoolRef:
        return z3.And(*cs) if cs else z3.BoolVal(True)

    def any(self, cs: Sequence[z3.BoolRef]) -> z3.BoolRef:
        return z3.Or(*cs) if cs else z3.BoolVal(False)

    def negate(self, c: z3.BoolRef) -> z3.BoolRef:
        return z3.Not(c)

    def apply(self, name: str, a: z3.ArithRef) -> z3.ArithRef:
        match name:
            case "floor":
                return z3.ToReal(z3.ToInt(a))
            case "ceil":
                return -z3.ToReal(z3.ToInt(-a))
            case "log1p":
                return self._uninterpreted("log", 1 + a)
        return self._uninterpreted(name, a)

    def power(self, a: z3.ArithRef, exponent: float) -> z3.ArithRef:
        if exponent.is_integer() and abs(exponent) <= EXPANDED_POWERS:
            product: z3.ArithRef = z3.RealVal(1)
            for i in range(int(abs(exponent))):
                product = a if i == 0 else product * a
            return product if exponent >= 0 else 1 / product
        return self._uninterpreted(f"pow_{exponent!r}", a)

    def _uninterpreted(self, name: str, a: z3.ArithRef) -> z3.ArithRef:
        if name not in self.functions:
            self.functions[name] = z3.Function(name, z3.RealSort(), z3.RealSort())
        y = self.functions[name](a)
        self.applications[(name, y.get_id())] = (a, y)
        return y

    def anchors(self, model: z3.ModelRef) -> list[z3.BoolRef]:
        """Facts pinning each application to the double function's value at the model's argument."""
        anchors: list[z3.BoolRef] = []
        for (name, _), (a, y) in self.applications.items():
            anchors += _anchors(name, a, y, _float(model.eval(a, model_completion=True)))
        return anchors

    def facts(self) -> list[z3.BoolRef]:
        """What is known of each uninterpreted application: per application, and monotone in pairs."""
        facts: list[z3.BoolRef] = []
        by_name: dict[str, list[tuple[z3.ArithRef, z3.ArithRef]]] = {}
        for (name, _), (a, y) in self.applications.items():
            by_name.setdefault(name, []).append((a, y))
            facts.extend(_facts(name, a, y))
        for name, apps in by_name.items():
            for i, (a1, y1) in enumerate(apps):
                for a2, y2 in apps[i + 1 :]:
                    facts.extend(_monotone(name, a1, y1, a2, y2))
        return facts


def _anchors(name: str, a: z3.ArithRef, y: z3.ArithRef, v: float) -> list[z3.BoolRef]:
    """What the double function's value at v says of an application whose argument is above or below v."""
    k = float(name.removeprefix("pow_")) if name.startswith("pow_") else 1.0
    in_domain = True if name == "exp" else v > 0 if name == "log" or k < 0 else v >= 0
    if not in_domain:
        return []
    floats = _Floats()
    fv = floats.power(v, k) if name.startswith("pow_") else floats.apply(name, v)
    if not math.isfinite(fv):
        return []
    at = z3.RealVal(str(Fraction(fv)))
    inside = z3.BoolVal(True) if name == "exp" else a > 0 if name == "log" or k < 0 else a >= 0
    above, below = (y >= at, y <= at) if k > 0 else (y <= at, y >= at)
    point = z3.RealVal(str(Fraction(v)))
    return [z3.Implies(a >= point, above), z3.Implies(z3.And(inside, a <= point), below)]


def _facts(name: str, a: z3.ArithRef, y: z3.ArithRef) -> list[z3.BoolRef]:
    """Facts true of the double implementation at one application (rounding makes them non-strict)."""
    if name == "log":
        low, high = LOG_RANGE
        holds = z3.And(y <= a - 1, y >= low, y <= high, (y > 0) == (a > 1), (y == 0) == (a == 1))
        return [z3.Implies(a > 0, holds)]
    if name == "exp":
        return [
            y >= 0,
            z3.Implies(a <= EXP_ZERO, y == 0),
            z3.Implies(a > EXP_ZERO, y > 0),
            z3.Implies(a <= 0, y <= 1),
            z3.Implies(a >= 0, y >= 1),
            z3.Implies(a <= EXP_MAX, y <= DBL_MAX),
        ]
    k = 0.5 if name == "sqrt" else float(name.removeprefix("pow_"))
    facts = [z3.Implies(a >= 0, y >= 0), z3.Implies(a == 1, y == 1)]
    if k.is_integer() and k % 2 == 0:
        facts.append(y >= 0)
    if k > 0:
        facts += [
            z3.Implies(a == 0, y == 0),
            z3.Implies(a >= 1, z3.And(y >= 1, y >= a if k >= 1 else y <= a)),
            z3.Implies(z3.And(a >= 0, a <= 1), z3.And(y <= 1, y <= a if k >= 1 else y >= a)),
        ]
    else:
        facts += [z3.Implies(a >= 1, y <= 1), z3.Implies(z3.And(a > 0, a <= 1), y >= 1)]
    return facts


def _monotone(
    name: str, a1: z3.ArithRef, y1: z3.ArithRef, a2: z3.ArithRef, y2: z3.ArithRef
) -> list[z3.BoolRef]:
    """Monotonicity between two applications of one function, where both arguments are in its domain."""
    k = float(name.removeprefix("pow_")) if name.startswith("pow_") else 1.0

    def inside(a: z3.ArithRef) -> z3.BoolRef:
        return z3.BoolVal(True) if name == "exp" else a > 0 if name == "log" or k < 0 else a >= 0

    if k < 0:
        return [
            z3.Implies(z3.And(inside(a1), a1 <= a2), y1 >= y2),
            z3.Implies(z3.And(inside(a2), a2 <= a1), y2 >= y1),
        ]
    return [
        z3.Implies(z3.And(inside(a1), a1 <= a2), y1 <= y2),
        z3.Implies(z3.And(inside(a2), a2 <= a1), y2 <= y1),
    ]


# The translation: one visitor over both algebras, with faults guarded by the path that reaches them.


@dataclass(frozen=True)
class _Fault(Generic[B]):
    kind: Fault
    unsafe: B
    """When the operation faults, already guarded by the path that reaches it."""
    text: str


@dataclass(frozen=True)
class _Val(Generic[V, B]):
    value: V
    faults: tuple[_Fault[B], ...] = ()
    test: B | None = None
    """The comparison itself when the value is one (1 or 0), so truth needs no `!= 0`."""


class _Expr(ExprVisitor[_Val[V, B]]):
    """Folds a checked expression into a value and the faults of the operations it evaluates."""

    def __init__(
        self,
        fn: ast.FunctionDef,
        alg: _Algebra[V, B],
        features: Mapping[str, V],
        params: Mapping[str, V],
        names: Mapping[str, V],
    ) -> None:
        super().__init__(fn)
        self.alg = alg
        self.features = features
        self.params = params
        self.names = names
        self.nodes: list[ast.expr] = []

    def visit(self, node: ast.expr) -> _Val[V, B]:
        self.nodes.append(node)
        try:
            return super().visit(node)
        finally:
            self.nodes.pop()

    def truth(self, v: _Val[V, B]) -> B:
        return v.test if v.test is not None else self.alg.cmp("!=", v.value, self.alg.const(0.0))

    def guarded(self, faults: tuple[_Fault[B], ...], guard: B) -> tuple[_Fault[B], ...]:
        return tuple(replace(f, unsafe=self.alg.all([guard, f.unsafe])) for f in faults)

    def fault(self, kind: Fault, unsafe: B) -> _Fault[B]:
        return _Fault(kind, unsafe, ast.unparse(self.nodes[-1]))

    def flag(self, v: _Val[V, B]) -> _Val[V, B]:
        return _Val(self.alg.ite(v.test, self.alg.const(1.0), self.alg.const(0.0)), v.faults, v.test)  # type: ignore[arg-type]

    def number(self, value: float) -> _Val[V, B]:
        return _Val(self.alg.const(value))

    def local(self, name: str) -> _Val[V, B]:
        return _Val(self.names[name])

    def feature(self, name: str) -> _Val[V, B]:
        return _Val(self.features[name])

    def param(self, name: str) -> _Val[V, B]:
        return _Val(self.params[name])

    def binary(self, op: str, left: _Val[V, B], right: _Val[V, B]) -> _Val[V, B]:
        faults = left.faults + right.faults
        if op in ("/", "//", "%"):
            faults += (self.fault("division", self.alg.cmp("==", right.value, self.alg.const(0.0))),)
        return _Val(self.alg.arith(op, left.value, right.value), faults)

    def power(self, base: _Val[V, B], exponent: float) -> _Val[V, B]:
        alg, a = self.alg, base.value
        zero = alg.const(0.0)
        faults = list(base.faults)
        if exponent < 0:
            faults.append(self.fault("division", alg.cmp("==", a, zero)))
        if not exponent.is_integer():
            faults.append(self.fault("sqrt", alg.cmp("<", a, zero)))
        if exponent > 1 or exponent <= -1:  # |a| beyond the limit (k > 0) or within it (k < 0) overflows
            limit, negative = (
                alg.const(DBL_MAX ** (1.0 / exponent)),
                alg.neg(alg.const(DBL_MAX ** (1.0 / exponent))),
            )
            if exponent > 0:
                overflows = alg.any([alg.cmp(">", a, limit), alg.cmp("<", a, negative)])
            else:
                overflows = alg.all(
                    [alg.cmp("!=", a, zero), alg.cmp("<", a, limit), alg.cmp(">", a, negative)]
                )
            faults.append(self.fault("overflow", overflows))
        return _Val(alg.power(a, exponent), tuple(faults))

    def unary(self, op: str, operand: _Val[V, B]) -> _Val[V, B]:
        if op == "-":
            return _Val(self.alg.neg(operand.value), operand.faults)
        if op == "+":
            return _Val(operand.value, operand.faults)
        return self.flag(_Val(operand.value, operand.faults, self.alg.negate(self.truth(operand))))

    def compare(self, left: _Val[V, B], pairs: list[tuple[str, _Val[V, B]]]) -> _Val[V, B]:
        faults, tests, previous = left.faults, [], left.value
        for op, right in pairs:  # a < b < c evaluates c only if a < b
            faults += self.guarded(right.faults, self.alg.all(tests))
            tests.append(self.alg.cmp(op, previous, right.value))
            previous = right.value
        return self.flag(_Val(left.value, faults, self.alg.all(tests)))

    def boolean(self, op: str, values: list[_Val[V, B]]) -> _Val[V, B]:
        faults: tuple[_Fault[B], ...] = ()
        reached: list[B] = []  # later operands are evaluated only while the earlier ones do not decide
        for v in values:
            faults += self.guarded(v.faults, self.alg.all(reached))
            truth = self.truth(v)
            reached.append(truth if op == "and" else self.alg.negate(truth))
        result = values[-1].value
        for v in reversed(values[:-1]):
            truth = self.truth(v)
            result = (
                self.alg.ite(truth, result, v.value) if op == "and" else self.alg.ite(truth, v.value, result)
            )
        return _Val(result, faults)

    def choice(self, test: _Val[V, B], body: _Val[V, B], orelse: _Val[V, B]) -> _Val[V, B]:
        truth = self.truth(test)
        faults = (
            test.faults
            + self.guarded(body.faults, truth)
            + self.guarded(orelse.faults, self.alg.negate(truth))
        )
        return _Val(self.alg.ite(truth, body.value, orelse.value), faults)

    def call(self, name: str, args: list[_Val[V, B]]) -> _Val[V, B]:
        alg = self.alg
        faults = tuple(f for a in args for f in a.faults)
        values = [a.value for a in args]
        zero = alg.const(0.0)
        match name:
            case "min" | "max":
                result = values[0]
                for v in values[1:]:  # Python's min and max keep the first of equals
                    result = alg.ite(alg.cmp("<" if name == "min" else ">", v, result), v, result)
                return _Val(result, faults)
            case "abs":
                return _Val(alg.ite(alg.cmp("<", values[0], zero), alg.neg(values[0]), values[0]), faults)
            case "clamp":
                x, lo, hi = values
                low = alg.ite(alg.cmp(">", lo, x), lo, x)
                return _Val(alg.ite(alg.cmp("<", hi, low), hi, low), faults)
            case "log" | "log1p" | "sqrt":
                edge, closed = DOMAINS[name]
                outside = alg.cmp("<" if closed else "<=", values[0], alg.const(edge))
                faults += (self.fault("sqrt" if name == "sqrt" else "log", outside),)
            case "exp":
                faults += (self.fault("overflow", alg.cmp(">", values[0], alg.const(EXP_MAX))),)
        return _Val(alg.apply(name, values[0]), faults)


@dataclass(frozen=True)
class _Run(Generic[V, B]):
    """A decision function as one value, and every fault it may meet, each guarded by its path."""

    value: V
    faults: tuple[_Fault[B], ...]

    def defined(self, alg: _Algebra[V, B]) -> B:
        return alg.negate(alg.any([f.unsafe for f in self.faults]))


def _execute(
    fn: ast.FunctionDef, alg: _Algebra[V, B], features: Mapping[str, V], params: Mapping[str, V]
) -> _Run[V, B]:
    """Translate the statements: both arms of each `if` merged, each return taken under the path to it."""
    returns: list[tuple[B, V]] = []
    faults: list[_Fault[B]] = []

    def expr(node: ast.expr, env: Mapping[str, V], live: B) -> _Val[V, B]:
        v = _Expr(fn, alg, features, params, env).visit(node)
        faults.extend(replace(f, unsafe=alg.all([live, f.unsafe])) for f in v.faults)
        return v

    def block(stmts: list[ast.stmt], env: dict[str, V], live: B) -> tuple[dict[str, V], B]:
        for stmt in stmts:
            match stmt:
                case ast.Assign(targets=[ast.Name(id=name)], value=value):
                    env = {**env, name: expr(value, env, live).value}
                case ast.AugAssign(target=ast.Name(id=name), op=op, value=value):
                    update = ast.copy_location(ast.BinOp(ast.Name(name, ast.Load()), op, value), stmt)
                    env = {**env, name: expr(update, env, live).value}
                case ast.If(test=test, body=body, orelse=orelse):
                    t = expr(test, env, live)
                    truth = t.test if t.test is not None else alg.cmp("!=", t.value, alg.const(0.0))
                    env_a, live_a = block(body, env, alg.all([live, truth]))
                    env_b, live_b = block(orelse, env, alg.all([live, alg.negate(truth)]))
                    env = {
                        n: env_a[n]
                        if n not in env_b
                        else env_b[n]
                        if n not in env_a
                        else alg.ite(live_a, env_a[n], env_b[n])
                        for n in env_a.keys() | env_b.keys()
                    }
                    live = alg.any([live_a, live_b])
                case ast.Return(value=ast.expr() as value):
                    returns.append((live, expr(value, env, live).value))
                    live = alg.any([])
        return env, live

    block(unroll(fn), {}, alg.all([]))
    value = returns[-1][1]  # the checker proved every path returns, so the last return takes the rest
    for live, v in reversed(returns[:-1]):
        value = alg.ite(live, v, value)
    return _Run(value, tuple(faults))


def _names_expr(
    text: str, fn: ast.FunctionDef, alg: _Algebra[V, B], features: Mapping[str, V], names: Mapping[str, V]
) -> B:
    """A declared relation or predicate as a condition (its own operations are trusted, not checked)."""
    v = _Expr(fn, alg, features, {}, names).visit(ast.parse(text, mode="eval").body)
    return v.test if v.test is not None else alg.cmp("!=", v.value, alg.const(0.0))


# Proving one property.


@dataclass(frozen=True)
class _Point:
    """Concrete inputs as floats: the features of one or two copies, and the params."""

    features: dict[str, float]
    params: dict[str, float]
    other: dict[str, float] | None = None


class _Prover:
    """The variables and premises of one candidate, and the query each kind of property becomes."""

    def __init__(self, program: Program, domains: Mapping[str, Domain], seconds: float) -> None:
        self.program = program
        self.domains = domains
        self.seconds = seconds
        self.params = {p.name: z3.Real(f"p.{p.name}") for p in program.params}
        self.floats = _Floats()

    def prove(self, prop: Property) -> Outcome:
        fn = self.program.functions[prop.function]
        domain = self.domains[prop.function]
        reals = _Reals()
        x = {name: z3.Real(name) for name in domain.bounds}
        premises = self._premises(fn, domain, reals, x)
        if isinstance(prop.check, NoFault | Bounded) and self._inside_the_box(fn, domain, prop.check):
            return _outcome(prop, "proved", "by interval bounds over the domain")
        match prop.check:
            case NoFault(fault=kind):
                run = _execute(fn, reals, x, self.params)
                unsafe = [f.unsafe for f in run.faults if f.kind == kind]
                if not unsafe:
                    return _outcome(prop, "proved", f"the function has no operation that can fault ({kind})")
                return self._search(
                    prop, reals, premises, z3.Or(*unsafe), x, None, lambda p: self._fault_shown(fn, kind, p)
                )
            case Bounded(low=low, high=high):
                run = _execute(fn, reals, x, self.params)
                goal = z3.Or(
                    run.value < reals.const(low), run.value > reals.const(high), z3.Not(run.defined(reals))
                )
                beyond = z3.Or(
                    run.value < reals.const(_outward(low, -1.0)),
                    run.value > reals.const(_outward(high, 1.0)),
                    z3.Not(run.defined(reals)),
                )
                return self._search(
                    prop, reals, premises, goal, x, None, lambda p: self._unbounded(fn, low, high, p), beyond
                )
            case Monotone(feature=feature) | GrowsWith(feature=feature):
                return self._two_copies(prop, fn, domain, reals, x, premises, feature)
            case Outranks() as check:
                return self._two_inputs(prop, fn, domain, reals, x, premises, check)
            case Holds(predicate=predicate):
                runs = {
                    name: _execute(f, reals, x, self.params) for name, f in self.program.functions.items()
                }
                names = {"out": runs[prop.function].value, **{n: r.value for n, r in runs.items()}}
                premises += [r.defined(reals) for r in runs.values()]
                goal = z3.Not(_names_expr(predicate, fn, reals, x, names))
                return self._search(
                    prop, reals, premises, goal, x, None, lambda p: self._predicate_fails(prop, p)
                )
        raise TypeError(f"unknown property check {prop.check!r}")

    def _inside_the_box(self, fn: ast.FunctionDef, domain: Domain, check: NoFault | Bounded) -> bool:
        """Whether interval bounds alone prove the property (relations ignored: a superset, still sound)."""
        params = {p.name: (p.low, p.high) for p in self.program.params}
        run = _execute(fn, Intervals(), domain.bounds, params)
        if isinstance(check, NoFault):
            return not any(f.unsafe[0] for f in run.faults if f.kind == check.fault)
        low, high = run.value
        return not any(f.unsafe[0] for f in run.faults) and check.low <= low and high <= check.high

    def _premises(
        self, fn: ast.FunctionDef, domain: Domain, reals: _Reals, x: Mapping[str, z3.ArithRef]
    ) -> list[z3.BoolRef]:
        """The domain: feature bounds, declared relations and PARAMS ranges."""
        premises = [
            z3.And(reals.const(lo) <= x[n], x[n] <= reals.const(hi)) for n, (lo, hi) in domain.bounds.items()
        ]
        premises += [z3.IsInt(x[n]) for n in sorted(domain.integers)]
        premises += [_names_expr(r, fn, reals, x, x) for r in domain.relations]
        premises += [
            z3.And(reals.const(p.low) <= self.params[p.name], self.params[p.name] <= reals.const(p.high))
            for p in self.program.params
        ]
        return premises

    def _two_copies(
        self,
        prop: Property,
        fn: ast.FunctionDef,
        domain: Domain,
        reals: _Reals,
        x: dict[str, z3.ArithRef],
        premises: list[z3.BoolRef],
        feature: str,
    ) -> Outcome:
        tied = {feature} | {n for r in domain.relations if _defines(r, feature) for n in relation_names(r)}
        y = {n: z3.Real(f"{n}'") if n in tied else v for n, v in x.items()}
        premises = premises + self._premises(fn, domain, reals, y)
        first, second = _execute(fn, reals, x, self.params), _execute(fn, reals, y, self.params)
        premises += [first.defined(reals), second.defined(reals), y[feature] > x[feature]]
        match prop.check:
            case Monotone(increasing=True):
                goal = second.value < first.value
            case Monotone(increasing=False):
                goal = second.value > first.value
            case GrowsWith(min_rate=rate):
                goal = second.value - first.value < reals.const(rate) * (y[feature] - x[feature])
        return self._search(
            prop, reals, premises, goal, x, y, lambda p: self._pair_fails(prop, fn, feature, p)
        )

    def _two_inputs(
        self,
        prop: Property,
        fn: ast.FunctionDef,
        domain: Domain,
        reals: _Reals,
        x: dict[str, z3.ArithRef],
        premises: list[z3.BoolRef],
        check: Outranks,
    ) -> Outcome:
        """Two inputs apart but for the shared features: the first at least `at_least` (where `given`
        holds of it), the second below `below`; a violation is the first scoring no higher."""
        y = {n: v if n in check.shared else z3.Real(f"{n}'") for n, v in x.items()}
        premises = premises + self._premises(fn, domain, reals, y)
        premises += [_names_expr(g, fn, reals, x, x) for g in check.given]
        first, second = _execute(fn, reals, x, self.params), _execute(fn, reals, y, self.params)
        premises += [first.defined(reals), second.defined(reals)]
        premises += [
            x[check.feature] >= reals.const(check.at_least),
            y[check.feature] < reals.const(check.below),
        ]
        goal = first.value <= second.value
        return self._search(prop, reals, premises, goal, x, y, lambda p: self._not_outranked(fn, check, p))

    def _search(
        self,
        prop: Property,
        reals: _Reals,
        premises: list[z3.BoolRef],
        goal: z3.BoolRef,
        x: Mapping[str, z3.ArithRef],
        y: Mapping[str, z3.ArithRef] | None,
        shown: Callable[[_Point], tuple[str, dict[str, Any]] | None],
        beyond: z3.BoolRef | None = None,
    ) -> Outcome:
        """Ask Z3 for inputs that violate the property; replay any it finds in floats before believing it.

        A model the floats do not confirm usually rests on a log/exp/sqrt/** value no double takes; the
        doubles' own values at the model's arguments are then added as facts and Z3 asked again. One that
        violates only by less than rounding (an output of exactly the bound in floats) is asked again with
        `beyond`, a stricter goal; its unsat proves nothing, so the answer is then the unconfirmed model.
        """
        deadline = time.perf_counter() + self.seconds
        solver = z3.Solver()
        solver.add(*premises, *reals.facts(), goal)
        tightened = False
        for _ in range(REFINEMENTS + 1):
            answer = self._check(solver, deadline)
            if answer != z3.sat:
                break
            model = solver.model()
            point = _Point(
                features={n: _float(model.eval(v, model_completion=True)) for n, v in x.items()},
                params={n: _float(model.eval(v, model_completion=True)) for n, v in self.params.items()},
                other=None
                if y is None
                else {n: _float(model.eval(v, model_completion=True)) for n, v in y.items()},
            )
            found = shown(point)
            if found is not None:
                message, detail = found
                counterexample = {"inputs": point.features, "params": point.params, **detail}
                if point.other is not None:
                    counterexample["inputs_after"] = point.other
                where = _describe(self.program, prop.function, point)
                return _outcome(prop, "counterexample", f"{message} at {where}", counterexample)
            anchors = reals.anchors(model)
            if anchors:
                solver.add(*anchors)
            elif beyond is not None and not tightened:
                solver.add(beyond)
                tightened = True
            else:
                break
        if answer == z3.unsat and tightened:
            answer = z3.sat  # the last unconfirmed model stands
        if answer == z3.unsat:
            vacuous = z3.Solver()
            vacuous.add(*premises, *reals.facts())
            if self._check(vacuous, deadline) == z3.unsat:
                return _outcome(prop, "unknown", "vacuous: no input satisfies the premises of the property")
            return _outcome(prop, "proved")
        if answer == z3.unknown:
            return _outcome(prop, "unknown", f"Z3 gave up: {solver.reason_unknown()}")
        inputs = _describe(self.program, prop.function, point)
        return _outcome(
            prop,
            "unknown",
            f"Z3's model ({inputs}) shows no violation when run in floats"
            " (it rests on the abstraction of log/exp/sqrt/** or on exact real arithmetic)",
        )

    def _check(self, solver: z3.Solver, deadline: float) -> z3.CheckSatResult:
        """One check within what is left of the property's time."""
        left_ms = int((deadline - time.perf_counter()) * 1000)
        if left_ms < 1:
            return z3.unknown
        solver.set("timeout", left_ms)
        return solver.check()

    def _float_run(
        self, fn: ast.FunctionDef, features: Mapping[str, float], params: Mapping[str, float]
    ) -> _Run[float, bool]:
        return _execute(fn, self.floats, features, params)

    def _fault_shown(self, fn: ast.FunctionDef, kind: Fault, p: _Point) -> tuple[str, dict[str, Any]] | None:
        faults = [f for f in self._float_run(fn, p.features, p.params).faults if f.kind == kind and f.unsafe]
        if not faults:
            return None
        return f"'{faults[0].text}' {_VERBS[kind]}", {"operation": faults[0].text}

    def _unbounded(
        self, fn: ast.FunctionDef, low: float, high: float, p: _Point
    ) -> tuple[str, dict[str, Any]] | None:
        run = self._float_run(fn, p.features, p.params)
        faults = [f for f in run.faults if f.unsafe]
        if faults:
            return f"the output is undefined: '{faults[0].text}' {_VERBS[faults[0].kind]}", {
                "operation": faults[0].text
            }
        if math.isfinite(run.value) and low <= run.value <= high:
            return None
        return f"the output {run.value!r} is outside [{low:g}, {high:g}]", {"output": _json_float(run.value)}

    def _pair_fails(
        self, prop: Property, fn: ast.FunctionDef, feature: str, p: _Point
    ) -> tuple[str, dict[str, Any]] | None:
        assert p.other is not None
        first = self._float_run(fn, p.features, p.params)
        second = self._float_run(fn, p.other, p.params)
        if any(f.unsafe for f in first.faults + second.faults):
            return None
        before, after = first.value, second.value
        step = p.other[feature] - p.features[feature]
        match prop.check:
            case Monotone(increasing=increasing):
                failed = after < before if increasing else after > before
                moved = "lowers" if increasing else "raises"
                what = f"raising {feature} {moved} the output from {before:.6g} to {after:.6g}"
            case GrowsWith(min_rate=rate):
                failed = after - before < rate * step
                what = (
                    f"raising {feature} by {step:.6g} changes the output by {after - before:.6g},"
                    f" less than {rate:g} * {step:.6g}"
                )
            case _:
                return None
        if not failed:
            return None
        return what, {"output": _json_float(before), "output_after": _json_float(after)}

    def _not_outranked(
        self, fn: ast.FunctionDef, check: Outranks, p: _Point
    ) -> tuple[str, dict[str, Any]] | None:
        assert p.other is not None
        first, second = self._float_run(fn, p.features, p.params), self._float_run(fn, p.other, p.params)
        if any(f.unsafe for f in first.faults + second.faults) or first.value > second.value:
            return None
        name = check.feature
        what = (
            f"at {name} {p.features[name]:.6g} it scores {first.value:.6g}, no more than {second.value:.6g} "
            f"at {name} {p.other[name]:.6g}"
        )
        return what, {"output": _json_float(first.value), "output_other": _json_float(second.value)}

    def _predicate_fails(self, prop: Property, p: _Point) -> tuple[str, dict[str, Any]] | None:
        assert isinstance(prop.check, Holds)
        runs = {name: self._float_run(f, p.features, p.params) for name, f in self.program.functions.items()}
        if any(f.unsafe for r in runs.values() for f in r.faults):
            return None
        names = {"out": runs[prop.function].value, **{n: r.value for n, r in runs.items()}}
        fn = self.program.functions[prop.function]
        if _names_expr(prop.check.predicate, fn, self.floats, p.features, names):
            return None
        return f"'{prop.check.predicate}' is false (out = {names['out']:.6g})", {
            "output": _json_float(names["out"])
        }


def _defines(relation: str, feature: str) -> bool:
    """Whether an equation ties the feature to others, which then move with it in a two-copy property."""
    return "==" in relation and feature in relation_names(relation)


def _outcome(
    prop: Property, verdict: Verdict, message: str = "", counterexample: dict[str, Any] | None = None
) -> Outcome:
    return Outcome(prop.name, prop.severity, verdict, 0.0, message, counterexample)


def _outward(bound: float, direction: float) -> float:
    """The bound moved away from the allowed range by its own size (at least 1): a violation beyond it
    survives float rounding."""
    return bound + direction * max(abs(bound), 1.0)


def _float(value: z3.ExprRef) -> float:
    if z3.is_algebraic_value(value):
        value = value.approx(30)
    if z3.is_rational_value(value) or z3.is_int_value(value):
        return float(value.as_fraction())
    raise ValueError(f"not a number: {value}")


def _json_float(x: float) -> float | str:
    return x if math.isfinite(x) else repr(x)


def _describe(program: Program, function: str, p: _Point) -> str:
    """The inputs the function reads (features, then params) at a point, for a one-line message."""
    fn = program.functions[function]
    state = fn.args.args[0].arg
    read = sorted(
        {
            n.attr
            for n in ast.walk(fn)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == state
        }
    )
    parts = []
    for name in read:
        if p.other is not None and p.other[name] != p.features[name]:
            parts.append(f"{name}={p.features[name]:.6g}->{p.other[name]:.6g}")
        else:
            parts.append(f"{name}={p.features[name]:.6g}")
    parts += [f"p.{name}={value:.6g}" for name, value in p.params.items()]
    return ", ".join(parts) or "any input"


def prove(
    program: Program,
    domains: Mapping[str, Domain],
    properties: Sequence[Property],
    seconds: float = SECONDS_PER_PROPERTY,
) -> Iterator[Outcome]:
    """Each property's outcome in order, in this process (Verifier adds the child process and hard kill)."""
    validate(program, domains, properties)
    prover = _Prover(program, domains, seconds)
    for prop in properties:
        start = time.perf_counter()
        try:
            outcome = prover.prove(prop)
        except Exception as exc:  # whatever goes wrong, the property is not proved
            outcome = _outcome(prop, "unknown", f"verifier error: {type(exc).__name__}: {exc}")
        yield replace(outcome, seconds=time.perf_counter() - start)


def validate(program: Program, domains: Mapping[str, Domain], properties: Sequence[Property]) -> None:
    """ValueError if a property names a function, feature or domain the program or target lacks."""
    names = [p.name for p in properties]
    if len(set(names)) != len(names):
        raise ValueError(f"property names repeat: {names}")
    for prop in properties:
        if prop.function not in program.functions or prop.function not in domains:
            raise ValueError(f"property '{prop.name}': no function or domain '{prop.function}'")
        if (
            isinstance(prop.check, Monotone | GrowsWith | Outranks)
            and prop.check.feature not in domains[prop.function].bounds
        ):
            raise ValueError(f"property '{prop.name}': no feature '{prop.check.feature}' in the domain")


# The child process: one per Verifier, long-lived, killed and replaced when a property overruns.


class Verifier:
    """Proves properties in a child process with a hard time limit per property.

    One child serves every candidate, so its start-up (about a second of imports) is paid once. Z3 stops
    itself after `seconds`; a property still running at `hard_s` has its child killed and is `unknown`,
    and the next property starts a fresh child. Calls from several threads take turns.
    """

    def __init__(
        self, seconds: float = SECONDS_PER_PROPERTY, hard_s: float | None = None, start_s: float = 120.0
    ) -> None:
        self.seconds = seconds
        self.hard_s = 2 * seconds + 3.0 if hard_s is None else hard_s
        self.start_s = start_s
        self._lock = threading.Lock()
        self._process: Any = None
        self._conn: Connection | None = None

    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def verify(
        self, program: Program, domains: Mapping[str, Domain], properties: Sequence[Property]
    ) -> list[Outcome]:
        """Each property's outcome, in order; ValueError if a property does not fit the program."""
        validate(program, domains, properties)
        with self._lock:
            return self._verify(program, domains, list(properties))

    def _verify(
        self, program: Program, domains: Mapping[str, Domain], pending: list[Property]
    ) -> list[Outcome]:
        outcomes: list[Outcome] = []
        while pending:
            conn = self._child()
            if conn is None:
                why = "the verifier process did not start"
                outcomes.extend(Outcome(p.name, p.severity, "unknown", 0.0, why) for p in pending)
                break
            conn.send((program, dict(domains), pending, self.seconds))
            while pending:
                prop = pending.pop(0)
                start = time.perf_counter()
                try:
                    answer = conn.recv() if conn.poll(self.hard_s) else None
                    why = f"killed at the hard limit of {self.hard_s:g} s"
                except (EOFError, OSError):
                    answer, why = None, "the verifier process died"
                if answer is None:
                    self._stop()
                    took = time.perf_counter() - start
                    outcomes.append(Outcome(prop.name, prop.severity, "unknown", took, why))
                    break
                outcomes.append(answer)
        return outcomes

    def _child(self) -> Connection | None:
        if self._conn is not None:
            return self._conn
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        process = ctx.Process(target=_serve, args=(child,), daemon=True, name="crucible-verifier")
        process.start()
        child.close()
        self._process, self._conn = process, parent
        try:
            if parent.poll(self.start_s) and parent.recv() == "ready":
                return parent
        except (EOFError, OSError):
            pass
        self._stop()
        return None

    def close(self) -> None:
        """Stop the child (a running proof is killed, not awaited); a later call starts a new one."""
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._process is not None:
            self._process.kill()
            self._process.join()
        self._process, self._conn = None, None


def _serve(conn: Connection) -> None:
    conn.send("ready")
    while True:
        try:
            program, domains, properties, seconds = conn.recv()
        except EOFError:
            return
        for outcome in prove(program, domains, properties, seconds):
            conn.send(outcome)
