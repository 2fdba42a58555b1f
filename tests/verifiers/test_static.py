"""The restricted-Python subset of candidates, as verifiers.static enforces it."""

from __future__ import annotations

import ast
import pickle

import pytest

from verifiers.program import ParamRange, Signature
from verifiers.static import StaticError, Violation, check, render

SIG = Signature("priority", features=("now", "last_access", "hits", "depth", "age", "tokens"))
BUDGET = Signature("token_budget", features=("queued", "free_blocks"), state_arg="s", params_arg="q")

DESIGN_EXAMPLE = '''"""Keep deep, recently extended prefixes; age out one-off tails."""
PARAMS = {"w_hits": (0.0, 8.0), "half_life_s": (1.0, 3600.0, "log")}

def priority(b, p):
    age = b.now - b.last_access
    return p.w_hits * log(1 + b.hits) - age / p.half_life_s + 0.5 * min(b.depth, 16)
'''


def violations(source: str, signatures: tuple[Signature, ...] = (SIG,)) -> list[tuple[int, str]]:
    """The (line, rule) of every violation the checker reports, in order."""
    with pytest.raises(StaticError) as info:
        check(source, signatures)
    return [(v.line, v.rule) for v in info.value.violations]


def body(*lines: str) -> str:
    """A candidate whose `priority` body is `lines`: body line k (from 0) is source line 4 + k."""
    return 'PARAMS = {"w": (0.0, 1.0)}\n\ndef priority(b, p):\n' + "".join(f"    {line}\n" for line in lines)


# Accepted programs


def test_accepts_the_design_example() -> None:
    program = check(DESIGN_EXAMPLE, [SIG])
    assert program.docstring == "Keep deep, recently extended prefixes; age out one-off tails."
    assert program.params == (
        ParamRange("w_hits", 0.0, 8.0),
        ParamRange("half_life_s", 1.0, 3600.0, log=True),
    )
    assert list(program.functions) == ["priority"]
    assert program.source == DESIGN_EXAMPLE


def test_accepts_branches_locals_loops_and_every_math_function() -> None:
    source = '''"""S3-FIFO flavoured: protect blocks seen twice, score the rest by recency and cost."""
PARAMS = {"w_age": (0.01, 100.0, "log", 1.0), "bonus": (-1.0, 1.0), "cap": (1, 64, 16)}

def priority(b, p):
    """Lowest is evicted first."""
    age = max(b.now - b.last_access, 0.0)
    if b.hits >= 2 and not b.age < 0:
        tier = 2
    elif b.hits == 1 or b.depth > 8:
        tier = 1
    else:
        return -age * p.w_age
    decay = 0
    for i in range(4):
        decay += exp(-age / (i + 1)) / 4
        for k in range(2):
            decay -= abs(k - i) * 0.001
    cost = sqrt(b.tokens) + log1p(b.depth) + floor(b.depth / 2) + ceil(0.5) + b.tokens ** 1.5
    score = tier * 10 + clamp(cost, 0, p.cap) + decay if 0 < b.depth <= 64 else p.bonus
    score *= 1 - 0.5 % 3 // 1
    return min(score, 1e9, p.cap * 100) + 0 * -2
'''
    program = check(source, [SIG])
    assert program.params[2] == ParamRange("cap", 1.0, 64.0, default=16.0)
    assert program.docstring.startswith("S3-FIFO")


def test_accepts_several_decision_functions_with_their_own_argument_names() -> None:
    source = (
        "def priority(b, p):\n    return b.hits\n\n"
        "def token_budget(s, q):\n    return min(s.queued, s.free_blocks * 16)\n"
    )
    program = check(source, [SIG, BUDGET])
    assert list(program.functions) == ["priority", "token_budget"]
    assert program.params == ()
    assert program.docstring == ""


def test_an_if_whose_branches_both_assign_defines_the_local() -> None:
    check(body("if b.hits > 1:", "    x = 1", "else:", "    x = 2", "return x"), [SIG])


