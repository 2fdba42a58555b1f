"""verifiers.smt: every kind of property is proved where it holds and refuted, with a counterexample that
really shows the violation when the candidate runs, where it does not; unknown is never proved."""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping

import numpy as np
import pytest
import z3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verifiers.compiler import param_vector, to_numba, to_python
from verifiers.intervals import Intervals
from verifiers.program import Program, Signature
from verifiers.properties import (
    Bounded,
    Check,
    Domain,
    Fault,
    GrowsWith,
    Holds,
    Monotone,
    NoFault,
    Outcome,
    Property,
)
from verifiers.smt import Verifier, _execute, _facts, _Floats, _monotone, _Reals, prove
from verifiers.static import check

BOUNDS = {"x": (0.0, 100.0), "y": (-10.0, 10.0), "w": (0.0, 1.0e6), "n": (1.0, 64.0)}
SIG = Signature("f", features=tuple(BOUNDS))
DOMAIN = Domain(BOUNDS)
COLUMNS = {name: i for i, name in enumerate(BOUNDS)}


def program(body: str, params: str = "") -> Program:
    """A candidate whose `f` returns one expression, or runs the given lines."""
    lines = body if "\n" in body else f"return {body}"
    source = (
        (params + "\n" if params else "")
        + "def f(b, p):\n"
        + "".join(f"    {ln}\n" for ln in lines.splitlines())
    )
    return check(source, [SIG])


def verdict(prog: Program, check_: Check, domain: Domain = DOMAIN, seconds: float = 5.0) -> Outcome:
    [outcome] = prove(prog, {"f": domain}, [Property("p", "a statement", "f", check_)], seconds)
    return outcome


def run_python(prog: Program, inputs: Mapping[str, float], params: Mapping[str, float]) -> float:
    return to_python(prog, "f")(inputs, params)


def run_numba(prog: Program, inputs: Mapping[str, float], params: Mapping[str, float]) -> float:
    row = np.array([[inputs[name] for name in BOUNDS]], dtype=np.float64)
    return float(to_numba(prog, "f", COLUMNS)(row, 0, param_vector(prog, params)))


FAULTY: list[tuple[Fault, str, type[Exception]]] = [
    ("division", "b.x / (b.y - 3)", ZeroDivisionError),
    ("division", "b.x // (b.n - 2)", ZeroDivisionError),
    ("division", "b.x % b.y", ZeroDivisionError),
    ("division", "(b.y + 1) ** -1", ValueError),  # math.pow(0, -1) is a domain error
    ("log", "log(b.y)", ValueError),
    ("log", "log1p(b.y)", ValueError),
    ("sqrt", "sqrt(b.y - 2)", ValueError),
    ("sqrt", "b.y ** 0.5", ValueError),
    ("overflow", "exp(b.x * 8)", OverflowError),
    ("overflow", "b.w ** 60", OverflowError),
]


@pytest.mark.parametrize(("fault", "body", "raised"), FAULTY)
def test_a_faulting_operation_has_a_counterexample_on_which_the_candidate_really_faults(
    fault: Fault, body: str, raised: type[Exception]
) -> None:
    prog = program(body)
    outcome = verdict(prog, NoFault(fault))
    assert outcome.verdict == "counterexample", outcome.message
    cex = outcome.counterexample
    assert cex is not None and cex["operation"] == ast.unparse(ast.parse(body))
    with pytest.raises(raised):
        run_python(prog, cex["inputs"], cex["params"])
    assert not math.isfinite(run_numba(prog, cex["inputs"], cex["params"]))


SAFE: list[tuple[Fault, str]] = [
    ("division", "b.x / (b.n + 1)"),
    ("division", "b.x / b.y if b.y != 0 else 0.0"),
    ("division", "b.y != 0 and 1 / b.y"),
    ("division", "b.y == 0 or 1 / b.y"),
    ("division", "0 < b.y < 1 / b.y"),
    ("division", "if b.y > 0:\n    return 1 / b.y\nelif b.y < 0:\n    return -1 / b.y\nreturn 0.0"),
    ("division", "d = b.n\nfor i in range(3):\n    d = d + i\nreturn b.x / d"),
    ("division", "b.x / exp(-b.n)"),  # exp(-64) is far above the doubles' underflow
    ("log", "log(1 + b.x)"),
    ("log", "log(b.y) if b.y > 0 else 0.0"),
    ("log", "log1p(b.y + 10)"),
    ("sqrt", "sqrt(abs(b.y))"),
    ("sqrt", "max(b.y, 0) ** 0.5"),
    ("overflow", "exp(-b.w)"),
    ("overflow", "exp(min(b.x, 700))"),
    ("overflow", "b.y ** 60"),
]


