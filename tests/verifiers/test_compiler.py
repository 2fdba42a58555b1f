"""The back ends of verifiers.compiler: plain Python and numba compute the same function of the same AST."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import types

from verifiers.compiler import FUNCTION_TYPE, param_vector, to_numba, to_python, to_source
from verifiers.program import Signature
from verifiers.static import check

FEATURES = ("now", "last_access", "hits", "depth", "age", "tokens")
SIG = Signature("priority", features=FEATURES)
COLUMNS = {f: i for i, f in enumerate(FEATURES)}

DESIGN_EXAMPLE = '''"""Keep deep, recently extended prefixes; age out one-off tails."""
PARAMS = {"w_hits": (0.0, 8.0), "half_life_s": (1.0, 3600.0, "log")}

def priority(b, p):
    age = b.now - b.last_access
    return p.w_hits * log(1 + b.hits) - age / p.half_life_s + 0.5 * min(b.depth, 16)
'''
STATE = {"now": 100.0, "last_access": 40.0, "hits": 3.0, "depth": 20.0, "age": 7.0, "tokens": 256.0}


def row(state: Mapping[str, float]) -> np.ndarray:
    """One feature row in COLUMNS order, shaped as the X a compiled function reads."""
    return np.array([[state[f] for f in FEATURES]], dtype=np.float64)


def both(
    source: str, state: Mapping[str, float] = STATE, params: Mapping[str, float] | None = None
) -> tuple[float | type[Exception], float]:
    """(python result or the exception type it raised, numba result) of `priority` on one state."""
    program = check(source, [SIG])
    compiled = to_numba(program, "priority", COLUMNS)(row(state), 0, param_vector(program, params or {}))
    try:
        return to_python(program, "priority")(state, params or {}), compiled
    except (ArithmeticError, ValueError) as exc:
        return type(exc), compiled


def fn(expression: str) -> str:
    """A candidate whose `priority` returns one expression."""
    return f"def priority(b, p):\n    return {expression}\n"


def fn_body(*lines: str) -> str:
    """A candidate whose `priority` body is `lines`."""
    return "def priority(b, p):\n" + "".join(f"    {line}\n" for line in lines)


def test_the_design_example_in_python_and_numba() -> None:
    params = {"w_hits": 2.0, "half_life_s": 30.0}
    expected = 2.0 * math.log(4.0) - 60.0 / 30.0 + 0.5 * 16
    python, compiled = both(DESIGN_EXAMPLE, STATE, params)
    assert python == pytest.approx(expected, rel=1e-12)
    assert compiled == pytest.approx(expected, rel=1e-12)


def test_missing_params_take_their_defaults() -> None:
    program = check(DESIGN_EXAMPLE, [SIG])
    defaults = program.defaults()
    assert to_python(program, "priority")(STATE, {}) == to_python(program, "priority")(STATE, defaults)
    assert param_vector(program, {"half_life_s": 9.0}).tolist() == [defaults["w_hits"], 9.0]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("b.hits and b.depth", 20.0),  # `and` / `or` give an operand, as in Python
        ("0 and b.depth", 0.0),
        ("0 or b.depth", 20.0),
        ("b.hits or b.depth", 3.0),
        ("not b.hits", 0.0),
        ("not 0", 1.0),
        ("b.hits < b.depth <= 20", 1.0),
        ("b.hits == 3", 1.0),
        ("b.hits != 3", 0.0),
        ("b.tokens if b.hits > 5 else -b.tokens", -256.0),
        ("-7 // 2 + -7 % 2", -3.0),
        ("b.hits ** 2 + 2 ** -1", 9.5),
        ("floor(2.5) + ceil(2.5)", 5.0),
        ("clamp(b.depth, 0, 16) + clamp(-b.depth, 0, 16)", 16.0),
        ("max(1, b.hits, 2) + min(5, b.depth, b.now)", 8.0),
        ("abs(-2) + sqrt(16) + exp(0) + log1p(0) + log(1)", 7.0),
    ],
)
def test_python_and_numba_agree_on_each_construct(expression: str, expected: float) -> None:
    assert both(fn(expression)) == (expected, expected)


@pytest.mark.parametrize(
    ("expression", "raised", "compiled"),
    [
        ("b.hits / 0", ZeroDivisionError, math.inf),
        ("-b.hits / 0", ZeroDivisionError, -math.inf),
        ("b.hits // 0", ZeroDivisionError, math.inf),
        ("b.hits % 0", ZeroDivisionError, math.nan),
        ("0 / 0", ZeroDivisionError, math.nan),
        ("log(-b.hits)", ValueError, math.nan),
        ("log(0)", ValueError, -math.inf),
        ("sqrt(-b.hits)", ValueError, math.nan),
        ("(-b.hits) ** 0.5", ValueError, math.nan),
        ("exp(1000)", OverflowError, math.inf),
        ("b.now ** 400", OverflowError, math.inf),
    ],
)
def test_python_raises_where_numba_returns_inf_or_nan(expression: str, raised: type, compiled: float) -> None:
    python, value = both(fn(expression))
    assert python is raised
    assert value == compiled or (math.isnan(compiled) and math.isnan(value))


def test_floor_and_ceil_return_floats_in_python() -> None:
    program = check(fn("floor(b.hits / 2) + ceil(0.1)"), [SIG])
    assert to_python(program, "priority")(STATE, {}) == 2.0


def test_loops_are_unrolled_with_the_loop_variable_as_a_literal() -> None:
    source = fn_body(
        "acc = 0", "for i in range(3):", "    for k in range(2):", "        acc += i * 10 + k", "return acc"
    )
    code = to_source(check(source, [SIG]), "priority", COLUMNS)
    assert "for " not in code and "range" not in code
    assert code.count("v_acc = (v_acc + (((2.0) * (10.0)) + (1.0)))") == 1
    assert both(source) == (63.0, 63.0)


def test_locals_cannot_collide_with_the_compiled_arguments_or_helpers() -> None:
    source = fn_body("X = b.hits", "j = 2", "P = X * j", "np = P + 1", "v_X = np", "return v_X + X")
    assert both(source) == (10.0, 10.0)


def test_branches_compile_with_truth_as_nonzero() -> None:
    source = fn_body(
        "if b.hits - 3:",
        "    x = 1",
        "elif b.depth > 10:",
        "    return b.depth",
        "else:",
        "    x = 3",
        "return x",
    )
    assert both(source) == (20.0, 20.0)
    assert both(source, {**STATE, "hits": 4.0}) == (1.0, 1.0)


def test_every_function_of_a_program_compiles_with_its_own_argument_names() -> None:
    budget = Signature("token_budget", features=("queued", "free"), state_arg="s", params_arg="q")
    source = (
        'PARAMS = {"chunk": (16, 4096, "log", 512)}\n\n'
        "def priority(b, p):\n    return b.hits\n\n"
        "def token_budget(s, q):\n    return min(s.queued, s.free * q.chunk)\n"
    )
    program = check(source, [SIG, budget])
    compiled = to_numba(program, "token_budget", {"free": 0, "queued": 1})
    assert compiled(np.array([[2.0, 5000.0]]), 0, param_vector(program, {})) == 1024.0
    assert to_python(program, "token_budget")({"queued": 5000.0, "free": 2.0}, {}) == 1024.0


def test_compiling_needs_a_column_for_every_feature_read() -> None:
    program = check(DESIGN_EXAMPLE, [SIG])
    with pytest.raises(ValueError, match="no column for features: depth, hits"):
        to_source(program, "priority", {"now": 0, "last_access": 1})
    with pytest.raises(ValueError, match="no function 'evict'"):
        to_python(program, "evict")


def test_a_compiled_candidate_is_a_first_class_function_for_njit_code() -> None:
    @numba.njit(types.float64(FUNCTION_TYPE, types.float64[:, ::1], types.float64[::1]))
    def total(policy: Callable[..., float], x: np.ndarray, p: np.ndarray) -> float:
        s = 0.0
        for j in range(x.shape[0]):
            s += policy(x, j, p)
        return s

    program = check(DESIGN_EXAMPLE, [SIG])
    x = np.vstack([row(STATE), row({**STATE, "hits": 0.0})])
    p = param_vector(program, {"w_hits": 1.0, "half_life_s": 60.0})
    python = to_python(program, "priority")
    expected = sum(python(s, {"w_hits": 1.0, "half_life_s": 60.0}) for s in (STATE, {**STATE, "hits": 0.0}))
    assert total(to_numba(program, "priority", COLUMNS), x, p) == pytest.approx(expected, rel=1e-12)


# Property: on random valid programs and inputs, numba computes what Python computes.

PARAMS_LINE = 'PARAMS = {"a": (0.1, 10.0), "c": (-5.0, 5.0), "k": (1.0, 100.0, "log")}'
LITERALS = st.sampled_from(["0", "1", "2", "3", "0.5", "1.5", "(-2.0)", "16.0", "1e-3", "100.0"])
BINARY = st.sampled_from(["+", "-", "*", "/", "//", "%"])
COMPARE = st.sampled_from(["<", "<=", ">", ">=", "==", "!="])
UNARY_CALLS = st.sampled_from(["abs", "log", "log1p", "exp", "sqrt", "floor", "ceil"])


def expression(draw: st.DrawFn, names: tuple[str, ...], depth: int) -> str:
    """A random expression over features, params, `names` and literals from the candidate grammar."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        leaf = draw(st.sampled_from(["literal", "feature", "param"] + (["name"] if names else [])))
        if leaf == "literal":
            return draw(LITERALS)
        if leaf == "feature":
            return f"b.{draw(st.sampled_from(FEATURES))}"
        if leaf == "param":
            return f"p.{draw(st.sampled_from(['a', 'c', 'k']))}"
        return draw(st.sampled_from(names))

    def sub() -> str:
        return expression(draw, names, depth - 1)

    kind = draw(st.sampled_from(["binary", "power", "unary", "compare", "bool", "ifexp", "call", "minmax"]))
    if kind == "binary":
        return f"({sub()} {draw(BINARY)} {sub()})"
    if kind == "power":
        return f"({sub()} ** {draw(st.sampled_from(['0', '2', '3', '0.5', '-1', '1.5']))})"
    if kind == "unary":
        return f"({draw(st.sampled_from(['-', 'not ']))}{sub()})"
    if kind == "compare":
        chain = " ".join(f"{draw(COMPARE)} {sub()}" for _ in range(draw(st.integers(1, 2))))
        return f"({sub()} {chain})"
    if kind == "bool":
        return f"({sub()} {draw(st.sampled_from(['and', 'or']))} {sub()})"
    if kind == "ifexp":
        return f"({sub()} if {sub()} else {sub()})"
    if kind == "call":
        return f"{draw(UNARY_CALLS)}({sub()})"
    if draw(st.booleans()):
        return f"clamp({sub()}, {sub()}, {sub()})"
    args = ", ".join(sub() for _ in range(draw(st.integers(2, 3))))
    return f"{draw(st.sampled_from(['min', 'max']))}({args})"