def test_a_branch_that_returns_counts_as_assigning_everything() -> None:
    check(body("if b.hits > 1:", "    return 0", "else:", "    x = 2", "return x"), [SIG])


def test_a_loop_body_runs_at_least_once_so_its_assignments_count() -> None:
    check(body("for i in range(3):", "    x = i", "return x"), [SIG])


# Rejected constructs inside a decision function: body line k is source line 4 + k.

REJECTED_IN_BODY = {
    "while": (["while b.hits > 0:", "    pass", "return 0"], [(4, "no-while")]),
    "for-over-non-range": (["for x in b.hits:", "    pass", "return 0"], [(4, "no-loops")]),
    "for-range-variable": (["for i in range(b.depth):", "    pass", "return 0"], [(4, "no-loops")]),
    "for-range-two-args": (["for i in range(1, 3):", "    pass", "return 0"], [(4, "no-loops")]),
    "for-range-17": (["for i in range(17):", "    pass", "return 0"], [(4, "no-loops")]),
    "for-range-0": (["for i in range(0):", "    pass", "return 0"], [(4, "no-loops")]),
    "for-tuple-target": (["for i, k in range(3):", "    pass", "return 0"], [(4, "no-loops")]),
    "for-else": (["for i in range(2):", "    pass", "else:", "    pass", "return 0"], [(4, "no-loops")]),
    "nested-loops-too-long": (
        [
            "for i in range(16):",
            "    for k in range(16):",
            "        for m in range(2):",
            "            pass",
            "return 0",
        ],
        [(6, "no-loops")],
    ),
    "break": (["for i in range(2):", "    break", "return 0"], [(5, "no-loops")]),
    "continue": (["for i in range(2):", "    continue", "return 0"], [(5, "no-loops")]),
    "assign-loop-variable": (["for i in range(2):", "    i = 1", "return 0"], [(5, "assignment")]),
    "loop-variable-after-loop": (["for i in range(2):", "    pass", "return i"], [(6, "unassigned-name")]),
    "shadow-enclosing-loop": (
        ["for i in range(2):", "    for i in range(2):", "        pass", "return 0"],
        [(5, "assignment")],
    ),
    "import": (["import math", "return 0"], [(4, "no-imports")]),
    "from-import": (["from math import log", "return 0"], [(4, "no-imports")]),
    "string": (['x = "fast"', "return 0"], [(4, "no-strings")]),
    "f-string": (['x = f"{b.hits}"', "return 0"], [(4, "no-strings")]),
    "late-docstring": (["x = 1", '"""not first"""', "return x"], [(5, "no-strings")]),
    "lambda": (["f = lambda: 1", "return 0"], [(4, "no-lambda")]),
    "list-comprehension": (["x = [h for h in range(3)]", "return 0"], [(4, "no-comprehension")]),
    "generator": (["x = (h for h in range(3))", "return 0"], [(4, "no-comprehension")]),
    "dict-comprehension": (["x = {h: h for h in range(3)}", "return 0"], [(4, "no-comprehension")]),
    "unknown-name": (["return hits"], [(4, "unknown-name")]),
    "builtin-name": (["return len"], [(4, "unknown-name")]),
    "maybe-unassigned": (["if b.hits > 1:", "    x = 1", "return x"], [(6, "unassigned-name")]),
    "read-before-assign": (["y = x", "x = 1", "return y"], [(4, "unassigned-name")]),
    "augment-unassigned": (["x += 1", "return 0"], [(4, "unassigned-name")]),
    "unknown-feature": (["return b.hit"], [(4, "unknown-feature")]),
    "unknown-param": (["return p.weight"], [(4, "unknown-param")]),
    "attribute-chain": (["return b.hits.real"], [(4, "attribute")]),
    "attribute-on-local": (["x = 1", "return x.real"], [(5, "attribute")]),
    "bare-state-argument": (["return b"], [(4, "attribute")]),
    "other-function": (["return round(b.hits)"], [(4, "call")]),
    "method-call": (["return b.hits.hex()"], [(4, "call")]),
    "module-function": (["return math.log(b.hits)"], [(4, "call")]),
    "keyword-argument": (["return min(b.hits, b.depth, key=abs)"], [(4, "call")]),
    "star-argument": (["return min(*b.hits)"], [(4, "call")]),
    "too-many-arguments": (["return log(b.hits, 2)"], [(4, "call")]),
    "too-few-arguments": (["return min(b.hits)"], [(4, "call")]),
    "clamp-arity": (["return clamp(b.hits, 0)"], [(4, "call")]),
    "function-as-value": (["x = log", "return 0"], [(4, "call")]),
    "range-outside-for": (["return range(3)"], [(4, "call")]),
    "power-by-variable": (["return b.hits ** p.w"], [(4, "power")]),
    "power-by-expression": (["return b.hits ** (1 + 1)"], [(4, "power")]),
    "augmented-power-by-variable": (["x = 2", "x **= b.hits", "return x"], [(5, "power")]),
    "bitwise": (["return b.hits & 1"], [(4, "expression")]),
    "invert": (["return ~b.hits"], [(4, "expression")]),
    "matmul": (["return b.hits @ b.depth"], [(4, "expression")]),
    "is": (["return b.hits is b.depth"], [(4, "expression")]),
    "in": (["return b.hits in b.depth"], [(4, "expression")]),
    "subscript": (["return b.hits[0]"], [(4, "expression")]),
    "yield": (["x = yield 1", "return 0"], [(4, "expression")]),
    "await": (["x = await b.hits", "return 0"], [(4, "expression")]),
    "walrus": (["return (x := 1)"], [(4, "assignment")]),
    "tuple": (["return (1, 2)"], [(4, "literal")]),
    "list": (["return [1]"], [(4, "literal")]),
    "dict": (["return {}"], [(4, "literal")]),
    "true": (["return True"], [(4, "literal")]),
    "none": (["return None"], [(4, "literal")]),
    "complex": (["return 1j"], [(4, "literal")]),
    "bytes": (['return b"x"'], [(4, "no-strings")]),
    "ellipsis": (["return ..."], [(4, "literal")]),
    "inexact-integer": (["return 9007199254740993"], [(4, "literal")]),
    "infinite-float": (["return 1e999"], [(4, "literal")]),
    "tuple-assignment": (["x, y = 1, 2", "return 0"], [(4, "assignment")]),
    "chained-assignment": (["x = y = 1", "return 0"], [(4, "assignment")]),
    "annotated-assignment": (["x: float = 1", "return 0"], [(4, "assignment")]),
    "attribute-assignment": (["b.hits = 1", "return 0"], [(4, "assignment")]),
    "assign-argument": (["p = 1", "return 0"], [(4, "assignment")]),
    "assign-math-function": (["min = 1", "return 0"], [(4, "assignment")]),
    "assign-function-name": (["priority = 1", "return 0"], [(4, "assignment")]),
    "reserved-name": (["__pow = 1", "return 0"], [(4, "assignment")]),
    "global": (["global x", "return 0"], [(4, "statement")]),
    "nonlocal": (["nonlocal x", "return 0"], [(4, "statement")]),
    "try": (["try:", "    x = 1", "except Exception:", "    pass", "return 0"], [(4, "statement")]),
    "with": (["with b:", "    pass", "return 0"], [(4, "statement")]),
    "raise": (["raise ValueError", "return 0"], [(4, "statement")]),
    "assert": (["assert b.hits", "return 0"], [(4, "statement")]),
    "del": (["x = 1", "del x", "return 0"], [(5, "statement")]),
    "match": (["match b.hits:", "    case 1:", "        pass", "return 0"], [(4, "statement")]),
    "nested-def": (["def g(b, p):", "    return 0", "return 0"], [(4, "statement")]),
    "nested-class": (["class A:", "    pass", "return 0"], [(4, "statement")]),
    "bare-expression": (["b.hits + 1", "return 0"], [(4, "statement")]),
    "unreachable-code": (["return 1", "x = 2"], [(5, "statement")]),
    "bare-return": (["return"], [(4, "missing-return")]),
    "no-return-on-some-path": (["if b.hits > 1:", "    return 1"], [(3, "missing-return")]),
    "docstring-only": (['"""Nothing."""'], [(3, "missing-return")]),
}


