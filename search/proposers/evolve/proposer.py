"""Offline program evolution: mutate and cross over candidates on their AST, with no network at all.

Each proposal copies the parent's decision function and applies one operator drawn by weight: add a
weighted term built from the target's features, swap a feature, make a literal tunable, delete or replace
a term, change an operator, wrap an expression, insert a guard, switch regime (above a tunable threshold
of a feature, another key: an inspiration's or a new term), or cross over with an inspiration (splice
one of its subexpressions in, blend the two return values, or take an engine knob it sets, such as a
token budget the mechanism reads from PARAMS). New constants become PARAMS with ranges rather than
literals, because Optuna tunes them afterwards. Every child is checked before it leaves:
it differs from the parent, stays under the size caps, adds no operation that may fault over the feature
domains (by interval bounds, ahead of the Z3 verifier), and passes `verifiers.static.check`; an operator
that fails is retried with another draw, and `ProposalFailed` is raised after `tries` failures. An
operator whose children of this parent behaved as programs already evaluated (`ProposalRequest.repeated`)
is drawn less, once per such child, so a family that only rephrases itself is mutated otherwise.
"""

from __future__ import annotations

import ast
import copy
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TypeGuard

from search.proposers.base import Proposal, ProposalFailed, ProposalRequest, TargetBrief
from targets.base import Feature, FeatureRegistry
from verifiers.intervals import (
    DOMAINS,
    TOP,
    Interval,
    Intervals,
    absolute,
    clamp,
    hull,
    maximum,
    may_be_zero,
    minimum,
    outside,
    power_faults,
)
from verifiers.program import ParamRange, Signature, is_docstring, node_count
from verifiers.static import StaticError, check, number

DEFAULT_WEIGHTS: Mapping[str, float] = MappingProxyType(
    {
        "add_term": 3.0,
        "replace_feature": 2.0,
        "tune_literal": 0.5,
        "delete": 1.5,
        "replace_term": 2.0,
        "change_op": 0.5,
        "wrap": 1.0,
        "guard": 1.0,
        "switch": 1.0,
        "splice": 1.5,
        "blend": 0.5,
        "knobs": 1.0,
    }
)
"""Operator weights; growth operators are damped and deletion favoured once a program is at a cap."""

_GROWTH = frozenset({"add_term", "tune_literal", "wrap", "guard", "switch", "splice", "blend"})
REPEAT_DAMPING = 0.25
"""An operator's weight is multiplied by this for each of the parent's children it made that behaved as an
evaluated program."""
_CROSSOVER = frozenset({"splice", "blend", "knobs"})
_BOUNDING = frozenset({"min", "max", "clamp"})
"""Calls that bound their first argument by constants: as a comparison does, no place for a clock feature."""

TERM_WEIGHTS: Mapping[str, float] = MappingProxyType(
    {"x": 2.0, "log1p": 3.0, "sqrt": 1.0, "inv": 1.5, "ratio": 1.5, "cap": 1.0, "prod": 0.5}
)
"""Transforms a new term applies to features: x, log1p(x), sqrt(x), 1/(1+x), x/(1+y), min(x, c), x*y."""

SCALES = (-2, -1, 0, 1, 2, 3)
"""Decades a new weight or threshold is centred on; its range spans two decades either side."""

_SPAN = 2
_MATERIAL_NODES = 24  # largest subexpression taken from an inspiration
_DOC_EXPR = 48  # characters of an expression quoted in a docstring


@dataclass(frozen=True)
class _Slot:
    """Where an expression sits (its holder node, field and list index), so an operator can replace it."""

    holder: ast.AST
    field: str
    index: int | None = None

    def get(self) -> ast.expr:
        value = getattr(self.holder, self.field)
        return value if self.index is None else value[self.index]

    def put(self, node: ast.expr) -> None:
        if self.index is None:
            setattr(self.holder, self.field, node)
        else:
            getattr(self.holder, self.field)[self.index] = node


@dataclass(frozen=True)
class _StmtSlot:
    """A statement inside a statement list, so it can be removed or have one inserted before it."""

    body: list[ast.stmt]
    index: int


@dataclass(frozen=True)
class _Donor:
    """An inspiration's decision function as one expression (locals and guards inlined), with its PARAMS."""

    name: str
    """How a note names it, as every front end does (`#seq`)."""
    expr: ast.expr
    params: Mapping[str, ParamRange]


