"""One checked AST, several back ends: plain Python for reading, numba for the simulators' hot loops.

Python semantics raise on x/0, log of a non-positive, overflow; numba semantics (numpy error model) return
inf or nan instead and never raise.
"""

from __future__ import annotations

import ast
import copy
import math
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any, Generic, TypeVar

import numba
import numpy as np
from numba import types
from numba.core.dispatcher import Dispatcher

from verifiers.program import Program, is_docstring
from verifiers.static import BINARY_OPS, COMPARE_OPS, RESERVED_PREFIX, UNARY_OPS, number

SIGNATURE = types.float64(types.float64[:, ::1], types.int64, types.float64[::1])
FUNCTION_TYPE = types.FunctionType(SIGNATURE)

T = TypeVar("T")


def _floor(x: float) -> float:
    return float(math.floor(x))


def _ceil(x: float) -> float:
    return float(math.ceil(x))


def _clamp(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)


PYTHON_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "abs": abs,
    "log": math.log,
    "log1p": math.log1p,
    "exp": math.exp,
    "sqrt": math.sqrt,
    "floor": _floor,
    "ceil": _ceil,
    "clamp": _clamp,
}
# `**` runs as math.pow, which raises where `**` would turn complex, as every other math call does.
_POW = RESERVED_PREFIX + "pow"


@numba.njit(cache=False)
def _min2(a: float, b: float) -> float:
    return b if b < a else a  # Python's min: the first of equals, and a NaN first stays


@numba.njit(cache=False)
def _max2(a: float, b: float) -> float:
    return b if b > a else a


@numba.njit(cache=False)
def _pow(a: float, b: float) -> float:
    return a**b  # a call, so CPython cannot fold a constant power like (-1.0) ** 0.5 into a complex


@numba.njit(cache=False)
def _and(a: float, b: float) -> float:
    return b if a != 0.0 else a


@numba.njit(cache=False)
def _or(a: float, b: float) -> float:
    return a if a != 0.0 else b


_NUMBA_GLOBALS: dict[str, Any] = {
    "np": np,
    "_min2": _min2,
    "_max2": _max2,
    "_pow": _pow,
    "_and": _and,
    "_or": _or,
}


class ExprVisitor(Generic[T]):
    """Folds a checked expression bottom-up; a back end says what each allowed node becomes.

    Expressions come from `unroll`, so every name is a local: loop variables are already numbers.
    """

    def __init__(self, fn: ast.FunctionDef) -> None:
        self.state_arg = fn.args.args[0].arg
        self.params_arg = fn.args.args[1].arg

    def visit(self, node: ast.expr) -> T:
        match node:
            case ast.Constant(value=int() | float() as value):
                return self.number(float(value))
            case ast.Name(id=name):
                return self.local(name)
            case ast.Attribute(value=ast.Name(id=arg), attr=attr) if arg == self.state_arg:
                return self.feature(attr)
            case ast.Attribute(value=ast.Name(id=arg), attr=attr) if arg == self.params_arg:
                return self.param(attr)
            case ast.BinOp(left=left, op=ast.Pow(), right=right) if (exponent := number(right)) is not None:
                return self.power(self.visit(left), exponent)
            case ast.BinOp(left=left, op=op, right=right):
                return self.binary(BINARY_OPS[type(op)], self.visit(left), self.visit(right))
            case ast.UnaryOp(op=op, operand=operand):
                return self.unary(UNARY_OPS[type(op)], self.visit(operand))
            case ast.Compare(left=left, ops=ops, comparators=rest):
                pairs = [(COMPARE_OPS[type(op)], self.visit(r)) for op, r in zip(ops, rest, strict=True)]
                return self.compare(self.visit(left), pairs)
            case ast.BoolOp(op=op, values=values):
                return self.boolean(
                    "and" if isinstance(op, ast.And) else "or", [self.visit(v) for v in values]
                )
            case ast.IfExp(test=test, body=body, orelse=orelse):
                return self.choice(self.visit(test), self.visit(body), self.visit(orelse))
            case ast.Call(func=ast.Name(id=name), args=args):
                return self.call(name, [self.visit(a) for a in args])
        raise TypeError(f"not a checked expression: {ast.unparse(node)}")

    def number(self, value: float) -> T:
        raise NotImplementedError

    def local(self, name: str) -> T:
        raise NotImplementedError

    def feature(self, name: str) -> T:
        raise NotImplementedError

    def param(self, name: str) -> T:
        raise NotImplementedError

    def binary(self, op: str, left: T, right: T) -> T:
        raise NotImplementedError

    def power(self, base: T, exponent: float) -> T:
        raise NotImplementedError

    def unary(self, op: str, operand: T) -> T:
        raise NotImplementedError

    def compare(self, left: T, pairs: list[tuple[str, T]]) -> T:
        raise NotImplementedError

    def boolean(self, op: str, values: list[T]) -> T:
        raise NotImplementedError

    def choice(self, test: T, body: T, orelse: T) -> T:
        raise NotImplementedError

    def call(self, name: str, args: list[T]) -> T:
        raise NotImplementedError