@pytest.mark.parametrize(("lines", "expected"), REJECTED_IN_BODY.values(), ids=REJECTED_IN_BODY.keys())
def test_rejects_in_a_function_body(lines: list[str], expected: list[tuple[int, str]]) -> None:
    assert violations(body(*lines)) == expected


# Rejected module-level constructs

FUNCTION = "def priority(b, p):\n    return 0\n"

REJECTED_AT_MODULE_LEVEL = {
    "import": ("import math\n" + FUNCTION, [(1, "no-imports")]),
    "other-assignment": ("X = 1\n" + FUNCTION, [(1, "module-level")]),
    "augmented-assignment": ("PARAMS += 1\n" + FUNCTION, [(1, "module-level")]),
    "second-string": ('"""Doc."""\n"""More."""\n' + FUNCTION, [(2, "module-level")]),
    "expression": ("print(1)\n" + FUNCTION, [(1, "module-level")]),
    "class": ("class A:\n    pass\n" + FUNCTION, [(1, "module-level")]),
    "loop": ("for i in range(2):\n    pass\n" + FUNCTION, [(1, "module-level")]),
    "if": ("if 1:\n    pass\n" + FUNCTION, [(1, "module-level")]),
    "async-function": (
        "async def priority(b, p):\n    return 0\n",
        [(1, "module-level"), (1, "missing-function")],
    ),
    "helper-function": (FUNCTION + "def helper(b, p):\n    return 0\n", [(3, "unknown-function")]),
    "duplicate-function": (FUNCTION + FUNCTION, [(3, "module-level")]),
    "missing-function": ('"""Nothing here."""\n', [(1, "missing-function")]),
    "syntax-error": ("def priority(b, p):\n    return (\n", [(2, "syntax")]),
    "duplicate-params": (
        'PARAMS = {"w": (0, 1)}\nPARAMS = {"v": (0, 1)}\n' + FUNCTION,
        [(2, "module-level")],
    ),
}