@dataclass
class _Draft:
    """One mutation attempt: a copy of the parent's function, its PARAMS, and what operators may draw on."""

    rng: random.Random
    fn: ast.FunctionDef
    sig: Signature
    registry: FeatureRegistry
    params: dict[str, ParamRange]
    donors: tuple[_Donor, ...]
    knobs: tuple[str, ...] = ()
    """The engine settings the target lets a search tune (TargetBrief.knobs)."""

    def state(self, name: str) -> ast.expr:
        return _attr(self.sig.state_arg, name)

    def is_state(self, node: ast.AST) -> TypeGuard[ast.Attribute]:
        return _is_attr(node, self.sig.state_arg)

    def is_param(self, node: ast.AST) -> TypeGuard[ast.Attribute]:
        return _is_attr(node, self.sig.params_arg)

    def fresh(self, prefix: str, avoid: Iterable[str] = ()) -> str:
        taken = {*self.params, *avoid}
        k = 1
        while f"{prefix}_{k}" in taken:
            k += 1
        return f"{prefix}_{k}"

    def param(self, prefix: str, low: float, high: float, log: bool) -> ast.expr:
        """A new PARAMS entry over [low, high] and a read of it."""
        name = self.fresh(prefix)
        self.params[name] = ParamRange(name, _nice(low), _nice(high), log)
        return _attr(self.sig.params_arg, name)

    def scaled(self, prefix: str) -> ast.expr:
        """A new positive param on a log range centred on a randomly drawn decade."""
        centre = 10.0 ** self.rng.choice(SCALES)
        return self.param(prefix, centre / 10.0**_SPAN, centre * 10.0**_SPAN, True)

    def feature(self, avoid: str = "", clocks: bool = True) -> Feature:
        """A random feature; `clocks=False` where it is compared to a constant (see Feature.clock)."""
        pool = [f for f in self.registry.features if f.name != avoid and (clocks or not f.clock)]
        return self.rng.choice(pool)

    def term(self) -> ast.expr:
        """A transform of one or two features drawn from the term grammar; safe over their domains."""
        form = self.rng.choices(list(TERM_WEIGHTS), weights=list(TERM_WEIGHTS.values()))[0]
        x = self.feature(clocks=form != "cap")
        if form == "x":
            return self.state(x.name)
        if form == "log1p":
            return _call("log1p", self._nonneg(x))
        if form == "sqrt":
            return _call("sqrt", self._nonneg(x))
        if form == "inv":
            return _div(_num(1), _add(_num(1), self._nonneg(x)))
        if form == "cap":
            return _call("min", self.state(x.name), self.scaled("c"))
        y = self.feature(avoid=x.name)
        if form == "ratio":
            return _div(self.state(x.name), _add(_num(1), self._nonneg(y)))
        return ast.BinOp(self.state(x.name), ast.Mult(), self.state(y.name))

    def weighted(self, node: ast.expr) -> ast.expr:
        return ast.BinOp(self.scaled("w"), ast.Mult(), node)

    def slots(self) -> list[_Slot]:
        return list(_expr_slots(self.fn.body))

    def returns(self) -> list[_Slot]:
        return [s for s in self.slots() if isinstance(s.holder, ast.Return)]

    def terms(self) -> list[_Slot]:
        """Operands of sums and differences: the terms an operator may drop or replace."""
        return [
            s
            for s in self.slots()
            if isinstance(s.holder, ast.BinOp) and isinstance(s.holder.op, ast.Add | ast.Sub)
        ]

    def adopt(self, node: ast.expr, donor: _Donor) -> ast.expr:
        """A copy of donor material, with its params declared here (renamed where a name is taken)."""
        node = copy.deepcopy(node)
        names = sorted({n.attr for n in ast.walk(node) if self.is_param(n)})
        renames = {}
        for name in names:
            theirs = donor.params[name]
            mine = self.params.get(name)
            if mine is not None and (mine.low, mine.high, mine.log) == (theirs.low, theirs.high, theirs.log):
                continue
            new = renames[name] = name if mine is None else self.fresh(name, avoid=names)
            self.params[new] = replace(theirs, name=new)
        for n in ast.walk(node):
            if self.is_param(n) and n.attr in renames:
                n.attr = renames[n.attr]
        return node

    def _nonneg(self, f: Feature) -> ast.expr:
        return self.state(f.name) if f.low >= 0 else _call("abs", self.state(f.name))


Operator = Callable[[_Draft], str | None]
"""Mutates a draft in place and says what changed, or returns None when it does not apply."""


def _add_term(d: _Draft) -> str | None:
    ret = d.rng.choice(d.returns())
    term = d.term()
    plus = d.rng.random() < 0.5
    ret.put(ast.BinOp(ret.get(), ast.Add() if plus else ast.Sub(), d.weighted(term)))
    return f"{'+' if plus else '-'} weighted {_short(term)}"


def _replace_feature(d: _Draft) -> str | None:
    refs = [(s, node.attr) for s in d.slots() if d.is_state(node := s.get())]
    if not refs:
        return None
    slot, old = d.rng.choice(refs)
    new = d.feature(avoid=old, clocks=not _bounds(slot)).name
    slot.put(d.state(new))
    return f"with {old} -> {new}"


def _tune_literal(d: _Draft) -> str | None:
    literals = [s for s in d.slots() if isinstance(s.get(), ast.Constant) and number(s.get()) is not None]
    if not literals:
        return None
    slot = d.rng.choice(literals)
    value = number(slot.get()) or 0.0
    if value == 0.0:
        ref = d.param("c", -1.0, 1.0, False)
        slot.put(ref)
    else:
        size = abs(value)
        ref = d.param("c", size / 10.0, size * 10.0, True)
        slot.put(ref if value > 0 else ast.UnaryOp(ast.USub(), ref))
    return f"with literal {value:g} made tunable ({_short(ref)})"