@pytest.mark.parametrize(("fault", "body"), SAFE)
def test_a_guarded_or_safe_operation_is_proved(fault: Fault, body: str) -> None:
    outcome = verdict(program(body), NoFault(fault))
    assert outcome.verdict == "proved", outcome.message


def test_a_divisor_that_underflows_to_zero_in_doubles_is_caught() -> None:
    prog = program("b.x / exp(-b.w)")
    outcome = verdict(prog, NoFault("division"))
    assert outcome.verdict == "counterexample", outcome.message
    with pytest.raises(ZeroDivisionError):
        run_python(prog, outcome.counterexample["inputs"], outcome.counterexample["params"])  # type: ignore[index]


def test_an_unbounded_output_is_refuted_with_the_value_it_reaches() -> None:
    prog = program("b.x * b.w")
    outcome = verdict(prog, Bounded(-1.0e6, 1.0e6))
    assert outcome.verdict == "counterexample"
    cex = outcome.counterexample
    assert cex is not None
    value = run_python(prog, cex["inputs"], cex["params"])
    assert value > 1.0e6 and cex["output"] == value


def test_an_undefined_output_is_not_bounded() -> None:
    prog = program("log(b.y)")
    outcome = verdict(prog, Bounded(-1.0e6, 1.0e6))
    assert outcome.verdict == "counterexample"
    assert "undefined" in outcome.message


def test_a_clamped_output_is_proved_bounded_over_the_whole_param_range() -> None:
    prog = program("clamp(p.a * b.x * b.w, -5, 5) + floor(b.y) / 4", 'PARAMS = {"a": (-3.0, 3.0)}')
    assert verdict(prog, Bounded(-8.0, 8.0)).verdict == "proved"


def test_a_monotone_output_is_proved_and_a_non_monotone_one_refuted_by_two_real_runs() -> None:
    assert verdict(program("log1p(b.w) + b.x"), Monotone("w")).verdict == "proved"
    assert verdict(program("-sqrt(b.w) + b.x"), Monotone("w", increasing=False)).verdict == "proved"
    prog = program("b.x - b.w if b.w > 5 else b.x", 'PARAMS = {"a": (0.0, 1.0)}')
    outcome = verdict(prog, Monotone("w"))
    assert outcome.verdict == "counterexample", outcome.message
    cex = outcome.counterexample
    assert cex is not None
    before = run_python(prog, cex["inputs"], cex["params"])
    after = run_python(prog, cex["inputs_after"], cex["params"])
    assert cex["inputs_after"]["w"] > cex["inputs"]["w"] and after < before
    assert {k: v for k, v in cex["inputs_after"].items() if k != "w"} == {
        k: v for k, v in cex["inputs"].items() if k != "w"
    }


def test_growth_at_a_declared_rate_is_proved_and_slower_growth_refuted() -> None:
    tuned = program("p.a * b.w + log1p(b.x)", 'PARAMS = {"a": (1.0, 3.0)}')
    assert verdict(tuned, GrowsWith("w", 1.0)).verdict == "proved"
    slow = program("0.5 * b.w + b.x")
    outcome = verdict(slow, GrowsWith("w", 1.0))
    assert outcome.verdict == "counterexample"
    cex = outcome.counterexample
    assert cex is not None
    gained = run_python(slow, cex["inputs_after"], cex["params"]) - run_python(
        slow, cex["inputs"], cex["params"]
    )
    assert gained < 1.0 * (cex["inputs_after"]["w"] - cex["inputs"]["w"])


def test_a_predicate_over_output_and_features_holds_or_has_a_counterexample() -> None:
    within = Holds("out >= 1 and out <= b.n")
    assert verdict(program("clamp(floor(b.x), 1, b.n)"), within).verdict == "proved"
    prog = program("b.n + 1")
    outcome = verdict(prog, within)
    assert outcome.verdict == "counterexample"
    cex = outcome.counterexample
    assert cex is not None
    assert run_python(prog, cex["inputs"], cex["params"]) > cex["inputs"]["n"]


