"""Interval bounds of the candidate subset's operations: one algebra for the verifier and the proposers.

An interval (low, high) bounds every real value an expression takes while its inputs range over their
intervals; a condition over intervals is a pair (can be true, can be false). Each bound is the nearest
double on the outside of the real bound: where a double operation rounded, the bound moves one ulp
outward, and where it was exact (a product with a zero factor, a sum of small integers) it stays, so a
box that touches an edge (a feature whose low end is 0) is not pushed over it. The same bounds hold for
the doubles a function computes, since a double operation rounds its real result to one of the two doubles
around it. log, log1p, exp, sqrt and non-integer powers come from libm, which is within one ulp: they
move one ulp outward unless the value is exact (log(1), exp(0), a perfect square's root...).

`verifiers.smt` reads a whole decision function in this algebra to settle fault and bound properties
without Z3; `search.proposers.evolve` reads a draft child in it to refuse operations that may fault
before it is ever proposed. Both name the same domains (DOMAINS) and the same division rule.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Literal

Interval = tuple[float, float]
Maybe = tuple[bool, bool]
"""A condition over intervals: whether it can be true, whether it can be false."""
TOP: Interval = (-math.inf, math.inf)
DBL_MAX = sys.float_info.max

DOMAINS: dict[str, tuple[float, bool]] = {"log": (0.0, False), "log1p": (-1.0, False), "sqrt": (0.0, True)}
"""Each function with a restricted domain: its edge, and whether the edge itself is inside the domain."""
EXACT_POWERS = 64
"""Integer exponents up to this magnitude are bounded exactly (rational arithmetic); others move one ulp."""


def may_be_zero(a: Interval) -> bool:
    """Whether a divisor bounded by `a` may be zero."""
    return a[0] <= 0.0 <= a[1]


def outside(name: str, a: Interval) -> bool:
    """Whether an argument bounded by `a` may lie outside the domain of log, log1p or sqrt."""
    edge, closed = DOMAINS[name]
    return a[0] < edge or (a[0] == edge and not closed)


def power_faults(a: Interval, exponent: float) -> bool:
    """Whether a ** exponent may fault for a base bounded by `a`: 0 to a negative power, or a negative base
    to a non-integer one."""
    return (exponent < 0 and may_be_zero(a)) or (not float(exponent).is_integer() and a[0] < 0.0)


def hull(*intervals: Interval) -> Interval:
    return (min(i[0] for i in intervals), max(i[1] for i in intervals))


def minimum(args: Sequence[Interval]) -> Interval:
    return (min(a[0] for a in args), min(a[1] for a in args))


def maximum(args: Sequence[Interval]) -> Interval:
    return (max(a[0] for a in args), max(a[1] for a in args))


def absolute(a: Interval) -> Interval:
    low, high = a
    return a if low >= 0 else (-high, -low) if high <= 0 else (0.0, max(-low, high))


def clamp(x: Interval, low: Interval, high: Interval) -> Interval:
    """clamp(x, lo, hi) = min(max(x, lo), hi), monotone in each argument."""
    return minimum([maximum([x, low]), high])


class Intervals:
    """The operations of the subset over intervals (the algebra `verifiers.smt` translates a function in).

    Division by an interval that holds 0, and a function outside its domain, give TOP: the fault is the
    caller's to flag (see may_be_zero, outside, power_faults), and the value then bounds nothing."""

    def const(self, x: float) -> Interval:
        return (x, x)

    def arith(self, op: str, a: Interval, b: Interval) -> Interval:
        match op:
            case "+":
                return _bound([(a[0], b[0]), (a[1], b[1])], _add)
            case "-":
                return _bound([(a[0], -b[1]), (a[1], -b[0])], _add)
            case "*":
                return _bound([(x, y) for x in a for y in b], _mul)
        if may_be_zero(b):
            return TOP
        if op == "%":  # Python's % takes the divisor's sign and stays below its size
            return (0.0, b[1]) if b[0] > 0 else (b[0], 0.0)
        quotient = _bound([(x, y) for x in a for y in b], _div)
        return quotient if op == "/" else self.apply("floor", quotient)

    def neg(self, a: Interval) -> Interval:
        return (-a[1], -a[0])

    def cmp(self, op: str, a: Interval, b: Interval) -> Maybe:
        match op:
            case "<":
                return (a[0] < b[1], a[1] >= b[0])
            case "<=":
                return (a[0] <= b[1], a[1] > b[0])
            case ">":
                return self.cmp("<", b, a)
            case ">=":
                return self.cmp("<=", b, a)
        meet = a[0] <= b[1] and b[0] <= a[1]
        single = a[0] == a[1] == b[0] == b[1]
        return (meet, not single) if op == "==" else (not single, meet)

    def ite(self, c: Maybe, a: Interval, b: Interval) -> Interval:
        if not c[1]:
            return a
        if not c[0]:
            return b
        return hull(a, b)

    def all(self, cs: Sequence[Maybe]) -> Maybe:
        return (all(c[0] for c in cs), any(c[1] for c in cs))

    def any(self, cs: Sequence[Maybe]) -> Maybe:
        return (any(c[0] for c in cs), all(c[1] for c in cs))

    def negate(self, c: Maybe) -> Maybe:
        return (c[1], c[0])

    def apply(self, name: str, a: Interval) -> Interval:
        """log, log1p, exp, sqrt, floor or ceil: each is monotone, so the ends of the box (clipped to the
        function's domain) bound it."""
        if name in ("floor", "ceil"):
            rounded = math.floor if name == "floor" else math.ceil
            return (_whole(rounded, a[0]), _whole(rounded, a[1]))
        if name == "exp":
            return (_libm(math.exp, a[0], up=False), _libm(math.exp, a[1], up=True))
        edge, closed = DOMAINS[name]
        if a[1] < edge or (a[1] == edge and not closed):
            return TOP  # undefined everywhere: the fault is flagged, the value does not matter
        fn = {"log": math.log, "log1p": math.log1p, "sqrt": math.sqrt}[name]
        low = -math.inf if a[0] <= edge and not closed else _libm(fn, max(a[0], edge), up=False)
        return (low, _libm(fn, a[1], up=True))

    def power(self, a: Interval, exponent: float) -> Interval:
        if exponent == 0:
            return (1.0, 1.0)
        if not float(exponent).is_integer():
            if a[1] < 0:
                return TOP
            a = (max(a[0], 0.0), a[1])
        elif exponent % 2 == 0 and a[0] < 0:  # an even power folds the box onto its magnitudes
            a = (0.0 if a[1] >= 0 else -a[1], max(-a[0], a[1]))
        if exponent < 0 and may_be_zero(a):
            return TOP
        return _bound([(v, exponent) for v in a], _pow)


