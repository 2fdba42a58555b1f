"""Static check of candidate source: the restricted-Python subset, every breach named by line and rule."""

from __future__ import annotations

import ast
import difflib
import keyword
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from verifiers.program import ParamRange, Program, Signature, is_docstring

# The math functions a candidate may call, with their (fewest, most) positional arguments.
CALLS: dict[str, tuple[int, int | None]] = {
    "min": (2, None),
    "max": (2, None),
    "abs": (1, 1),
    "log": (1, 1),
    "log1p": (1, 1),
    "exp": (1, 1),
    "sqrt": (1, 1),
    "floor": (1, 1),
    "ceil": (1, 1),
    "clamp": (3, 3),
}
BINARY_OPS: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
}
UNARY_OPS: dict[type[ast.unaryop], str] = {ast.USub: "-", ast.UAdd: "+", ast.Not: "not"}
COMPARE_OPS: dict[type[ast.cmpop], str] = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
}
MAX_RANGE = 16  # iterations of one `for` loop
MAX_UNROLLED = 256  # iterations of nested loops together, since back ends unroll them
MAX_EXACT_INT = 2**53  # integer literals beyond this are not exact as float64
RESERVED_PREFIX = "__"  # back ends name their helpers so; candidates may not

_FORBIDDEN_OPS: dict[type[ast.AST], str] = {
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.MatMult: "@",
    ast.Invert: "~",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
}
_KEYWORDS: dict[type[ast.stmt], str] = {
    ast.Delete: "del",
    ast.AsyncWith: "async with",
    ast.AsyncFor: "async for",
    ast.AsyncFunctionDef: "async def",
    ast.TryStar: "try",
}
_PARAMS_FORM = 'use (low, high), (low, high, "log"), (low, high, default) or (low, high, "log", default)'
_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


@dataclass(frozen=True)
class Violation:
    """One breach of the subset, phrased for the proposer that wrote it."""

    line: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: [{self.rule}] {self.message}"


class StaticError(ValueError):
    """A candidate outside the subset: `str()` is one line, `violations` holds every breach found."""

    def __init__(self, violations: list[Violation]) -> None:
        super().__init__(violations)  # the only argument, so the error pickles across processes
        self.violations = violations

    def __str__(self) -> str:
        more = len(self.violations) - 1
        return str(self.violations[0]) + (f" (+{more} more)" if more else "")


def check(source: str, signatures: Sequence[Signature]) -> Program:
    """Check a candidate against the decision functions a target asks for; raise StaticError on any breach."""
    too_deep = StaticError([Violation(1, "syntax", "the program is nested too deeply to check")])
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise StaticError([Violation(exc.lineno or 1, "syntax", exc.msg)]) from None
    except ValueError as exc:  # e.g. a null byte, which Python 3.11 reports as ValueError
        raise StaticError([Violation(1, "syntax", str(exc))]) from None
    except RecursionError:
        raise too_deep from None
    checker = _ModuleChecker(signatures)
    try:
        program = checker.run(source, tree)
    except RecursionError:
        raise too_deep from None
    if checker.violations:
        raise StaticError(sorted(checker.violations, key=lambda v: v.line))
    return program


def render(program: Program, params: Mapping[str, float] | None = None) -> str:
    """The source with each PARAMS entry carrying the given value (else its initial one) as its default."""
    values = program.defaults()
    unknown = sorted(set(params or {}) - set(values))
    if unknown:
        raise ValueError(f"unknown parameters: {', '.join(unknown)}")
    values.update(params or {})
    tuned = tuple(_with_default(p, float(values[p.name])) for p in program.params)
    node = next((s for s in ast.parse(program.source).body if _is_params(s)), None)
    if node is None or node.end_lineno is None or node.end_col_offset is None:
        return program.source
    lines = _LINES.findall(program.source)
    rest = lines[node.end_lineno - 1].encode()[node.end_col_offset :].decode()
    return (
        "".join(lines[: node.lineno - 1]) + _params_source(tuned) + rest + "".join(lines[node.end_lineno :])
    )