def unroll(fn: ast.FunctionDef) -> list[ast.stmt]:
    """The body without its docstring and with every range loop expanded, loop variables made literals."""
    body = fn.body[1:] if is_docstring(fn.body[0]) else fn.body
    return _unroll(body)


def _unroll(stmts: list[ast.stmt]) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for stmt in stmts:
        match stmt:
            case ast.For(target=ast.Name(id=var), iter=ast.Call(args=[ast.Constant(value=int() as count)])):
                for i in range(count):
                    copies = [_Substitute(var, float(i)).visit(copy.deepcopy(s)) for s in stmt.body]
                    out.extend(_unroll(copies))
            case ast.If(body=body, orelse=orelse):
                branch = copy.copy(stmt)
                branch.body, branch.orelse = _unroll(body), _unroll(orelse)
                out.append(branch)
            case _:
                out.append(stmt)
    return out


class _Substitute(ast.NodeTransformer):
    """Replaces reads of one loop variable by its value in one unrolled iteration."""

    def __init__(self, name: str, value: float) -> None:
        self.name = name
        self.value = value

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if node.id == self.name:
            return ast.copy_location(ast.Constant(self.value), node)
        return node


def to_python(program: Program, name: str) -> Callable[[Mapping[str, float], Mapping[str, float]], float]:
    """The function as plain Python over feature and parameter mappings (missing params take defaults)."""
    fn = _function(program, name)
    tree = ast.fix_missing_locations(
        ast.Module(body=[_PowerToCall().visit(copy.deepcopy(fn))], type_ignores=[])
    )
    namespace: dict[str, Any] = {"__builtins__": {}, **PYTHON_FUNCTIONS, "range": range, _POW: math.pow}
    exec(compile(tree, f"<candidate {name}>", "exec"), namespace)
    compiled = namespace[name]
    defaults = program.defaults()

    def run(state: Mapping[str, float], params: Mapping[str, float]) -> float:
        values = {**defaults, **params}
        features = SimpleNamespace(**{k: float(v) for k, v in state.items()})
        return float(compiled(features, SimpleNamespace(**{k: float(v) for k, v in values.items()})))

    return run


PLAIN_PRELUDE = f"""from math import exp, log, log1p, sqrt
from math import pow as {_POW}


def floor(x):
    return float(math.floor(x))


def ceil(x):
    return float(math.ceil(x))


def clamp(x, lo, hi):
    return min(max(x, lo), hi)
"""
"""What `plain_source` functions call besides Python's min, max and abs; it needs `import math` above it."""


def plain_source(program: Program, name: str) -> str:
    """The function as standalone Python source over PLAIN_PRELUDE: the semantics of `to_python` (math
    calls raise on a bad domain, `**` is math.pow), so a module outside Crucible can run it as checked."""
    fn = ast.fix_missing_locations(_PowerToCall().visit(copy.deepcopy(_function(program, name))))
    return ast.unparse(fn) + "\n"