@st.composite
def programs(draw: st.DrawFn) -> str:
    """A random valid candidate: locals, an if/else (maybe returning early), a range loop, a return."""
    names: tuple[str, ...] = ()
    lines = []
    for n in range(draw(st.integers(1, 3))):
        lines.append(f"t{n} = {expression(draw, names, 2)}")
        names += (f"t{n}",)
    lines.append(f"if {expression(draw, names, 2)}:")
    if draw(st.booleans()):
        lines.append(f"    return {expression(draw, names, 2)}")
    else:
        lines.append(f"    u = {expression(draw, names, 2)}")
    lines += ["else:", f"    u = {expression(draw, names, 2)}"]
    names += ("u",)
    lines.append(f"for i in range({draw(st.integers(1, 3))}):")
    lines.append(f"    u {draw(st.sampled_from(['+=', '-=', '*=']))} {expression(draw, (*names, 'i'), 2)}")
    lines.append(f"return {expression(draw, names, 2)}")
    return PARAMS_LINE + "\n\n" + fn_body(*lines)


FEATURE_VALUES = st.one_of(st.sampled_from([0.0, 1.0, -1.0, 0.5]), st.floats(-50.0, 50.0))
STATES = st.fixed_dictionaries({f: FEATURE_VALUES for f in FEATURES})
PARAM_VALUES = st.fixed_dictionaries(
    {"a": st.floats(0.1, 10.0), "c": st.floats(-5.0, 5.0), "k": st.floats(1.0, 100.0)}
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=programs(), states=st.lists(STATES, min_size=1, max_size=8), params=PARAM_VALUES)
def test_numba_agrees_with_python_on_random_programs(
    source: str, states: list[dict[str, float]], params: dict[str, float]
) -> None:
    program = check(source, [SIG])
    python = to_python(program, "priority")
    compiled = to_numba(program, "priority", COLUMNS)
    x = np.vstack([row(s) for s in states])
    p = param_vector(program, params)
    for j, state in enumerate(states):
        value = compiled(x, j, p)
        try:
            expected = python(state, params)
        except (ZeroDivisionError, ValueError, OverflowError):
            continue  # numba must only not crash here: it returns inf, nan, or a value
        if math.isfinite(expected):
            assert math.isclose(value, expected, rel_tol=1e-9, abs_tol=1e-9), (j, expected, value)