def test_a_predicate_may_join_the_outputs_of_several_decision_functions() -> None:
    sigs = [Signature("u", features=tuple(BOUNDS)), Signature("r", features=tuple(BOUNDS))]
    plan = "def u(b, p):\n    return clamp(floor(b.x), 1, 8)\n\ndef r(b, p):\n    return {}\n"
    prop = Property("product", "u times r stays within n * 8", "u", Holds("u * r <= b.n * 8"))
    good = check(plan.format("max(1, floor(b.n / 8))"), sigs)
    bad = check(plan.format("b.n * 9"), sigs)
    domains = {"u": DOMAIN, "r": DOMAIN}
    assert [o.verdict for o in prove(good, domains, [prop])] == ["proved"]
    assert [o.verdict for o in prove(bad, domains, [prop])] == ["counterexample"]


ROOMY_S = 30.0
"""Seconds per property where the verdict, not the time, is under test: a 2-second budget once ran out on a
loaded CI machine (Z3 answers these in milliseconds)."""


def test_whole_number_features_let_a_plan_divide_a_head_count() -> None:
    shape = {"heads": (1.0, 64.0), "gpus": (1.0, 8.0)}
    sig = Signature("ulysses", features=tuple(shape))
    source = "def ulysses(b, p):\n    return {}\n"
    divides = Property("divides", "the degree divides the head count", "ulysses", Holds("b.heads % out == 0"))
    fits = "4 if b.heads % 4 == 0 and b.gpus >= 4 else (2 if b.heads % 2 == 0 and b.gpus >= 2 else 1)"
    whole, real = Domain(shape, integers=frozenset(shape)), Domain(shape)
    assert [
        o.verdict for o in prove(check(source.format(fits), [sig]), {"ulysses": whole}, [divides], ROOMY_S)
    ] == ["proved"]
    # over the reals a head count of 4.5 exists, and no degree divides it
    assert [
        o.verdict for o in prove(check(source.format(fits), [sig]), {"ulysses": real}, [divides], ROOMY_S)
    ] == ["counterexample"]
    [bad] = prove(check(source.format("min(b.gpus, 4)"), [sig]), {"ulysses": whole}, [divides], ROOMY_S)
    assert bad.verdict == "counterexample", bad.message
    cex = bad.counterexample
    assert cex is not None and all(v.is_integer() for v in cex["inputs"].values())
    assert cex["inputs"]["heads"] % min(cex["inputs"]["gpus"], 4) != 0


def test_declared_relations_narrow_the_domain_and_tie_features_in_two_copy_properties() -> None:
    clock = {"now": (0.0, 1.0e6), "last": (0.0, 1.0e6), "age": (0.0, 1.0e6), "hits": (0.0, 100.0)}
    sig = Signature("f", features=tuple(clock))
    src = "def f(b, p):\n    return {}\n"
    related = Domain(clock, ("age == now - last", "last <= now"))
    free = Domain(clock)
    divides = check(src.format("b.hits / (b.now - b.last - b.age + 1)"), [sig])
    assert verdict(divides, NoFault("division"), related).verdict == "proved"
    assert verdict(divides, NoFault("division"), free).verdict == "counterexample"
    # raising age moves now or last with it; without the tie no two states would differ in age alone
    assert verdict(check(src.format("b.now - b.last"), [sig]), Monotone("age"), related).verdict == "proved"
    lowers = check(src.format("b.last"), [sig])
    outcome = verdict(lowers, Monotone("age"), related)
    assert outcome.verdict == "counterexample"
    assert outcome.counterexample["inputs_after"]["hits"] == outcome.counterexample["inputs"]["hits"]  # type: ignore[index]


def test_a_property_with_no_input_to_compare_is_vacuous_not_proved() -> None:
    pinned = Domain({**BOUNDS, "w": (5.0, 5.0)})
    outcome = verdict(program("b.w"), Monotone("w"), pinned)
    assert outcome.verdict == "unknown" and "vacuous" in outcome.message