@pytest.mark.parametrize(
    ("source", "expected"), REJECTED_AT_MODULE_LEVEL.values(), ids=REJECTED_AT_MODULE_LEVEL.keys()
)
def test_rejects_at_module_level(source: str, expected: list[tuple[int, str]]) -> None:
    assert violations(source) == expected


BAD_SIGNATURES = {
    "extra-argument": "def priority(b, p, q):",
    "missing-argument": "def priority(b):",
    "renamed-arguments": "def priority(block, params):",
    "swapped-arguments": "def priority(p, b):",
    "default": "def priority(b, p=None):",
    "annotation": "def priority(b: float, p):",
    "return-annotation": "def priority(b, p) -> float:",
    "star-args": "def priority(b, p, *rest):",
    "keyword-only": "def priority(b, *, p):",
    "positional-only": "def priority(b, p, /):",
}


@pytest.mark.parametrize("header", BAD_SIGNATURES.values(), ids=BAD_SIGNATURES.keys())
def test_rejects_a_signature_other_than_the_targets(header: str) -> None:
    assert violations(f"{header}\n    return 0\n") == [(1, "signature")]


def test_rejects_decorators_on_the_def_line() -> None:
    assert violations("@staticmethod\ndef priority(b, p):\n    return 0\n") == [(2, "signature")]


# PARAMS

