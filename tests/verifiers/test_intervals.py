"""The interval algebra both the verifier and the evolve proposer read: sound bounds, tight where exact."""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from search.proposers.evolve.proposer import _unsafe
from targets.base import Feature, FeatureRegistry
from verifiers.intervals import (
    DOMAINS,
    TOP,
    Interval,
    Intervals,
    absolute,
    clamp,
    maximum,
    may_be_zero,
    minimum,
    outside,
    power_faults,
)
from verifiers.program import Signature
from verifiers.smt import _execute
from verifiers.static import check

ALG = Intervals()
NAMES = ("x", "y", "z")
ARITH = ("+", "-", "*", "/", "//", "%")
FUNCTIONS = ("log", "log1p", "exp", "sqrt", "floor", "ceil")
EXPONENTS = (-3.0, -2.0, -1.0, 0.5, 1.0, 1.5, 2.0, 3.0, 7.0)
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")

Tree = tuple[Any, ...]


def trees() -> st.SearchStrategy[Tree]:
    """Expressions of the candidate subset over x, y, z: arithmetic, functions, powers, min/max/abs/clamp
    and conditionals."""
    leaves = st.one_of(
        st.tuples(st.just("var"), st.sampled_from(NAMES)),
        st.tuples(st.just("const"), st.sampled_from([0.0, 1.0, -1.0, 0.5, 3.0, 1e-3, 60.0])),
        st.tuples(st.just("const"), st.floats(-1e3, 1e3)),
    )

    def grow(inner: st.SearchStrategy[Tree]) -> st.SearchStrategy[Tree]:
        return st.one_of(
            st.tuples(st.just("arith"), st.sampled_from(ARITH), inner, inner),
            st.tuples(st.just("neg"), inner),
            st.tuples(st.just("apply"), st.sampled_from(FUNCTIONS), inner),
            st.tuples(st.just("pow"), inner, st.sampled_from(EXPONENTS)),
            st.tuples(st.sampled_from(["min", "max"]), inner, inner),
            st.tuples(st.just("abs"), inner),
            st.tuples(st.just("clamp"), inner, inner, inner),
            st.tuples(st.just("ite"), st.sampled_from(COMPARISONS), inner, inner, inner, inner),
        )

    return st.recursive(leaves, grow, max_leaves=8)


def boxes() -> st.SearchStrategy[dict[str, Interval]]:
    ends = st.one_of(st.sampled_from([0.0, 1.0, -1.0, 1e-9, 3600.0]), st.floats(-1e6, 1e6))
    box = st.tuples(ends, ends).map(lambda t: (min(t), max(t)))
    return st.fixed_dictionaries({n: box for n in NAMES})


def value(tree: Tree, point: Mapping[str, float]) -> float:
    """The expression at a point, with Python's float semantics (a fault raises)."""
    kind = tree[0]
    if kind == "var":
        return point[tree[1]]
    if kind == "const":
        return tree[1]
    if kind == "arith":
        a, b = value(tree[2], point), value(tree[3], point)
        return {"+": a + b, "-": a - b, "*": a * b}[tree[1]] if tree[1] in "+-*" else _divide(tree[1], a, b)
    if kind == "neg":
        return -value(tree[1], point)
    if kind == "apply":
        x = value(tree[2], point)
        fn = {"log1p": math.log1p, "floor": math.floor, "ceil": math.ceil}.get(
            tree[1], getattr(math, tree[1])
        )
        return float(fn(x))
    if kind == "pow":
        return math.pow(value(tree[1], point), tree[2])
    if kind in ("min", "max"):
        return (min if kind == "min" else max)(value(tree[1], point), value(tree[2], point))
    if kind == "abs":
        return abs(value(tree[1], point))
    if kind == "clamp":
        x, lo, hi = (value(t, point) for t in tree[1:])
        return min(max(x, lo), hi)
    a, b = value(tree[2], point), value(tree[3], point)
    return value(tree[4], point) if _compare(tree[1], a, b) else value(tree[5], point)


def _divide(op: str, a: float, b: float) -> float:
    return a / b if op == "/" else a // b if op == "//" else a % b


def _compare(op: str, a: float, b: float) -> bool:
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[op]


def bounds(tree: Tree, box: Mapping[str, Interval]) -> Interval:
    """The expression's interval over the box, by the algebra."""
    kind = tree[0]
    if kind == "var":
        return box[tree[1]]
    if kind == "const":
        return ALG.const(tree[1])
    if kind == "arith":
        return ALG.arith(tree[1], bounds(tree[2], box), bounds(tree[3], box))
    if kind == "neg":
        return ALG.neg(bounds(tree[1], box))
    if kind == "apply":
        return ALG.apply(tree[1], bounds(tree[2], box))
    if kind == "pow":
        return ALG.power(bounds(tree[1], box), tree[2])
    if kind in ("min", "max"):
        args = [bounds(tree[1], box), bounds(tree[2], box)]
        return minimum(args) if kind == "min" else maximum(args)
    if kind == "abs":
        return absolute(bounds(tree[1], box))
    if kind == "clamp":
        return clamp(*(bounds(t, box) for t in tree[1:]))
    test = ALG.cmp(tree[1], bounds(tree[2], box), bounds(tree[3], box))
    return ALG.ite(test, bounds(tree[4], box), bounds(tree[5], box))