def number(node: ast.expr) -> float | None:
    """The value of a finite numeric literal, optionally signed; None for anything else."""
    sign = 1.0
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        sign = -1.0 if isinstance(node.op, ast.USub) else 1.0
        node = node.operand
    if not isinstance(node, ast.Constant) or isinstance(node.value, bool):
        return None
    if not isinstance(node.value, int | float):
        return None
    try:
        value = float(node.value)
    except OverflowError:
        return None
    return sign * value if math.isfinite(value) else None


def _is_params(stmt: ast.stmt) -> bool:
    match stmt:
        case ast.Assign(targets=[ast.Name(id="PARAMS")]):
            return True
    return False


def _with_default(param: ParamRange, value: float) -> ParamRange:
    if not (math.isfinite(value) and param.low <= value <= param.high):
        raise ValueError(f"parameter '{param.name}' = {value} is outside [{param.low}, {param.high}]")
    return replace(param, default=value)


def _params_source(params: tuple[ParamRange, ...]) -> str:
    if not params:
        return "PARAMS = {}"
    rows = []
    for p in params:
        flag = ', "log"' if p.log else ""
        rows.append(f'    "{p.name}": ({p.low!r}, {p.high!r}{flag}, {p.default!r}),\n')
    return "PARAMS = {\n" + "".join(rows) + "}"


def _keyword(stmt: ast.stmt) -> str:
    return _KEYWORDS.get(type(stmt), type(stmt).__name__.lower())