class _PowerToCall(ast.NodeTransformer):
    """Turns `a ** k` into math.pow(a, k), so a negative base with a fractional exponent raises."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        self.generic_visit(node)
        if not isinstance(node.op, ast.Pow):
            return node
        return ast.copy_location(ast.Call(ast.Name(_POW, ast.Load()), [node.left, node.right], []), node)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.stmt:
        self.generic_visit(node)
        if not isinstance(node.op, ast.Pow) or not isinstance(node.target, ast.Name):
            return node
        power = ast.Call(ast.Name(_POW, ast.Load()), [ast.Name(node.target.id, ast.Load()), node.value], [])
        return ast.copy_location(ast.Assign([ast.Name(node.target.id, ast.Store())], power), node)


def to_source(program: Program, name: str, columns: Mapping[str, int]) -> str:
    """The numba source of a function `f(X, j, P)`: feature f is X[j, columns[f]], param k is P[k]."""
    fn = _function(program, name)
    expr = _NumbaExpr(fn, columns, {p: k for k, p in enumerate(program.param_names())})
    missing = sorted(
        {
            n.attr
            for n in ast.walk(fn)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == expr.state_arg
        }
        - set(columns)
    )
    if missing:
        raise ValueError(f"no column for features: {', '.join(missing)}")
    return "\n".join([f"def {name}(X, j, P):", *_emit(unroll(fn), expr, 1)]) + "\n"


def to_numba(program: Program, name: str, columns: Mapping[str, int]) -> Dispatcher:
    """The function compiled with numba to SIGNATURE, so simulators can call it as a FUNCTION_TYPE value."""
    namespace = dict(_NUMBA_GLOBALS)
    exec(compile(to_source(program, name, columns), f"<candidate {name}>", "exec"), namespace)
    return numba.njit(SIGNATURE, error_model="numpy", cache=False)(namespace[name])


def param_vector(program: Program, params: Mapping[str, float]) -> np.ndarray:
    """The P argument of a compiled function: values in PARAMS order, defaults where none is given."""
    values = {**program.defaults(), **params}
    return np.array([values[n] for n in program.param_names()], dtype=np.float64)


def _function(program: Program, name: str) -> ast.FunctionDef:
    if name not in program.functions:
        raise ValueError(f"the program has no function '{name}' (it has: {', '.join(program.functions)})")
    return program.functions[name]


def _emit(stmts: list[ast.stmt], expr: _NumbaExpr, depth: int) -> list[str]:
    pad = "    " * depth
    lines: list[str] = []
    for stmt in stmts:
        match stmt:
            case ast.Assign(targets=[ast.Name(id=name)], value=value):
                lines.append(f"{pad}{expr.local(name)} = {expr.visit(value)}")
            case ast.AugAssign(target=ast.Name(id=name), op=op, value=value):
                update = ast.BinOp(ast.Name(name, ast.Load()), op, value)
                lines.append(f"{pad}{expr.local(name)} = {expr.visit(update)}")
            case ast.If(test=test, body=body, orelse=orelse):
                lines.append(f"{pad}if {expr.visit(test)} != 0.0:")
                lines.extend(_emit(body, expr, depth + 1))
                if orelse:
                    lines.append(f"{pad}else:")
                    lines.extend(_emit(orelse, expr, depth + 1))
            case ast.Return(value=ast.expr() as value):
                lines.append(f"{pad}return {expr.visit(value)}")
            case ast.Pass():
                lines.append(f"{pad}pass")
            case _:
                raise TypeError(f"not a checked statement: {ast.unparse(stmt)}")
    return lines


class _NumbaExpr(ExprVisitor[str]):
    """Every value a float64: truth is != 0.0, comparisons give 1.0 or 0.0, locals get a `v_` prefix."""

    def __init__(self, fn: ast.FunctionDef, columns: Mapping[str, int], params: Mapping[str, int]) -> None:
        super().__init__(fn)
        self.columns = columns
        self.params = params

    def number(self, value: float) -> str:
        return f"({value!r})"

    def local(self, name: str) -> str:
        return f"v_{name}"

    def feature(self, name: str) -> str:
        return f"X[j, {self.columns[name]}]"

    def param(self, name: str) -> str:
        return f"P[{self.params[name]}]"

    def binary(self, op: str, left: str, right: str) -> str:
        return f"({left} {op} {right})"

    def power(self, base: str, exponent: float) -> str:
        return f"_pow({base}, {exponent!r})"

    def unary(self, op: str, operand: str) -> str:
        if op == "not":
            return f"(1.0 if {operand} == 0.0 else 0.0)"
        return f"({op}{operand})"

    def compare(self, left: str, pairs: list[tuple[str, str]]) -> str:
        chain = " ".join(f"{op} {right}" for op, right in pairs)
        return f"(1.0 if {left} {chain} else 0.0)"

    def boolean(self, op: str, values: list[str]) -> str:
        folded = values[-1]
        for value in reversed(values[:-1]):
            folded = f"_{op}({value}, {folded})"
        return folded

    def choice(self, test: str, body: str, orelse: str) -> str:
        return f"({body} if {test} != 0.0 else {orelse})"

    def call(self, name: str, args: list[str]) -> str:
        if name in ("min", "max"):
            folded = args[0]
            for arg in args[1:]:
                folded = f"_{name}2({folded}, {arg})"
            return folded
        if name == "clamp":
            x, lo, hi = args
            return f"_min2(_max2({x}, {lo}), {hi})"
        if name == "abs":
            return f"abs({args[0]})"
        return f"np.{name}({args[0]})"