def inside(box: Mapping[str, Interval]) -> st.SearchStrategy[dict[str, float]]:
    def within(lo: float, hi: float) -> st.SearchStrategy[float]:
        return st.one_of(st.sampled_from([lo, hi]), st.floats(lo, hi))

    return st.fixed_dictionaries({n: within(*box[n]) for n in NAMES})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(), box=boxes(), data=st.data())
def test_the_interval_of_an_expression_contains_its_value_at_every_point_of_the_box(
    tree: Tree, box: dict[str, Interval], data: st.DataObject
) -> None:
    point = data.draw(inside(box))
    try:
        v = value(tree, point)
    except (ArithmeticError, ValueError):
        return  # a fault at this point: what the fault rules are for (tested below), not the bounds
    low, high = bounds(tree, box)
    assert math.isnan(v) or low <= v <= high, (low, v, high)


@settings(max_examples=200, deadline=None)
@given(box=boxes(), data=st.data(), op=st.sampled_from(COMPARISONS))
def test_a_comparison_over_intervals_allows_whatever_it_is_at_a_point(
    box: dict[str, Interval], data: st.DataObject, op: str
) -> None:
    point = data.draw(inside(box))
    can_be_true, can_be_false = ALG.cmp(op, box["x"], box["y"])
    assert can_be_true if _compare(op, point["x"], point["y"]) else can_be_false


@settings(max_examples=200, deadline=None)
@given(box=boxes(), data=st.data(), name=st.sampled_from(list(DOMAINS)), n=st.sampled_from(EXPONENTS))
def test_the_fault_rules_flag_every_interval_holding_a_point_where_the_operation_faults(
    box: dict[str, Interval], data: st.DataObject, name: str, n: float
) -> None:
    """Division by zero, log, log1p and sqrt out of their domain, 0 to a negative power and a negative
    number to a fractional one (overflow is a fault of its own, outside these rules)."""
    x = data.draw(inside(box))["x"]
    fn = {"log": math.log, "log1p": math.log1p, "sqrt": math.sqrt}[name]
    assert may_be_zero(box["x"]) or x != 0.0
    for flagged, call in (
        (outside(name, box["x"]), fn),
        (power_faults(box["x"], n), lambda v: math.pow(v, n)),
    ):
        try:
            call(x)
        except ValueError:
            assert flagged, (name, n, x, box["x"])
        except OverflowError:
            pass


def test_a_bound_that_is_exact_stays_on_the_edge_of_the_box() -> None:
    """A product with a zero factor, a sum of small integers, log(1), sqrt of a square are exact: a
    feature whose low end is 0 is not pushed below it, so sqrt(age * w) or log(1 + hits) is not flagged."""
    assert ALG.arith("*", (0.0, 5.0), (0.0, 8.0)) == (0.0, 40.0)
    assert ALG.arith("+", (1.0, 1.0), (0.0, 10.0)) == (1.0, 11.0)
    assert ALG.apply("log", (1.0, 1.0)) == (0.0, 0.0)
    assert ALG.apply("sqrt", (0.0, 4.0)) == (0.0, 2.0)
    assert not outside("sqrt", ALG.arith("*", (0.0, 5.0), (0.0, 8.0)))


def test_a_bound_that_rounded_moves_one_ulp_outward_and_holds_the_real_value() -> None:
    low, high = ALG.arith("+", (0.1, 0.1), (0.2, 0.2))
    assert low < high and Fraction(low) <= Fraction(0.1) + Fraction(0.2) <= Fraction(high)
    low, high = ALG.arith("/", (1.0, 1.0), (3.0, 3.0))
    assert Fraction(low) < Fraction(1, 3) < Fraction(high)
    assert ALG.arith("*", (1e308, 1e308), (10.0, 10.0)) == (sys_max(), math.inf), "overflow is finite, large"


def sys_max() -> float:
    return math.nextafter(math.inf, 0.0)


def test_division_by_an_interval_holding_zero_bounds_nothing() -> None:
    assert ALG.arith("/", (1.0, 2.0), (-1.0, 1.0)) == TOP
    assert may_be_zero((-1.0, 1.0)) and not may_be_zero((1e-9, 1.0))


SIGNATURE = Signature(name="priority", features=NAMES)
REGISTRY = FeatureRegistry(
    (Feature("x", "", 0.0, 100.0, "x"), Feature("y", "", 1.0, 50.0, "y"), Feature("z", "", -5.0, 5.0, "z"))
)
EXPRESSIONS = [
    "b.x / b.y",
    "b.y / b.x",
    "log(1 + b.x)",
    "log(b.x)",
    "sqrt(b.x * p.w)",
    "sqrt(b.z)",
    "b.z ** -1",
    "b.y ** 0.5 + b.x % b.y",
    "log1p(b.z)",
    "1 / (b.y - 1)",
    "b.x // (b.z + 6)",
    "log(max(b.x, 1) - 1)",
]


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_the_proposer_and_the_verifier_flag_the_same_operations_by_the_same_algebra(expression: str) -> None:
    source = f'PARAMS = {{"w": (0.0, 8.0)}}\n\n\ndef priority(b, p):\n    return {expression}\n'
    program = check(source, [SIGNATURE])
    fn = program.functions["priority"]
    proposer = _unsafe(fn, SIGNATURE, REGISTRY, {p.name: p for p in program.params})
    run = _execute(fn, ALG, REGISTRY.domain().bounds, {"w": (0.0, 8.0)})
    verifier = [f.text for f in run.faults if f.unsafe[0] and f.kind != "overflow"]
    assert proposer == verifier