def test_a_model_that_rests_on_the_log_abstraction_is_unknown_not_a_counterexample() -> None:
    outcome = verdict(program("log(b.x + 1)"), Holds("out <= 5"))  # log(101) = 4.6
    assert outcome.verdict == "unknown", outcome.message
    assert "floats" in outcome.message and outcome.counterexample is None


HARD = (
    "(b.x * b.y * b.n - 7) ** 2 + (b.x + b.y + b.n - 5) ** 2 + (b.x * b.y + b.y * b.n + b.x * b.n - 3) ** 2"
)
HARD_DOMAIN = Domain({**BOUNDS, "x": (-100.0, 100.0), "y": (-100.0, 100.0), "n": (-100.0, 100.0)})
"""True (x, y, n would be the real roots of t**3 - 5t**2 + 3t - 7, which has one), but Z3 needs a second."""


def test_running_out_of_time_is_unknown_never_proved() -> None:
    outcome = verdict(program(HARD), Holds("out > 1e-9"), HARD_DOMAIN, seconds=0.001)
    assert outcome.verdict == "unknown"
    assert "gave up" in outcome.message


def test_the_child_process_is_killed_at_the_hard_limit_and_replaced() -> None:
    hard = program(HARD)
    props = [
        Property("slow", "", "f", Holds("out > 1e-9")),
        Property("fast", "", "f", NoFault("division")),
    ]
    with Verifier(seconds=60.0, hard_s=0.2) as verifier:
        slow, fast = verifier.verify(hard, {"f": HARD_DOMAIN}, props)
        assert slow.verdict == "unknown" and "hard limit" in slow.message and slow.seconds < 10
        assert fast.verdict == "proved"
        [again] = verifier.verify(program("1 / b.y"), {"f": DOMAIN}, props[1:])
        assert again.verdict == "counterexample"


def test_properties_that_do_not_fit_the_program_are_rejected_before_any_proof() -> None:
    with pytest.raises(ValueError, match="no feature 'z'"):
        list(prove(program("b.x"), {"f": DOMAIN}, [Property("m", "", "f", Monotone("z"))]))
    with pytest.raises(ValueError, match="no function or domain 'g'"):
        list(prove(program("b.x"), {"f": DOMAIN}, [Property("m", "", "g", NoFault("log"))]))
    with pytest.raises(ValueError, match="unknown features: q"):
        Domain(BOUNDS, ("x <= q",))


# Differential: the Z3 term, evaluated by Z3 at a point, is the function the compiler runs there.

PROGRAMS = [
    "p.w_hits * log(1 + b.x) - (b.w - b.y) / p.half + 0.5 * min(b.n, 16)",
    "clamp(b.x * b.y, -3, p.half) + max(b.n, b.x, b.y) - abs(b.y) + floor(b.x / 3) - ceil(b.y * 1.5)",
    "b.x // b.n + b.y % 3 + b.w % b.n - (-b.y) // 2",
    "(b.y > 0 and b.x) or (not b.n < 8) + (b.x if b.y <= b.n < b.x else -b.y)",
    "1 <= b.y < b.x != b.n",
    "sqrt(b.x) + b.y ** 2 + b.n ** -2 + b.x ** 1.5 + b.x ** 7 / 1e12 + exp(-b.w / 1000) + log1p(b.y + 10)",
    "s = 0.0\nfor i in range(4):\n    if b.y > i:\n        s += b.x / (i + 1)\n    else:\n        s -= i\n"
    "return s",
    "if b.x > 50:\n    return b.y * 2\nelif b.n > 30:\n    z = b.n\nelse:\n    z = -b.n\n"
    "z *= 1.5\nz **= 2\nreturn z + p.w_hits",
]
PARAMS = 'PARAMS = {"w_hits": (0.0, 8.0), "half": (1.0, 3600.0, "log")}'
_TRUE = {"log": math.log, "exp": math.exp, "sqrt": math.sqrt}