def _suggest(name: str, options: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, sorted(options), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def _arity(fewest: int, most: int | None) -> str:
    if most is None:
        return f"{fewest} or more arguments"
    return f"{fewest} argument" + ("s" if fewest != 1 else "")


def _range_count(node: ast.expr) -> int | None:
    match node:
        case ast.Call(func=ast.Name(id="range"), args=[ast.Constant(value=int() as count)], keywords=[]):
            return None if isinstance(count, bool) else count
    return None


class _ModuleChecker:
    """Walks the module level: a docstring, PARAMS, and exactly the decision functions."""

    def __init__(self, signatures: Sequence[Signature]) -> None:
        self.signatures = {s.name: s for s in signatures}
        self.violations: list[Violation] = []

    def flag(self, line: int, rule: str, message: str) -> None:
        self.violations.append(Violation(line, rule, message))

    def run(self, source: str, tree: ast.Module) -> Program:
        body = tree.body[1:] if tree.body and is_docstring(tree.body[0]) else tree.body
        params: list[ParamRange] = []
        names: set[str] = set()
        seen_params = False
        defs: dict[str, ast.FunctionDef] = {}
        for stmt in body:
            match stmt:
                case ast.Assign(targets=[ast.Name(id="PARAMS")], value=value):
                    if seen_params:
                        self.flag(stmt.lineno, "module-level", "PARAMS is assigned more than once")
                    else:
                        seen_params = True
                        params, names = self._params(value)
                case ast.FunctionDef(name=name) if name in defs:
                    self.flag(stmt.lineno, "module-level", f"'{name}' is defined more than once")
                case ast.FunctionDef(name=name) if name in self.signatures:
                    defs[name] = stmt
                case ast.FunctionDef(name=name):
                    expected = ", ".join(self.signatures)
                    self.flag(
                        stmt.lineno,
                        "unknown-function",
                        f"'{name}' is not a decision function of this target (expected: {expected})",
                    )
                case ast.Import() | ast.ImportFrom():
                    self.flag(stmt.lineno, "no-imports", "imports are not allowed")
                case ast.Assign() | ast.AugAssign() | ast.AnnAssign():
                    self.flag(
                        stmt.lineno, "module-level", "only 'PARAMS = {...}' may be assigned at module level"
                    )
                case ast.Expr():
                    self.flag(stmt.lineno, "module-level", "only a docstring may stand alone at module level")
                case _:
                    self.flag(
                        stmt.lineno, "module-level", f"'{_keyword(stmt)}' is not allowed at module level"
                    )
        functions: dict[str, ast.FunctionDef] = {}
        for sig in self.signatures.values():
            fn = defs.get(sig.name)
            if fn is None:
                self.flag(
                    1, "missing-function", f"'def {sig.name}({sig.state_arg}, {sig.params_arg}):' is missing"
                )
                continue
            _FunctionChecker(self, sig, frozenset(names)).check(fn)
            functions[sig.name] = fn
        docstring = ast.get_docstring(tree) or ""
        return Program(source=source, docstring=docstring, params=tuple(params), functions=functions)

    def _params(self, node: ast.expr) -> tuple[list[ParamRange], set[str]]:
        """The declared ranges, and every name declared (even badly) so uses do not cascade into errors."""
        if not isinstance(node, ast.Dict):
            self.flag(node.lineno, "params-format", 'PARAMS must be a dict literal, e.g. {"w": (0.0, 1.0)}')
            return [], set()
        ranges: list[ParamRange] = []
        names: set[str] = set()
        for key, value in zip(node.keys, node.values, strict=True):
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                self.flag(value.lineno, "params-format", "PARAMS keys must be string names")
                continue
            name = key.value
            if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
                self.flag(
                    key.lineno, "params-format", f"{name!r} must be an identifier not starting with '_'"
                )
            elif name in names:
                self.flag(key.lineno, "params-format", f"'{name}' is declared more than once")
            else:
                param = self._range(name, value)
                if param is not None:
                    ranges.append(param)
            names.add(name)
        return ranges, names

    def _range(self, name: str, node: ast.expr) -> ParamRange | None:
        items = list(node.elts) if isinstance(node, ast.Tuple) else []
        log = len(items) >= 3 and isinstance(items[2], ast.Constant) and items[2].value == "log"
        if log:
            del items[2]
        values = [v for v in map(number, items) if v is not None]
        if len(values) != len(items) or not 2 <= len(values) <= 3:
            self.flag(node.lineno, "params-format", f"'{name}': {_PARAMS_FORM}, with finite number literals")
            return None
        low, high, *rest = values
        default = rest[0] if rest else None
        if not low < high:
            self.flag(node.lineno, "params-format", f"'{name}': low ({low}) must be below high ({high})")
        elif log and low <= 0:
            self.flag(node.lineno, "params-format", f"'{name}': a log range needs low > 0")
        elif default is not None and not low <= default <= high:
            self.flag(node.lineno, "params-format", f"'{name}': default {default} is outside [{low}, {high}]")
        else:
            return ParamRange(name=name, low=low, high=high, log=log, default=default)
        return None


@dataclass(frozen=True)
class _Scope:
    """What a statement may read: locals assigned on every path to it and the loop variables in force."""

    assigned: frozenset[str] = frozenset()
    loop_vars: frozenset[str] = frozenset()
    unrolled: int = 1


class _FunctionChecker:
    """Checks one decision function: its signature, its statements and expressions, definite assignment."""

    def __init__(self, module: _ModuleChecker, signature: Signature, params: frozenset[str]) -> None:
        self.module = module
        self.sig = signature
        self.params = params
        self.locals: frozenset[str] = frozenset()
        self.loop_vars: frozenset[str] = frozenset()

    def check(self, fn: ast.FunctionDef) -> None:
        self._signature(fn)
        body = fn.body[1:] if is_docstring(fn.body[0]) else fn.body
        self.locals, self.loop_vars = _names(body)
        _, returns = self._block(body, _Scope())
        if not returns:
            self._flag(fn, "missing-return", f"'{fn.name}' can reach its end without returning a value")

    def _flag(self, node: ast.stmt | ast.expr, rule: str, message: str) -> None:
        self.module.flag(node.lineno, rule, message)

    def _signature(self, fn: ast.FunctionDef) -> None:
        a = fn.args
        plain = (
            [arg.arg for arg in a.args] == [self.sig.state_arg, self.sig.params_arg]
            and not (a.posonlyargs or a.kwonlyargs or a.defaults or fn.decorator_list)
            and a.vararg is None
            and a.kwarg is None
            and fn.returns is None
            and all(arg.annotation is None for arg in a.args)
        )
        if not plain:
            self._flag(
                fn,
                "signature",
                f"declare it exactly as 'def {fn.name}({self.sig.state_arg}, {self.sig.params_arg}):'"
                " (no defaults, annotations or decorators)",
            )

    def _block(self, stmts: list[ast.stmt], scope: _Scope) -> tuple[frozenset[str], bool]:
        """Check statements in order; return the locals assigned on every path and whether all return."""
        assigned = scope.assigned
        for i, stmt in enumerate(stmts):
            assigned, returns = self._statement(stmt, replace(scope, assigned=assigned))
            if returns:
                if i + 1 < len(stmts):
                    self._flag(stmts[i + 1], "statement", "unreachable code after 'return'")
                return assigned, True
        return assigned, False

    def _statement(self, stmt: ast.stmt, scope: _Scope) -> tuple[frozenset[str], bool]:
        match stmt:
            case ast.Assign(targets=[ast.Name(id=name)], value=value):
                self._expr(value, scope)
                self._target(stmt, name)
                return scope.assigned | {name}, False
            case ast.AugAssign(target=ast.Name(id=name), op=op, value=value):
                if self._target(stmt, name):
                    self._read(stmt, name, scope)
                self._arith(stmt, op, value, scope)
            case ast.Assign() | ast.AugAssign() | ast.AnnAssign():
                self._flag(
                    stmt, "assignment", "assign to exactly one local name, without annotation: 'x = ...'"
                )
            case ast.If(test=test, body=body, orelse=orelse):
                self._expr(test, scope)
                then_assigned, then_returns = self._block(body, scope)
                else_assigned, else_returns = self._block(orelse, scope)
                if then_returns:
                    return else_assigned, else_returns
                if else_returns:
                    return then_assigned, False
                return then_assigned & else_assigned, False
            case ast.Return(value=None):
                self._flag(stmt, "missing-return", "'return' needs a value")
                return scope.assigned, True
            case ast.Return(value=value):
                self._expr(value, scope)
                return scope.assigned, True
            case ast.Pass():
                pass
            case ast.For():
                return self._for(stmt, scope)
            case ast.While():
                self._flag(
                    stmt,
                    "no-while",
                    f"'while' loops are not allowed; use 'for i in range(N)', N <= {MAX_RANGE}",
                )
            case ast.Break() | ast.Continue() | ast.AsyncFor():
                self._flag(
                    stmt, "no-loops", f"'{_keyword(stmt)}' is not allowed; loops always run to the end"
                )
            case ast.Import() | ast.ImportFrom():
                self._flag(stmt, "no-imports", "imports are not allowed")
            case ast.Expr() if is_docstring(stmt):
                self._flag(
                    stmt, "no-strings", "strings are not allowed (a docstring only as the first statement)"
                )
            case ast.Expr():
                self._flag(stmt, "statement", "a bare expression does nothing; assign it or return it")
            case ast.FunctionDef() | ast.AsyncFunctionDef() | ast.ClassDef():
                self._flag(stmt, "statement", "nested functions and classes are not allowed")
            case _:
                self._flag(stmt, "statement", f"'{_keyword(stmt)}' is not allowed")
        return scope.assigned, False

    def _for(self, stmt: ast.For, scope: _Scope) -> tuple[frozenset[str], bool]:
        count = _range_count(stmt.iter)
        if not isinstance(stmt.target, ast.Name) or count is None:
            self._flag(stmt, "no-loops", "only 'for <name> in range(<integer literal>)' loops are allowed")
            return scope.assigned, False
        var = stmt.target.id
        if stmt.orelse:
            self._flag(stmt, "no-loops", "'for ... else' is not allowed")
        if not 1 <= count <= MAX_RANGE:
            self._flag(stmt, "no-loops", f"range({count}) must run 1 to {MAX_RANGE} iterations")
        elif scope.unrolled * count > MAX_UNROLLED:
            self._flag(
                stmt,
                "no-loops",
                f"nested loops run {scope.unrolled * count} iterations; at most {MAX_UNROLLED} are allowed",
            )
        if var in scope.loop_vars:
            self._flag(stmt, "assignment", f"'{var}' already names an enclosing loop's variable")
        else:
            self._name_free(stmt, var)
        inner = replace(scope, loop_vars=scope.loop_vars | {var}, unrolled=scope.unrolled * max(count, 1))
        return self._block(stmt.body, inner)

    def _target(self, stmt: ast.stmt, name: str) -> bool:
        """Whether a local may be assigned this name; flags the breach if not."""
        if name in self.loop_vars:
            self._flag(stmt, "assignment", f"'{name}' names a loop variable, which cannot be assigned")
            return False
        return self._name_free(stmt, name)

    def _name_free(self, stmt: ast.stmt, name: str) -> bool:
        taken = {self.sig.state_arg: "an argument", self.sig.params_arg: "an argument", "range": "a builtin"}
        taken |= {fn: "a decision function" for fn in self.module.signatures}
        taken |= {fn: "a math function" for fn in CALLS}
        if name in taken:
            self._flag(stmt, "assignment", f"'{name}' is {taken[name]} and cannot be assigned")
            return False
        if name.startswith(RESERVED_PREFIX):
            self._flag(stmt, "assignment", f"names starting with '{RESERVED_PREFIX}' are reserved")
            return False
        return True

    def _read(self, node: ast.stmt | ast.expr, name: str, scope: _Scope) -> None:
        if name in scope.assigned or name in scope.loop_vars:
            return
        if name in self.locals:
            self._flag(node, "unassigned-name", f"'{name}' may be read before it is assigned on some path")
        elif name in self.loop_vars:
            self._flag(node, "unassigned-name", f"loop variable '{name}' is read outside its loop")
        elif name in (self.sig.state_arg, self.sig.params_arg):
            self._flag(
                node, "attribute", f"'{name}' can only be read through its attributes, e.g. '{name}.<name>'"
            )
        elif name in CALLS:
            self._flag(node, "call", f"'{name}' can only be called")
        else:
            known = self.locals | self.loop_vars | scope.loop_vars
            self._flag(node, "unknown-name", f"unknown name '{name}'{_suggest(name, known)}")

    def _arith(self, node: ast.stmt | ast.expr, op: ast.operator, right: ast.expr, scope: _Scope) -> None:
        """Check a binary operator and its right operand (a `**` exponent must be a number literal)."""
        if isinstance(op, ast.Pow):
            if number(right) is None:
                self._flag(node, "power", "'**' needs a number literal as its exponent, e.g. 'x ** 2'")
            return
        if type(op) not in BINARY_OPS:
            self._flag(node, "expression", f"operator '{_FORBIDDEN_OPS[type(op)]}' is not allowed")
        self._expr(right, scope)

    def _expr(self, node: ast.expr, scope: _Scope) -> None:
        match node:
            case ast.Constant(value=bool() | None as value):
                self._flag(node, "literal", f"'{value}' is not allowed; use a number")
            case ast.Constant(value=str() | bytes()) | ast.JoinedStr():
                self._flag(node, "no-strings", "strings are not allowed")
            case ast.Constant(value=int() as value) if abs(value) > MAX_EXACT_INT:
                self._flag(node, "literal", f"integer literals beyond 2**53 are not exact as floats: {value}")
            case ast.Constant(value=float() as value) if not math.isfinite(value):
                self._flag(node, "literal", "this literal is not a finite float")
            case ast.Constant(value=int() | float()):
                pass
            case ast.Constant(value=value):
                self._flag(node, "literal", f"{value!r} is not a real number literal")
            case ast.Name(id=name):
                self._read(node, name, scope)
            case ast.Attribute():
                self._attribute(node)
            case ast.BinOp(left=left, op=op, right=right):
                self._expr(left, scope)
                self._arith(node, op, right, scope)
            case ast.UnaryOp(op=op, operand=operand):
                if type(op) not in UNARY_OPS:
                    self._flag(node, "expression", f"operator '{_FORBIDDEN_OPS[type(op)]}' is not allowed")
                self._expr(operand, scope)
            case ast.Compare(left=left, ops=ops, comparators=rest):
                for op in ops:
                    if type(op) not in COMPARE_OPS:
                        self._flag(
                            node, "expression", f"'{_FORBIDDEN_OPS[type(op)]}' comparisons are not allowed"
                        )
                for operand in (left, *rest):
                    self._expr(operand, scope)
            case ast.BoolOp(values=values):
                for value in values:
                    self._expr(value, scope)
            case ast.IfExp(test=test, body=body, orelse=orelse):
                for part in (test, body, orelse):
                    self._expr(part, scope)
            case ast.Call():
                self._call(node, scope)
            case ast.Lambda():
                self._flag(node, "no-lambda", "lambdas are not allowed")
            case ast.ListComp() | ast.SetComp() | ast.DictComp() | ast.GeneratorExp():
                self._flag(node, "no-comprehension", "comprehensions are not allowed")
            case ast.NamedExpr():
                self._flag(node, "assignment", "':=' is not allowed; assign in a statement")
            case ast.List() | ast.Tuple() | ast.Set() | ast.Dict():
                self._flag(node, "literal", f"{type(node).__name__.lower()} displays are not allowed")
            case ast.Subscript():
                self._flag(node, "expression", "subscripts are not allowed")
            case ast.Starred():
                self._flag(node, "expression", "'*' unpacking is not allowed")
            case _:
                self._flag(node, "expression", f"{type(node).__name__} expressions are not allowed")

    def _attribute(self, node: ast.Attribute) -> None:
        base = node.value.id if isinstance(node.value, ast.Name) else None
        if base == self.sig.state_arg:
            if node.attr not in self.sig.features:
                self._flag(
                    node,
                    "unknown-feature",
                    f"'{base}' has no feature '{node.attr}'{_suggest(node.attr, self.sig.features)}",
                )
        elif base == self.sig.params_arg:
            if node.attr not in self.params:
                self._flag(
                    node,
                    "unknown-param",
                    f"'{node.attr}' is not declared in PARAMS{_suggest(node.attr, self.params)}",
                )
        else:
            self._flag(
                node,
                "attribute",
                f"only '{self.sig.state_arg}.<feature>' and '{self.sig.params_arg}.<param>' may be read,"
                f" not '{ast.unparse(node)}'",
            )

    def _call(self, node: ast.Call, scope: _Scope) -> None:
        name = node.func.id if isinstance(node.func, ast.Name) else ""
        if name not in CALLS:
            allowed = ", ".join(sorted(CALLS))
            self._flag(node, "call", f"'{ast.unparse(node.func)}' cannot be called; allowed: {allowed}")
            return
        fewest, most = CALLS[name]
        count = len(node.args)
        if node.keywords or any(isinstance(arg, ast.Starred) for arg in node.args):
            self._flag(node, "call", f"'{name}' takes plain positional arguments only")
            return
        if count < fewest or (most is not None and count > most):
            self._flag(node, "call", f"'{name}' takes {_arity(fewest, most)}, not {count}")
        for arg in node.args:
            self._expr(arg, scope)


def _names(body: list[ast.stmt]) -> tuple[frozenset[str], frozenset[str]]:
    """The names a body assigns anywhere and the names its loops bind, to tell unassigned from unknown."""
    assigned: set[str] = set()
    loop_vars: set[str] = set()
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        match node:
            case ast.Assign(targets=[ast.Name(id=name)]) | ast.AugAssign(target=ast.Name(id=name)):
                assigned.add(name)
            case ast.For(target=ast.Name(id=name)):
                loop_vars.add(name)
    return frozenset(assigned), frozenset(loop_vars)