def _delete(d: _Draft) -> str | None:
    """Drop one part: a term of a sum, a weight of a product, a wrapping call, or a guard."""
    actions: list[tuple[str, Callable[[], None]]] = []
    for slot in d.slots():
        node = slot.get()
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
            right = node.right if isinstance(node.op, ast.Add) else ast.UnaryOp(ast.USub(), node.right)
            actions.append((_short(node.right), _putter(slot, node.left)))
            actions.append((_short(node.left), _putter(slot, right)))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            for keep, drop in ((node.left, node.right), (node.right, node.left)):
                if d.is_param(drop) or isinstance(drop, ast.Constant):
                    actions.append((_short(drop), _putter(slot, keep)))
        elif isinstance(node, ast.Call) and node.args:
            actions.append((_short(node.func), _putter(slot, node.args[0])))
    for stmt in _stmt_slots(d.fn.body):
        guard = stmt.body[stmt.index]
        if isinstance(guard, ast.If):
            actions.append((f"guard {_short(guard.test)}", _replacer(stmt, guard.orelse)))
    if not actions:
        return None
    removed, act = d.rng.choice(actions)
    act()
    return f"without {removed}"


def _replace_term(d: _Draft) -> str | None:
    terms = d.terms()
    if not terms:
        return None
    slot = d.rng.choice(terms)
    old = slot.get()
    term = d.term()
    slot.put(d.weighted(term))
    return f"with {_short(old)} -> weighted {_short(term)}"