def z3_value(prog: Program, inputs: Mapping[str, float], params: Mapping[str, float]) -> float:
    """The Z3 translation at a point: constants in, each uninterpreted application replaced by its value."""
    reals = _Reals()
    run = _execute(
        prog.functions["f"],
        reals,
        {k: reals.const(v) for k, v in inputs.items()},
        {k: reals.const(v) for k, v in {**prog.defaults(), **params}.items()},
    )
    term = run.value
    for _ in range(8):  # nested applications resolve from the inside out
        pairs = []
        for (name, _), (arg, app) in reals.applications.items():
            a = z3.simplify(z3.substitute(arg, *pairs) if pairs else arg)
            if z3.is_rational_value(a) or z3.is_algebraic_value(a):
                pairs.append((app, reals.const(true_value(name, number(a)))))
        term = z3.substitute(term, *pairs) if pairs else term
    return number(z3.simplify(term))


def number(value: z3.ExprRef) -> float:
    return float((value if z3.is_rational_value(value) else value.approx(30)).as_fraction())


def true_value(name: str, x: float) -> float:
    return _TRUE[name](x) if name in _TRUE else math.pow(x, float(name.removeprefix("pow_")))


def point() -> st.SearchStrategy[dict[str, float]]:
    def within(low: float, high: float) -> st.SearchStrategy[float]:
        edges = st.sampled_from([low, high, 0.0, 1.0, 3.0, -1.0, 8.0, 16.0, 50.0])
        return st.one_of(edges.filter(lambda v: low <= v <= high), st.floats(low, high))

    return st.fixed_dictionaries({name: within(lo, hi) for name, (lo, hi) in BOUNDS.items()})


@pytest.mark.parametrize("body", PROGRAMS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inputs=point(), w_hits=st.floats(0.0, 8.0), half=st.floats(1.0, 3600.0))
def test_z3_term_float_replay_and_interval_bounds_agree_with_the_compiled_function(
    body: str, inputs: dict[str, float], w_hits: float, half: float
) -> None:
    prog = program(body, PARAMS)
    params = {"w_hits": w_hits, "half": half}
    faults = _execute(prog.functions["f"], _Floats(), inputs, {**prog.defaults(), **params})
    box = _execute(prog.functions["f"], Intervals(), BOUNDS, {"w_hits": (0.0, 8.0), "half": (1.0, 3600.0)})
    try:
        expected = run_python(prog, inputs, params)
    except (ArithmeticError, ValueError):
        assert any(f.unsafe for f in faults.faults), "the function faulted where no fault was flagged"
        assert any(f.unsafe[0] for f in box.faults), "interval bounds ruled out a fault that happens"
        return
    assert not any(f.unsafe for f in faults.faults)
    assert faults.value == expected or (math.isnan(expected) and math.isnan(faults.value))
    assert box.value[0] <= expected <= box.value[1] or not math.isfinite(expected)
    if math.isfinite(expected):
        # reals stand for doubles: each double operation rounds (and ** 1.5, exp, log, sqrt are libm's)
        assert z3_value(prog, inputs, params) == pytest.approx(expected, rel=1e-9, abs=1e-9)


@settings(max_examples=300, deadline=None)
@given(
    a=st.one_of(
        st.floats(-800.0, 800.0), st.floats(-1e12, 1e12), st.sampled_from([0.0, 1.0, -745.2, 709.78, 1e-300])
    ),
    b=st.one_of(st.floats(-800.0, 800.0), st.floats(0, 1e12), st.sampled_from([0.0, 1.0, 5e-324])),
    name=st.sampled_from(["log", "exp", "sqrt", "pow_1.5", "pow_0.25", "pow_-0.5", "pow_7.0"]),
)
def test_the_facts_about_log_exp_sqrt_and_powers_hold_for_their_doubles(
    a: float, b: float, name: str
) -> None:
    def value(x: float) -> float | None:
        try:
            if name in _TRUE:
                return _TRUE[name](x)
            return math.pow(x, float(name.removeprefix("pow_")))
        except (ValueError, OverflowError, ZeroDivisionError):
            return None  # outside the function's domain every fact is guarded off or vacuous

    ya, yb = value(a), value(b)
    reals = _Reals()
    facts = []
    if ya is not None:
        facts += _facts(name, reals.const(a), reals.const(ya))
    if ya is not None and yb is not None:
        facts += _monotone(name, reals.const(a), reals.const(ya), reals.const(b), reals.const(yb))
    for fact in facts:
        assert z3.is_true(z3.simplify(fact)), f"{fact} at {a}, {b}"