VALID_PARAMS = {
    "range": ("(0.0, 8.0)", ParamRange("x", 0.0, 8.0)),
    "integers": ("(1, 64)", ParamRange("x", 1.0, 64.0)),
    "negative": ("(-1.5, -0.5)", ParamRange("x", -1.5, -0.5)),
    "log": ('(1.0, 3600.0, "log")', ParamRange("x", 1.0, 3600.0, log=True)),
    "default": ("(0, 10, 3)", ParamRange("x", 0.0, 10.0, default=3.0)),
    "default-at-bound": ("(0.0, 1.0, 1.0)", ParamRange("x", 0.0, 1.0, default=1.0)),
    "log-default": ('(1e-3, 1.0, "log", 0.01)', ParamRange("x", 1e-3, 1.0, log=True, default=0.01)),
}


@pytest.mark.parametrize(("entry", "expected"), VALID_PARAMS.values(), ids=VALID_PARAMS.keys())
def test_params_formats(entry: str, expected: ParamRange) -> None:
    program = check(f'PARAMS = {{"x": {entry}}}\n' + FUNCTION, [SIG])
    assert program.params == (expected,)


def test_params_keep_their_declared_order_and_may_be_empty() -> None:
    program = check('PARAMS = {"b": (0, 1), "a": (0, 1)}\n' + FUNCTION, [SIG])
    assert program.param_names() == ("b", "a")
    assert check("PARAMS = {}\n" + FUNCTION, [SIG]).params == ()


BAD_PARAMS = {
    "not-a-dict": "PARAMS = dict(x=(0, 1))",
    "list-entry": 'PARAMS = {"x": [0.0, 1.0]}',
    "one-bound": 'PARAMS = {"x": (1.0,)}',
    "five-items": 'PARAMS = {"x": (0, 1, "log", 0.5, 0.5)}',
    "empty-range": 'PARAMS = {"x": (1.0, 1.0)}',
    "reversed-range": 'PARAMS = {"x": (1.0, 0.0)}',
    "log-from-zero": 'PARAMS = {"x": (0.0, 1.0, "log")}',
    "default-outside": 'PARAMS = {"x": (0.0, 1.0, 2.0)}',
    "log-default-outside": 'PARAMS = {"x": (1.0, 2.0, "log", 3.0)}',
    "other-flag": 'PARAMS = {"x": (0.0, 1.0, "linear")}',
    "flag-after-default": 'PARAMS = {"x": (1.0, 2.0, 1.5, "log")}',
    "string-bound": 'PARAMS = {"x": ("0", 1.0)}',
    "infinite-bound": 'PARAMS = {"x": (0.0, 1e999)}',
    "expression-bound": 'PARAMS = {"x": (0.0, 2 * 3)}',
    "bool-bound": 'PARAMS = {"x": (False, True)}',
    "number-key": "PARAMS = {1: (0, 1)}",
    "unpacked": 'PARAMS = {**{"x": (0, 1)}}',
    "not-an-identifier": 'PARAMS = {"half life": (0, 1)}',
    "keyword-name": 'PARAMS = {"lambda": (0, 1)}',
    "private-name": 'PARAMS = {"_x": (0, 1)}',
    "duplicate-name": 'PARAMS = {"x": (0, 1), "x": (0, 2)}',
}


@pytest.mark.parametrize("line", BAD_PARAMS.values(), ids=BAD_PARAMS.keys())
def test_rejects_bad_params(line: str) -> None:
    assert violations(line + "\n" + FUNCTION) == [(1, "params-format")]


def test_a_badly_declared_param_is_still_known_to_the_function() -> None:
    source = 'PARAMS = {"x": (1.0, 0.0)}\n\ndef priority(b, p):\n    return p.x\n'
    assert violations(source) == [(1, "params-format")]


# How violations are reported


def test_collects_every_violation_in_line_order_and_summarises_in_one_line() -> None:
    source = body("while b.hits:", "    pass", "x = b.nope", "return y")
    with pytest.raises(StaticError) as info:
        check(source, [SIG])
    error = info.value
    assert isinstance(error, ValueError)
    assert [(v.line, v.rule) for v in error.violations] == [
        (4, "no-while"),
        (6, "unknown-feature"),
        (7, "unknown-name"),
    ]
    assert (
        str(error)
        == "line 4: [no-while] 'while' loops are not allowed; use 'for i in range(N)', N <= 16 (+2 more)"
    )
    assert "\n" not in str(error)