_SWAPS: Mapping[type[ast.AST], tuple[type[ast.AST], ...]] = MappingProxyType(
    {
        ast.Add: (ast.Sub, ast.Mult),
        ast.Sub: (ast.Add, ast.Mult),
        ast.Mult: (ast.Add, ast.Sub),
        ast.Div: (ast.Mult,),
        ast.Lt: (ast.Gt, ast.GtE),
        ast.LtE: (ast.GtE, ast.Gt),
        ast.Gt: (ast.Lt, ast.LtE),
        ast.GtE: (ast.LtE, ast.Lt),
    }
)
_SYMBOLS: Mapping[type[ast.AST], str] = MappingProxyType(
    {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
    | {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
)


def _change_op(d: _Draft) -> str | None:
    """Swap an arithmetic or comparison operator, or min for max."""
    sites: list[tuple[ast.AST, int | None]] = []
    for slot in d.slots():
        node = slot.get()
        if isinstance(node, ast.BinOp) and type(node.op) in _SWAPS and not _is_weighting(d, node):
            sites.append((node, None))
        elif isinstance(node, ast.Compare):
            sites += [(node, i) for i, op in enumerate(node.ops) if type(op) in _SWAPS]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            sites += [(node.func, None)] if node.func.id in ("min", "max") else []
    if not sites:
        return None
    node, index = d.rng.choice(sites)
    if isinstance(node, ast.Name):
        old_name, node.id = node.id, "max" if node.id == "min" else "min"
        return f"with {old_name} -> {node.id}"
    if isinstance(node, ast.Compare) and index is not None:
        old: ast.AST = node.ops[index]
        node.ops[index] = new = d.rng.choice(_SWAPS[type(old)])()
    elif isinstance(node, ast.BinOp):
        old, node.op = node.op, d.rng.choice(_SWAPS[type(node.op)])()
        new = node.op
    return f"with '{_SYMBOLS[type(old)]}' -> '{_SYMBOLS[type(new)]}' in {_short(node)}"


def _bounds(slot: _Slot) -> bool:
    """Whether the expression in `slot` is compared to another or bounded by min, max or clamp."""
    holder = slot.holder
    return isinstance(holder, ast.Compare) or (
        isinstance(holder, ast.Call) and isinstance(holder.func, ast.Name) and holder.func.id in _BOUNDING
    )


def _is_weighting(d: _Draft, node: ast.BinOp) -> bool:
    """Whether a product scales by a param or literal, which turns meaningless as a sum or difference."""
    return isinstance(node.op, ast.Mult) and any(
        d.is_param(side) or isinstance(side, ast.Constant) for side in (node.left, node.right)
    )


def _wrap(d: _Draft) -> str | None:
    """Wrap an expression in log1p, sqrt, min, max or clamp (with new params for the bounds)."""
    slots = [s for s in d.slots() if not isinstance(s.get(), ast.Constant)]
    if not slots:
        return None
    slot = d.rng.choice(slots)
    inner = slot.get()
    form = d.rng.choices(("log1p", "sqrt", "min", "max", "clamp"), weights=(3, 1, 1.5, 1.5, 1))[0]
    if form in _BOUNDING and d.is_state(inner) and d.registry[inner.attr].clock:
        return None
    if form in ("log1p", "sqrt"):
        slot.put(_call(form, inner))
    elif form == "clamp":
        centre = 10.0 ** d.rng.choice(SCALES)
        low = d.param("lo", centre / 10.0**_SPAN, centre, True)
        high = d.param("hi", centre, centre * 10.0**_SPAN, True)
        slot.put(_call("clamp", inner, low, high))
    else:
        slot.put(_call(form, inner, d.scaled("c")))
    return f"with {_short(inner)} wrapped in {form}"


def _guard(d: _Draft) -> str | None:
    """Insert `if b.<f> <cmp> p.t_k: return <the final value, shifted>` before the final statement."""
    body = d.fn.body
    last = body[-1]
    if not isinstance(last, ast.Return) or last.value is None:
        return None
    f = d.feature(clocks=False)
    cmp = d.rng.choice((ast.Gt, ast.Lt))()
    test = ast.Compare(d.state(f.name), [cmp], [d.scaled("t")])
    plus = d.rng.random() < 0.5
    shift = d.scaled("w") if d.rng.random() < 0.5 else d.weighted(d.term())
    value = ast.BinOp(copy.deepcopy(last.value), ast.Add() if plus else ast.Sub(), shift)
    body.insert(len(body) - 1, ast.If(test=test, body=[ast.Return(value)], orelse=[]))
    return f"+ guard: if {_short(test)} then {'+' if plus else '-'} {_short(shift)}"


def _switch(d: _Draft) -> str | None:
    """Insert `if b.<f> > p.t_k: return <another key>` before the final statement: a regime switch whose
    threshold Optuna tunes; the other key is an inspiration's whole function or a new term. Half the time
    the test reads a shared feature where the registry has some: there the whole decision follows one rule,
    where a test of a feature that differs between alternatives ranks them by two rules at once."""
    body = d.fn.body
    last = body[-1]
    if not isinstance(last, ast.Return) or last.value is None:
        return None
    shared = [f for f in d.registry.features if f.shared and not f.clock]
    f = d.rng.choice(shared) if shared and d.rng.random() < 0.5 else d.feature(clocks=False)
    if f.integer and f.high - f.low <= 1:
        threshold = _num(0.5)
    else:  # a log range on a drawn decade, cut at the feature's floor, so that both regimes can occur
        centre = 10.0 ** d.rng.choice([s for s in SCALES if 10.0 ** (s + _SPAN) > f.low])
        threshold = d.param("t", max(centre / 10.0**_SPAN, f.low), centre * 10.0**_SPAN, True)
    test = ast.Compare(d.state(f.name), [d.rng.choice((ast.Gt, ast.Lt))()], [threshold])
    if d.donors and d.rng.random() < 0.5:
        donor = d.rng.choice(d.donors)
        if ast.dump(donor.expr) == ast.dump(last.value):
            return None
        other, source = d.adopt(donor.expr, donor), donor.name
    else:
        other = d.term()
        source = _short(other)
    body.insert(len(body) - 1, ast.If(test=test, body=[ast.Return(other)], orelse=[]))
    return f"+ regime switch: if {_short(test)} then {source}"


def _splice(d: _Draft) -> str | None:
    """Take a subexpression reading features from an inspiration: as a new weighted term or a replacement."""
    donor = d.rng.choice(d.donors)
    have = {ast.dump(n) for n in ast.walk(d.fn)}
    material = [
        s.get()
        for s in _expr_slots([ast.Return(donor.expr)])
        if any(d.is_state(n) for n in ast.walk(s.get()))
        and _size(s.get()) <= _MATERIAL_NODES
        and ast.dump(s.get()) not in have
    ]
    if not material:
        return None
    piece = d.adopt(d.rng.choice(material), donor)
    terms = d.terms()
    if terms and d.rng.random() < 0.3:
        slot = d.rng.choice(terms)
        old = slot.get()
        slot.put(piece)
        return f"with {_short(old)} -> {_short(piece)} from {donor.name}"
    ret = d.rng.choice(d.returns())
    plus = d.rng.random() < 0.7
    ret.put(ast.BinOp(ret.get(), ast.Add() if plus else ast.Sub(), d.weighted(piece)))
    return f"{'+' if plus else '-'} weighted {_short(piece)} from {donor.name}"


def _blend(d: _Draft) -> str | None:
    """Blend a return value with an inspiration's whole function: convexly, or as a weighted sum."""
    donor = d.rng.choice(d.donors)
    ret = d.rng.choice(d.returns())
    if ast.dump(ret.get()) == ast.dump(donor.expr):
        return None
    theirs = d.adopt(donor.expr, donor)
    if d.rng.random() < 0.5:
        share = d.param("a", 0.0, 1.0, False)
        mine = ast.BinOp(ast.BinOp(_num(1), ast.Sub(), share), ast.Mult(), ret.get())
        ret.put(ast.BinOp(mine, ast.Add(), ast.BinOp(copy.deepcopy(share), ast.Mult(), theirs)))
        return f"blended convexly with {donor.name}"
    ret.put(ast.BinOp(ret.get(), ast.Add(), d.weighted(theirs)))
    return f"+ weighted {donor.name}"


def _knobs(d: _Draft) -> str | None:
    """Take an engine knob an inspiration sets (its range and default) in place of the parent's, or where the
    parent leaves the engine's default: the mechanism reads it, so Optuna tunes it with the key."""
    offers = _knob_offers(d)
    if not offers:
        return None
    donor, name = d.rng.choice(offers)
    d.params[name] = donor.params[name]
    return f"takes {name} from {donor.name}"


def _knob_offers(d: _Draft) -> list[tuple[_Donor, str]]:
    """The (inspiration, knob) pairs that would change the draft's knobs."""
    return [
        (donor, name)
        for donor in d.donors
        for name in d.knobs
        if name in donor.params and d.params.get(name) != donor.params[name]
    ]


OPERATORS: Mapping[str, Operator] = MappingProxyType(
    {
        "add_term": _add_term,
        "replace_feature": _replace_feature,
        "tune_literal": _tune_literal,
        "delete": _delete,
        "replace_term": _replace_term,
        "change_op": _change_op,
        "wrap": _wrap,
        "guard": _guard,
        "switch": _switch,
        "splice": _splice,
        "blend": _blend,
        "knobs": _knobs,
    }
)


@dataclass(frozen=True)
class EvolveProposer:
    """Proposes by mutation and crossover on the AST; no model, no network, deterministic per seed."""

    max_params: int = 8
    max_nodes: int = 60
    """Statements and expressions in the mutated function (see `verifiers.program.node_count`)."""
    tries: int = 24
    weights: Mapping[str, float] = field(default_factory=lambda: DEFAULT_WEIGHTS)
    name: str = field(default="evolve", init=False)
    concurrency: int = field(default=1, init=False)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.weights) - set(OPERATORS))
        if unknown:
            raise ValueError(f"unknown evolve operators: {', '.join(unknown)} (have {', '.join(OPERATORS)})")
        if not any(w > 0 for w in self.weights.values()):
            raise ValueError("at least one evolve operator needs a positive weight")

    def propose(self, request: ProposalRequest) -> Proposal:
        brief = request.target
        parent = request.parent
        try:
            program = check(parent.source, brief.signatures)
        except StaticError as exc:
            message = f"evolve: parent {parent.name} fails the static check: {exc}"
            raise ProposalFailed(message) from None
        rng = random.Random(request.seed)
        functions = _functions(parent.source)
        sig = rng.choice([s for s in brief.signatures if s.name in functions])
        registry = brief.registries[sig.name]
        params = {p.name: p for p in program.params}
        donors = tuple(d for e in request.inspirations if (d := _donor(e.name, e.source, sig, brief)))
        repeated = Counter(note.split(":")[0] for note in request.repeated)
        before = _canonical(functions.values())
        knobs_before = _knobs_of(params, brief.knobs)
        unsafe_before = set(_unsafe(functions[sig.name], sig, registry, params))
        reason = "no operator applied"
        for _ in range(self.tries):
            fn = _strip(copy.deepcopy(functions[sig.name]))
            draft = _Draft(rng, fn, sig, registry, dict(params), donors, brief.knobs)
            op = self._pick(rng, draft, repeated)
            if op is None:
                raise ProposalFailed(
                    "evolve: only crossover is weighted and no inspiration offers material (none given, or "
                    "none sets an engine knob the parent lacks)"
                )
            what = OPERATORS[op](draft)
            if what is None:
                reason = f"{op} did not apply"
                continue
            _Fold().visit(fn)
            _drop_dead_locals(fn)
            children = {name: fn if name == sig.name else other for name, other in functions.items()}
            kept = _referenced(draft.params, children.values(), brief.signatures, brief.knobs)
            if _canonical(children.values()) == before and _knobs_of(kept, draft.knobs) == knobs_before:
                reason = f"{op} left the program unchanged"
            elif len(kept) > self.max_params:
                reason = f"{op} needs {len(kept)} params (cap {self.max_params})"
            elif node_count(fn) > self.max_nodes:
                reason = f"{op} grew the function to {node_count(fn)} nodes (cap {self.max_nodes})"
            elif not set(unsafe := _unsafe(fn, sig, registry, kept)) <= unsafe_before:
                reason = f"{op} may fault: {sorted(set(unsafe) - unsafe_before)[0]}"
            else:
                doc = _docline(f"Parent {parent.name} {what}")
                source = _render(doc, kept, children.values())
                try:
                    check(source, brief.signatures)
                except StaticError as exc:
                    reason = f"{op} failed the static check: {exc}"
                    continue
                return Proposal(source=source, proposer=self.name, note=f"{op}: {what}")
        raise ProposalFailed(
            f"evolve: no valid child of {parent.name} after {self.tries} tries; last: {reason}"
        )

    def _pick(self, rng: random.Random, draft: _Draft, repeated: Mapping[str, int]) -> str | None:
        """An operator by weight; at a cap growth is damped and deletion favoured; crossover needs donors;
        each child of the parent that behaved as an evaluated program damps the operator that made it."""
        full = len(draft.params) >= self.max_params or node_count(draft.fn) >= 0.8 * self.max_nodes
        names, weights = [], []
        for name, weight in self.weights.items():
            if name in _CROSSOVER and not draft.donors:
                continue
            if name == "knobs" and not _knob_offers(draft):
                continue  # drawn only where an inspiration offers a knob the parent lacks
            if full and name in _GROWTH:
                weight *= 0.1
            elif full and name == "delete":
                weight *= 3.0
            weight *= REPEAT_DAMPING ** repeated.get(name, 0)
            if weight > 0:
                names.append(name)
                weights.append(weight)
        return rng.choices(names, weights=weights)[0] if names else None


