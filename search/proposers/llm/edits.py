"""Turn a model's reply into candidate source: a full rewrite, or SEARCH/REPLACE blocks against the parent.

Replies come fenced or bare, wrapped in prose, after a `<think>` block, or cut off by a length limit; the
extraction tries each plausible piece and keeps the first that parses and defines the decision functions.
Whether the program stays inside the subset is not decided here: the static check does that and names the
rule, so code outside the subset still comes out as a candidate and is rejected with a precise message.
Two slips small models make again and again are mended here, since a repair turn for one costs a whole
reply: the import of habit (`import math` for `math.log(x)`: dropped, the call written as the subset spells
it), and a PARAMS entry written as a bare value (made the range a decade either side of it, the value its
default, so the tuner starts where the model meant).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from verifiers.static import CALLS

_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"^[ \t]*```[^\n`]*\n(.*?)(?:^[ \t]*```[ \t]*$|\Z)", re.DOTALL | re.MULTILINE)
_SEARCH = re.compile(r"^[ \t]*<{5,9}[ \t]*SEARCH[ \t]*$", re.MULTILINE)
_DIVIDER = re.compile(r"^[ \t]*={5,9}[ \t]*$", re.MULTILINE)
_REPLACE = re.compile(r"^[ \t]*>{5,9}[ \t]*REPLACE[ \t]*$", re.MULTILINE)
_STARTS = ('"""', "'''", "PARAMS", "def ", "import ", "from ", "#")
"""How the first line of a bare program may begin (imports too, so the static check can name them)."""


class EditError(ValueError):
    """A reply that yields no program; `kind` classifies it and `str()` is one line for the repair turn."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Edit:
    """The candidate source a reply yields and how it was written."""

    source: str
    kind: Literal["rewrite", "diff"]
    blocks: int = 0
    """SEARCH/REPLACE blocks applied (0 for a rewrite)."""
    mends: tuple[str, ...] = ()
    """The slips mended in it (drop_imports, range_params), each in a few words."""


def apply_reply(reply: str, parent: str, functions: Sequence[str]) -> Edit:
    """The program a reply means: its SEARCH/REPLACE blocks applied to `parent`, else the code it holds."""
    text = _THINK.sub("", reply)
    edit = _apply_diff(text, parent) if _SEARCH.search(text) else Edit(_extract(text, functions), "rewrite")
    source, dropped = drop_imports(edit.source, CALLS)
    source, ranged = range_params(source)
    mends = [f"import {name} dropped" for name in dropped] + [f"PARAMS {name} ranged" for name in ranged]
    return Edit(source, edit.kind, edit.blocks, tuple(mends))


def range_params(source: str) -> tuple[str, list[str]]:
    """`source` with each PARAMS entry written as a bare nonzero number v made a range a decade either side
    of it with v its default (`(v / 10, v * 10, "log", v)`, or `(v * 10, v / 10, v)` below zero), and the
    names of the entries so mended."""
    tree = ast.parse(source)
    lines = [line.encode() for line in source.splitlines(keepends=True)]
    found = []
    for node in tree.body:
        if not (
            isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets] == ["PARAMS"]
            and isinstance(node.value, ast.Dict)
        ):
            continue
        for key, value in zip(node.value.keys, node.value.values, strict=True):
            number = _number(value)
            if not number or not isinstance(key, ast.Constant) or value.lineno != value.end_lineno:
                continue
            ranged = (
                f'({number / 10:.6g}, {number * 10:.6g}, "log", {number:.6g})'
                if number > 0
                else (f"({number * 10:.6g}, {number / 10:.6g}, {number:.6g})")
            )
            found.append((value, str(key.value), ranged))
    for value, _, ranged in sorted(found, key=lambda f: (f[0].lineno, f[0].col_offset), reverse=True):
        line = lines[value.lineno - 1]
        lines[value.lineno - 1] = line[: value.col_offset] + ranged.encode() + line[value.end_col_offset :]
    return b"".join(lines).decode(), [name for _, name, _ in found]


def _number(node: ast.expr) -> float | None:
    """A numeric literal's value (a minus sign included); None for anything else, a bool among them."""
    sign = 1.0
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node, sign = node.operand, -1.0
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return sign * float(node.value)
    return None