def test_a_single_violation_has_no_count() -> None:
    with pytest.raises(StaticError) as info:
        check(body("return b.hitz"), [SIG])
    assert str(info.value) == "line 4: [unknown-feature] 'b' has no feature 'hitz'; did you mean 'hits'?"


def test_violations_are_records_and_the_error_pickles() -> None:
    error = StaticError([Violation(3, "no-loops", "'while' loops are not allowed")])
    copy = pickle.loads(pickle.dumps(error))
    assert copy.violations == error.violations
    assert str(copy) == "line 3: [no-loops] 'while' loops are not allowed"


def test_a_deeply_nested_program_is_rejected_not_crashed() -> None:
    source = body("return " + "+".join(["b.hits"] * 20000))
    assert violations(source) == [(1, "syntax")]


# render: how tuned heuristics are written out


def same_program(source_a: str, source_b: str) -> bool:
    a, b = check(source_a, [SIG]), check(source_b, [SIG])
    return a.docstring == b.docstring and all(
        ast.dump(a.functions[n]) == ast.dump(b.functions[n]) for n in a.functions
    )


def test_render_writes_tuned_values_as_defaults_and_keeps_ranges() -> None:
    program = check(DESIGN_EXAMPLE, [SIG])
    rendered = render(program, {"w_hits": 2.5, "half_life_s": 120.0})
    again = check(rendered, [SIG])
    assert again.params == (
        ParamRange("w_hits", 0.0, 8.0, default=2.5),
        ParamRange("half_life_s", 1.0, 3600.0, log=True, default=120.0),
    )
    assert again.defaults() == {"w_hits": 2.5, "half_life_s": 120.0}
    assert same_program(DESIGN_EXAMPLE, rendered)
    assert render(again) == rendered


def test_render_without_values_writes_the_initial_defaults() -> None:
    program = check(DESIGN_EXAMPLE, [SIG])
    again = check(render(program), [SIG])
    assert again.defaults() == pytest.approx(program.defaults())
    assert all(p.default is not None for p in again.params)


def test_render_fills_unnamed_params_with_their_current_default() -> None:
    program = check('PARAMS = {"a": (0, 4, 1), "c": (0, 4)}\n' + FUNCTION, [SIG])
    assert check(render(program, {"c": 3.0}), [SIG]).defaults() == {"a": 1.0, "c": 3.0}


def test_render_leaves_everything_but_params_untouched() -> None:
    source = (
        '"""Doc."""\n'
        "PARAMS = {\n"
        '    "a": (0.0, 1.0),  # weight\n'
        "}  # tuned by hand\n"
        "\n"
        "def priority(b, p):\n"
        "    return p.a * b.hits  # score\n"
    )
    rendered = render(check(source, [SIG]), {"a": 0.25})
    assert rendered == (
        '"""Doc."""\n'
        "PARAMS = {\n"
        '    "a": (0.0, 1.0, 0.25),\n'
        "}  # tuned by hand\n"
        "\n"
        "def priority(b, p):\n"
        "    return p.a * b.hits  # score\n"
    )


def test_render_of_a_program_without_params_is_its_source() -> None:
    program = check(FUNCTION, [SIG])
    assert render(program) == FUNCTION


def test_render_rejects_unknown_names_and_values_outside_the_range() -> None:
    program = check(DESIGN_EXAMPLE, [SIG])
    with pytest.raises(ValueError, match="unknown parameters: nope"):
        render(program, {"nope": 1.0})
    with pytest.raises(ValueError, match="outside"):
        render(program, {"w_hits": 9.0})
    with pytest.raises(ValueError, match="outside"):
        render(program, {"w_hits": float("nan")})