def _functions(source: str) -> dict[str, ast.FunctionDef]:
    return {s.name: s for s in ast.parse(source).body if isinstance(s, ast.FunctionDef)}


def _strip(fn: ast.FunctionDef) -> ast.FunctionDef:
    """The function without its docstring: the mutated function's old docstring would describe its parent."""
    if len(fn.body) > 1 and is_docstring(fn.body[0]):
        del fn.body[0]
    return fn


class _Fold(ast.NodeTransformer):
    """Folds arithmetic on literals and drops `* 1`, `/ 1`, `+ 0` and `- 0`, which deletions can leave."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        self.generic_visit(node)
        left, right = number(node.left), number(node.right)
        if left is not None and right is not None and type(node.op) in _FOLDABLE:
            try:
                value = _FOLDABLE[type(node.op)](left, right)
            except (ArithmeticError, ValueError):
                return node
            if math.isfinite(value):
                return _num(value) if value >= 0 else ast.UnaryOp(ast.USub(), _num(-value))
        identity = _IDENTITIES.get(type(node.op))
        if identity is not None and right == identity:
            return node.left
        if identity is not None and left == identity and isinstance(node.op, ast.Mult | ast.Add):
            return node.right
        return node


_IDENTITIES: Mapping[type[ast.operator], float] = MappingProxyType(
    {ast.Add: 0.0, ast.Sub: 0.0, ast.Mult: 1.0, ast.Div: 1.0}
)


_FOLDABLE: Mapping[type[ast.operator], Callable[[float, float], float]] = MappingProxyType(
    {
        ast.Add: lambda a, b: a + b,
        ast.Sub: lambda a, b: a - b,
        ast.Mult: lambda a, b: a * b,
        ast.Div: lambda a, b: a / b,
    }
)


def _drop_dead_locals(fn: ast.FunctionDef) -> None:
    """Remove assignments to locals nothing reads any more (a mutation may have dropped their last use)."""
    while True:
        read = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        if not _prune(fn.body, read):
            return


def _prune(stmts: list[ast.stmt], read: set[str]) -> bool:
    """Drop dead assignments, and blocks left empty, from a statement list; whether anything went."""
    changed = False
    for i in reversed(range(len(stmts))):
        stmt = stmts[i]
        match stmt:
            case ast.Assign(targets=[ast.Name(id=name)]) | ast.AugAssign(target=ast.Name(id=name)):
                if name not in read:
                    del stmts[i]
                    changed = True
            case ast.If() | ast.For():
                changed |= _prune(stmt.body, read) | _prune(stmt.orelse, read)
                if not stmt.body and not stmt.orelse:
                    del stmts[i]
                elif not stmt.body:
                    stmt.body = [ast.Pass()]
    return changed


def _canonical(functions: Iterable[ast.FunctionDef]) -> tuple[str, ...]:
    """The functions' bodies without docstrings, as AST dumps: equal exactly when the code is the same."""
    out = []
    for fn in functions:
        body = fn.body[1:] if fn.body and is_docstring(fn.body[0]) else fn.body
        out.append(fn.name + ":" + "".join(ast.dump(s) for s in body))
    return tuple(out)