# Directed bounds: each operation gives its double and what is known of its real value: the exact value
# (finite operands), None (an infinite operand: the box's end is never reached, the double is its limit),
# or ROUNDED (within one ulp of the double, on a side not known).

ROUNDED = "rounded"
Real = Fraction | None | Literal["rounded"]


def _bound(pairs: list[tuple[float, float]], op: Callable[[float, float], tuple[float, Real]]) -> Interval:
    """The outward bounds of op over the corner pairs; TOP if any corner is undefined (nan)."""
    results = [op(x, y) for x, y in pairs]
    if any(math.isnan(r) for r, _ in results):
        return TOP
    lows = [_directed(r, real, up=False) for r, real in results]
    return (min(lows), max(_directed(r, real, up=True) for r, real in results))


def _directed(r: float, real: Real, up: bool) -> float:
    """The double nearest the real value on the side `up` says, given the operation's rounded double r."""
    if real is None:
        return r
    if math.isinf(r):  # overflow from finite operands: the real value is beyond DBL_MAX, and finite
        return r if (r > 0) == up else math.copysign(DBL_MAX, r)
    if real == ROUNDED or (Fraction(r) < real if up else Fraction(r) > real):
        return math.nextafter(r, math.inf if up else -math.inf)
    return r


def _finite(*xs: float) -> bool:
    return all(math.isfinite(x) for x in xs)


def _add(x: float, y: float) -> tuple[float, Real]:
    return x + y, Fraction(x) + Fraction(y) if _finite(x, y) else None


def _mul(x: float, y: float) -> tuple[float, Real]:
    if x == 0.0 or y == 0.0:
        return 0.0, Fraction(0)  # 0 * inf is 0 here: the box's infinite end is never reached
    return x * y, Fraction(x) * Fraction(y) if _finite(x, y) else None


def _div(x: float, y: float) -> tuple[float, Real]:
    if math.isinf(y):
        return (0.0, Fraction(0)) if math.isfinite(x) else (math.nan, None)
    return x / y, Fraction(x) / Fraction(y) if _finite(x) else None


def _pow(x: float, n: float) -> tuple[float, Real]:
    try:
        r = math.pow(x, n)
    except OverflowError:
        r = -math.inf if x < 0 and n % 2 == 1 else math.inf
    except ValueError:
        return math.nan, None
    if not _finite(x):
        return r, None
    if x in (0.0, 1.0):
        return r, Fraction(r)
    if float(n).is_integer() and abs(n) <= EXACT_POWERS:
        return r, Fraction(x) ** int(n)
    return r, ROUNDED


def _libm(fn: Callable[[float], float], x: float, up: bool) -> float:
    """A bound of fn(x) for a libm function, one ulp outward unless the value is exact."""
    try:
        r = fn(x)
    except OverflowError:
        return math.inf if up else DBL_MAX
    if not math.isfinite(x) or not math.isfinite(r):
        return r
    if fn is math.sqrt and Fraction(r) ** 2 == Fraction(x):
        return r
    if (fn in (math.log, math.log1p) and r == 0.0 and x in (1.0, 0.0)) or (fn is math.exp and x == 0.0):
        return r
    return math.nextafter(r, math.inf if up else -math.inf)


def _whole(rounded: Callable[[float], int], x: float) -> float:
    return float(rounded(x)) if math.isfinite(x) else x
