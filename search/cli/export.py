"""`crucible export`: a heuristic file as a module that an inference engine loads by itself (SGLang, vLLM)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.cli import parsing
from search.errors import UserError

if TYPE_CHECKING:
    from targets.base import Target
    from targets.export import Export
    from verifiers.program import Program


def add_parser(sub: Any, name: str, help_text: str) -> None:
    """Register `crucible export` on the CLI's subparsers."""
    e = sub.add_parser(
        name,
        help=help_text,
        description=(
            "Translate a checked heuristic into a self-contained Python module that registers it with an "
            "inference engine: the engine's objects give the features, PARAMS keep their tuned values. "
            "A program reading a feature the engine does not expose is refused."
        ),
    )
    e.add_argument("file", help="the heuristic file (a candidate module, e.g. from `crucible runs best`)")
    add_options(e)
    parsing.add_json(e)
    e.set_defaults(handler=run)


def add_options(parser: argparse.ArgumentParser, flag: str = "--to") -> None:
    """The engine choice and its companions, shared with `crucible runs best --export`."""
    parser.add_argument(
        flag,
        dest="engine",
        metavar="ENGINE",
        required=flag == "--to",
        help="the engine: one some target exports to (`crucible targets show TARGET` says which)",
    )
    parser.add_argument("--target", help="the file's target (default: the one that exports to the engine)")
    parser.add_argument("--name", help="the module's name (default: crucible_ and the file's name)")
    if flag == "--to":
        parser.add_argument(
            "--output",
            "-o",
            metavar="DIR",
            help="folder for NAME.py and its pyproject.toml (default: stdout)",
        )


def engines() -> list[str]:
    """Every engine some target exports to."""
    return sorted({e for t in _exportable() for e in t.exports()})


def run(args: argparse.Namespace) -> None:
    path = Path(args.file)
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise UserError(f"{path}: cannot read the heuristic file ({reason})") from None
    write(source, str(path), path.stem, args)


def write(source: str, origin: str, stem: str, args: argparse.Namespace) -> None:
    """Export `source` as args ask: the module on stdout, or NAME.py and pyproject.toml in args.output."""
    from targets.export import ExportError

    name = args.name or "crucible_" + re.sub(r"\W", "_", stem)
    target, export, program = _resolve(source, origin, args.engine, args.target)
    try:
        text = export.render(program, name, origin, {})
    except ExportError as exc:
        raise UserError(str(exc)) from None
    output = getattr(args, "output", None)
    said = {"target": target.name, "engine": args.engine, "module": name, "origin": origin}
    if not output:
        if getattr(args, "json", False):
            print(json.dumps({**said, "source": text}, indent=2))
        else:
            sys.stdout.write(text)
        return
    folder = Path(output)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(text, encoding="utf-8")
    (folder / "pyproject.toml").write_text(export.pyproject(name), encoding="utf-8")
    load = export.load.replace("$name", name).replace("DIR", str(folder))
    written = [str(folder / f"{name}.py"), str(folder / "pyproject.toml")]
    if getattr(args, "json", False):
        print(json.dumps({**said, "written": written, "load": load}, indent=2))
        return
    note = f"wrote {folder / (name + '.py')} ({target.name} program for {args.engine}); load: {load}"
    parsing.note(note)


def _resolve(source: str, origin: str, engine: str, wanted: str | None) -> tuple[Target, Export, Program]:
    """The target, its export to the engine and the checked program: the named target, else the first
    that exports to the engine and whose decision functions the file defines."""
    from verifiers.static import StaticError, check

    known = engines()
    if engine not in known:
        raise UserError(f"--to {engine!r}: no target exports to it; engines: {', '.join(known)}")
    candidates = [t for t in _exportable() if engine in t.exports() and wanted in (None, t.name)]
    if not candidates:
        others = ", ".join(t.name for t in _exportable() if engine in t.exports())
        raise UserError(f"target {wanted!r} does not export to {engine}; targets that do: {others}")
    first_error: StaticError | None = None
    for target in candidates:
        try:
            program = check(source, target.signatures)
        except StaticError as exc:
            first_error = first_error or exc
            continue
        return target, target.exports()[engine], program
    assert first_error is not None
    raise UserError(f"{origin}: {first_error}")


def _exportable() -> list[Any]:
    import targets

    return [t for t in map(targets.load, targets.names()) if t.exports()]