def _referenced(
    params: Mapping[str, ParamRange],
    functions: Iterable[ast.FunctionDef],
    signatures: tuple[Signature, ...],
    knobs: tuple[str, ...],
) -> dict[str, ParamRange]:
    """The params some function still reads, and the mechanism's knobs, in declaration order; the rest are
    dropped."""
    by_name = {s.name: s.params_arg for s in signatures}
    used = {n.attr for fn in functions for n in ast.walk(fn) if _is_attr(n, by_name.get(fn.name, ""))}
    return {name: p for name, p in params.items() if name in used or name in knobs}


def _knobs_of(params: Mapping[str, ParamRange], knobs: tuple[str, ...]) -> dict[str, ParamRange]:
    return {name: p for name, p in params.items() if name in knobs}


def _donor(name: str, source: str, sig: Signature, brief: TargetBrief) -> _Donor | None:
    """An inspiration as material for crossover, or None if it lacks the function or cannot be inlined."""
    try:
        program = check(source, brief.signatures)
    except StaticError:
        return None
    fn = program.functions.get(sig.name)
    if fn is None:
        return None
    body = fn.body[1:] if is_docstring(fn.body[0]) else fn.body
    expr = _as_expression(body, {})
    if expr is None or _size(expr) > 4 * _MATERIAL_NODES:
        return None
    return _Donor(name, expr, {p.name: p for p in program.params})


def _as_expression(stmts: list[ast.stmt], env: dict[str, ast.expr]) -> ast.expr | None:
    """A function body as one expression: locals substituted, `if` statements turned into `a if c else b`."""
    for i, stmt in enumerate(stmts):
        match stmt:
            case ast.Assign(targets=[ast.Name(id=name)], value=value):
                env = {**env, name: _substitute(value, env)}
            case ast.AugAssign(target=ast.Name(id=name), op=op, value=value) if name in env:
                env = {**env, name: ast.BinOp(env[name], op, _substitute(value, env))}
            case ast.Return(value=value) if value is not None:
                return _substitute(value, env)
            case ast.If(test=test, body=then, orelse=other):
                yes = _as_expression(then + stmts[i + 1 :], env)
                no = _as_expression(other + stmts[i + 1 :], env)
                if yes is None or no is None:
                    return None
                return ast.IfExp(_substitute(test, env), yes, no)
            case ast.Pass():
                continue
            case _:
                return None
    return None