def drop_imports(source: str, calls: Collection[str]) -> tuple[str, list[str]]:
    """`source` without its top-level imports whose names go unused or only call a function of `calls`
    (`math.log(x)` becomes `log(x)`), and the modules dropped; any other import stays, for the static check
    to name. An import sharing its line with other code stays too."""
    tree = ast.parse(source)
    lines = [line.encode() for line in source.splitlines(keepends=True)]  # ast's columns count bytes
    uses: dict[str, list[ast.Name]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            uses.setdefault(node.id, []).append(node)
    callers = {  # a name's uses that are `name.f(...)` with f a subset call
        id(call.func.value)
        for call in ast.walk(tree)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and call.func.attr in calls
    }
    drop, prefixes = [], []
    for node in tree.body:
        if not isinstance(node, ast.Import | ast.ImportFrom) or not _own_lines(node, lines):
            continue
        bound = [(a.asname or a.name.split(".")[0], a.name) for a in node.names]
        habitual = all(
            (isinstance(node, ast.ImportFrom) and name in calls and (alias or name) == name)
            or all(id(use) in callers for use in uses.get(alias, ()))
            for alias, name in bound
        )
        if habitual:
            drop.append(node)
            prefixes += [use for alias, _ in bound for use in uses.get(alias, ()) if id(use) in callers]
    for use in sorted(prefixes, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        line = lines[use.lineno - 1]
        lines[use.lineno - 1] = line[: use.col_offset] + line[use.col_offset + len(use.id.encode()) + 1 :]
    for node in reversed(drop):
        del lines[node.lineno - 1 : node.end_lineno]
    dropped = [n.module or "" if isinstance(n, ast.ImportFrom) else n.names[0].name for n in drop]
    return b"".join(lines).decode(), dropped


def _own_lines(node: ast.stmt, lines: list[bytes]) -> bool:
    """The statement is alone on its lines (no `import math; x = 1`)."""
    first, last = lines[node.lineno - 1], lines[(node.end_lineno or node.lineno) - 1]
    return not first[: node.col_offset].strip() and not last[node.end_col_offset or 0 :].strip()


def _apply_diff(text: str, parent: str) -> Edit:
    source = parent
    blocks = list(_blocks(text))
    for number, (search, replace) in enumerate(blocks, start=1):
        source = _replace_once(source, search, replace, number)
    try:
        ast.parse(source)
    except SyntaxError as exc:
        raise EditError(
            "syntax",
            f"after the SEARCH/REPLACE blocks the program does not parse: line {exc.lineno}: {exc.msg}",
        ) from None
    return Edit(source, "diff", len(blocks))


def _blocks(text: str) -> Iterator[tuple[str, str]]:
    """(search, replace) pairs in order; a block without its divider or REPLACE marker is an error."""
    for number, start in enumerate(_SEARCH.finditer(text), start=1):
        rest = text[start.end() :]
        divider = _DIVIDER.search(rest)
        end = _REPLACE.search(rest)
        if divider is None or end is None or end.start() < divider.end():
            raise EditError(
                "unparsable", f"SEARCH/REPLACE block {number} is not closed by ======= and >>>>>>> REPLACE"
            )
        yield _body(rest[: divider.start()]), _body(rest[divider.end() : end.start()])


def _body(chunk: str) -> str:
    """The lines between two markers, without the newline that ends the marker line before them."""
    return chunk.removeprefix("\n")


def _replace_once(source: str, search: str, replace: str, number: int) -> str:
    if not search.strip():
        raise EditError("diff-mismatch", f"SEARCH/REPLACE block {number} has an empty SEARCH part")
    count = source.count(search)
    if count == 1:
        return source.replace(search, replace, 1)
    if count > 1:
        raise EditError(
            "diff-mismatch", f"the SEARCH part of block {number} occurs {count} times; include more lines"
        )
    # Models often drop trailing spaces or the final newline: match line by line, ignoring trailing blanks.
    lines = source.splitlines(keepends=True)
    wanted = [line.rstrip() for line in search.splitlines()]
    hits = [
        i
        for i in range(len(lines) - len(wanted) + 1)
        if [line.rstrip() for line in lines[i : i + len(wanted)]] == wanted
    ]
    if len(hits) != 1:
        first = next((line.strip() for line in wanted if line.strip()), "")
        where = "is not in the parent" if not hits else f"occurs {len(hits)} times"
        raise EditError("diff-mismatch", f"the SEARCH part of block {number} ({first!r}...) {where}")
    i = hits[0]
    tail = "\n" if lines[i + len(wanted) - 1].endswith("\n") and not replace.endswith("\n") else ""
    return "".join(lines[:i]) + replace + tail + "".join(lines[i + len(wanted) :])


def _extract(text: str, functions: Sequence[str]) -> str:
    """The last fenced block (else the bare program) that parses and defines every decision function."""
    fenced = [m.group(1) for m in _FENCE.finditer(text)]
    pieces = list(reversed(fenced)) if fenced else list(_bare(text))
    for piece in pieces:
        source = piece.strip("\n") + "\n"
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        if set(functions) <= defined:
            return source
    wanted = ", ".join(f"def {name}(...)" for name in functions)
    code = fenced[-1] if fenced else (pieces[1] if len(pieces) > 1 else "")
    try:
        ast.parse(code)
    except SyntaxError as exc:
        raise EditError(
            "syntax", f"the code in the reply does not parse: line {exc.lineno}: {exc.msg}"
        ) from None
    raise EditError("no-code", f"the reply holds no Python program with {wanted}")


def _bare(text: str) -> Iterator[str]:
    """Unfenced code: the whole reply, then from the first line of a program on, cut short from the end."""
    yield text
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(_STARTS)), None)
    if start is None:
        return
    for stop in range(len(lines), start, -1):
        yield "\n".join(lines[start:stop])