def _substitute(node: ast.expr, env: Mapping[str, ast.expr]) -> ast.expr:
    """A copy of `node` with every local read replaced by a copy of its defining expression."""

    class Inline(ast.NodeTransformer):
        def visit_Name(self, name: ast.Name) -> ast.expr:
            return copy.deepcopy(env[name.id]) if name.id in env else name

    return Inline().visit(copy.deepcopy(node))


def _expr_slots(stmts: list[ast.stmt]) -> Iterator[_Slot]:
    """Every expression position in statements, outermost first (not `**` exponents or attribute bases)."""
    for stmt in stmts:
        match stmt:
            case ast.Return(value=ast.expr()) | ast.Assign() | ast.AugAssign():
                yield from _walk_slot(_Slot(stmt, "value"))
            case ast.If():
                yield from _walk_slot(_Slot(stmt, "test"))
                yield from _expr_slots(stmt.body)
                yield from _expr_slots(stmt.orelse)
            case ast.For():
                yield from _expr_slots(stmt.body)


def _walk_slot(slot: _Slot) -> Iterator[_Slot]:
    yield slot
    node = slot.get()
    match node:
        case ast.BinOp(op=op):
            yield from _walk_slot(_Slot(node, "left"))
            if not isinstance(op, ast.Pow):
                yield from _walk_slot(_Slot(node, "right"))
        case ast.UnaryOp():
            yield from _walk_slot(_Slot(node, "operand"))
        case ast.Call(args=args) | ast.BoolOp(values=args):
            name = "args" if isinstance(node, ast.Call) else "values"
            for i in range(len(args)):
                yield from _walk_slot(_Slot(node, name, i))
        case ast.Compare(comparators=rest):
            yield from _walk_slot(_Slot(node, "left"))
            for i in range(len(rest)):
                yield from _walk_slot(_Slot(node, "comparators", i))
        case ast.IfExp():
            for part in ("test", "body", "orelse"):
                yield from _walk_slot(_Slot(node, part))


def _stmt_slots(stmts: list[ast.stmt]) -> Iterator[_StmtSlot]:
    for i, stmt in enumerate(stmts):
        yield _StmtSlot(stmts, i)
        if isinstance(stmt, ast.If | ast.For):
            yield from _stmt_slots(stmt.body)
            yield from _stmt_slots(stmt.orelse)


def _putter(slot: _Slot, node: ast.expr) -> Callable[[], None]:
    return lambda: slot.put(node)


def _replacer(slot: _StmtSlot, stmts: list[ast.stmt]) -> Callable[[], None]:
    def act() -> None:
        slot.body[slot.index : slot.index + 1] = stmts

    return act


def _attr(base: str, name: str) -> ast.expr:
    return ast.Attribute(ast.Name(base, ast.Load()), name, ast.Load())


def _is_attr(node: ast.AST, base: str) -> TypeGuard[ast.Attribute]:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == base


def _call(name: str, *args: ast.expr) -> ast.expr:
    return ast.Call(ast.Name(name, ast.Load()), list(args), [])


def _num(value: float) -> ast.expr:
    return ast.Constant(value)


def _add(a: ast.expr, b: ast.expr) -> ast.expr:
    return ast.BinOp(a, ast.Add(), b)


def _div(a: ast.expr, b: ast.expr) -> ast.expr:
    return ast.BinOp(a, ast.Div(), b)


def _size(node: ast.AST) -> int:
    return sum(isinstance(n, ast.expr) for n in ast.walk(node))


def _nice(value: float) -> float:
    """Four significant digits, so ranges read cleanly in the source."""
    return float(f"{value:.4g}")


def _short(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= _DOC_EXPR else text[: _DOC_EXPR - 3] + "..."


def _docline(text: str) -> str:
    """One docstring line: no quotes or backslashes that could end or escape it."""
    return text.replace("\\", "/").replace('"', "'").strip() + "."


def _render(doc: str, params: Mapping[str, ParamRange], functions: Iterable[ast.FunctionDef]) -> str:
    parts = [f'"""{doc}"""\n']
    if params:
        parts.append("\n" + _params_source(params) + "\n")
    for fn in functions:
        parts.append("\n\n" + ast.unparse(fn) + "\n")
    return "".join(parts)


def _params_source(params: Mapping[str, ParamRange]) -> str:
    """PARAMS as ranges: (low, high), with "log" when searched on a log scale, and a default only if given."""
    items = []
    for p in params.values():
        fields = [repr(p.low), repr(p.high)] + (['"log"'] if p.log else [])
        fields += [repr(p.default)] if p.default is not None else []
        items.append(f'"{p.name}": ({", ".join(fields)})')
    line = "PARAMS = {" + ", ".join(items) + "}"
    if len(line) <= 100:
        return line
    return "PARAMS = {\n" + "".join(f"    {item},\n" for item in items) + "}"


# Interval bounds: a conservative pass that finds operations which may fault over the declared domains.


def _unsafe(
    fn: ast.FunctionDef, sig: Signature, registry: FeatureRegistry, params: Mapping[str, ParamRange]
) -> list[str]:
    """Operations (as source) that may divide by zero or leave the domain of log, log1p, sqrt or `**`."""
    bounds = _Bounds(
        sig.state_arg,
        sig.params_arg,
        {f.name: (f.low, f.high) for f in registry.features},
        {p.name: (p.low, p.high) for p in params.values()},
    )
    body = fn.body[1:] if is_docstring(fn.body[0]) else fn.body
    bounds.block(body, {})
    return bounds.unsafe


@dataclass
class _Bounds:
    """Interval bounds (verifiers.intervals) over the feature and param ranges; records each operation that
    may fault, by the same rules as the verifier's interval pass."""

    state: str
    params_arg: str
    features: Mapping[str, Interval]
    params: Mapping[str, Interval]
    unsafe: list[str] = field(default_factory=list)
    alg: Intervals = field(default_factory=Intervals)

    def block(self, stmts: list[ast.stmt], env: dict[str, Interval]) -> dict[str, Interval]:
        for stmt in stmts:
            match stmt:
                case ast.Assign(targets=[ast.Name(id=name)], value=value):
                    env = {**env, name: self.expr(value, env)}
                case ast.AugAssign(target=ast.Name(id=name), op=op, value=value):
                    env = {**env, name: self.binop(stmt, env.get(name, TOP), op, value, env)}
                case ast.Return(value=ast.expr() as value):
                    self.expr(value, env)
                case ast.If(test=test, body=then, orelse=other):
                    self.expr(test, env)
                    a, b = self.block(then, env), self.block(other, env)
                    env = {n: hull(*(e[n] for e in (a, b) if n in e)) for n in sorted(a.keys() | b.keys())}
                case ast.For(target=ast.Name(id=var), body=body):
                    loose = {
                        n.id: TOP
                        for n in ast.walk(stmt)
                        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
                    }
                    env = {**self.block(body, {**env, **loose, var: TOP}), **loose}
        return env

    def flag(self, node: ast.AST) -> Interval:
        self.unsafe.append(ast.unparse(node))
        return TOP

    def expr(self, node: ast.expr, env: Mapping[str, Interval]) -> Interval:
        match node:
            case ast.Constant(value=bool()):
                return (0.0, 1.0)
            case ast.Constant(value=int() | float() as value):
                return self.alg.const(float(value))
            case ast.Name(id=name):
                return env.get(name, TOP)
            case ast.Attribute(value=ast.Name(id=base), attr=attr) if base == self.state:
                return self.features.get(attr, TOP)
            case ast.Attribute(value=ast.Name(id=base), attr=attr) if base == self.params_arg:
                return self.params.get(attr, TOP)
            case ast.UnaryOp(op=ast.USub(), operand=operand):
                return self.alg.neg(self.expr(operand, env))
            case ast.UnaryOp(op=ast.UAdd(), operand=operand):
                return self.expr(operand, env)
            case ast.UnaryOp(operand=operand):
                self.expr(operand, env)
                return (0.0, 1.0)
            case ast.BinOp(left=left, op=op, right=right):
                return self.binop(node, self.expr(left, env), op, right, env)
            case ast.Compare(left=left, comparators=rest):
                for part in (left, *rest):
                    self.expr(part, env)
                return (0.0, 1.0)
            case ast.BoolOp(values=values):
                return hull((0.0, 1.0), *(self.expr(v, env) for v in values))
            case ast.IfExp(test=test, body=body, orelse=orelse):
                self.expr(test, env)
                return hull(self.expr(body, env), self.expr(orelse, env))
            case ast.Call(func=ast.Name(id=name), args=args):
                return self.call(node, name, [self.expr(a, env) for a in args])
        return TOP

    def binop(
        self, node: ast.AST, a: Interval, op: ast.operator, right: ast.expr, env: Mapping[str, Interval]
    ) -> Interval:
        if isinstance(op, ast.Pow):
            exponent = number(right)
            if exponent is None:
                return TOP
            return self.flag(node) if power_faults(a, exponent) else self.alg.power(a, exponent)
        b = self.expr(right, env)
        symbol = _ARITH.get(type(op))
        if symbol is None:
            return TOP
        if symbol in ("/", "//", "%") and may_be_zero(b):
            return self.flag(node)
        return self.alg.arith(symbol, a, b)

    def call(self, node: ast.AST, name: str, args: list[Interval]) -> Interval:
        if name in ("min", "max") and len(args) >= 2:
            return minimum(args) if name == "min" else maximum(args)
        if name == "clamp" and len(args) == 3:
            return clamp(*args)
        if len(args) != 1:
            return TOP
        if name == "abs":
            return absolute(args[0])
        if name in DOMAINS and outside(name, args[0]):
            return self.flag(node)
        if name in ("exp", "floor", "ceil", *DOMAINS):
            return self.alg.apply(name, args[0])
        return TOP


_ARITH: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
}
