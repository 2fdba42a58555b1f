"""The reference pages, generated from the code when the site builds (mkdocs-gen-files runs this file), so
they cannot drift from it: every CLI command and flag from the argparse parser, every crucible.toml key from
the config reader, every target's options, features, metrics and baselines from its registry."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import itertools
import os
import re
import tempfile
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import targets
from search import proposers
from search.ci import config as ci_config
from search.cli.main import build_parser as cli_parser

PAGES = {"reference/cli.md", "reference/config.md", "reference/targets.md", "reference/target-contract.md"}
USAGE_COLUMNS = "100"
"""argparse wraps usage lines to the terminal's width; the page shows them at this one."""


def cell(value: Any) -> str:
    """Text safe inside a Markdown table cell."""
    return " ".join(str(value).split()).replace("|", "\\|")


def code(value: Any) -> str:
    return f"`{value}`" if value not in (None, "") else ""


def table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


# --- the CLI -------------------------------------------------------------------------------------------


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ("crucible",), doc: str = ""
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str]]:
    """Every command of the parser, depth first, with its one-line help."""
    yield path, parser, doc
    for action in parser._actions:  # argparse offers no public walk over its subcommands
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name), helps.get(name, ""))


def arguments(parser: argparse.ArgumentParser) -> list[tuple[str, str, str, str]]:
    """(flags, value, default, help) of each argument a user can give, subcommand choosers aside."""
    rows = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        flags = ", ".join(code(f) for f in action.option_strings) or code(action.metavar or action.dest)
        if action.choices:
            value = ", ".join(code(c) for c in action.choices)
        elif action.nargs == 0:
            value = ""
        else:
            value = code(action.metavar or action.dest.upper())
        default = action.default
        shown = "" if default in (None, False, [], argparse.SUPPRESS) or action.nargs == 0 else code(default)
        rows.append((flags, value, shown, action.help or ""))
    return rows


def cli_page(parser: argparse.ArgumentParser | None = None) -> str:
    """Every command, its usage and every flag, as `crucible ... --help` prints them."""
    parser = parser or cli_parser()
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = USAGE_COLUMNS
    try:
        return _cli_page(parser)
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns


def _cli_page(parser: argparse.ArgumentParser) -> str:
    parts = [
        "# CLI reference",
        "Generated from the argparse parser when the site builds: every command and flag that "
        "`crucible ... --help` prints. Every command that reads or writes runs takes `--json` (its data on "
        "stdout) and `--db URL`.",
    ]
    for path, sub, doc in commands(parser):
        name = " ".join(path)
        parts.append(f"## `{name}`")
        about = sub.description or doc
        if about:
            parts.append(cell(about))
        parts.append("```\n" + sub.format_usage().strip() + "\n```")
        rows = arguments(sub)
        if rows:
            parts.append(table(("argument", "value", "default", "what it does"), rows))
        if sub.epilog:
            parts.append("```\n" + sub.epilog.strip() + "\n```")
    return "\n\n".join(parts) + "\n"


# --- crucible.toml -------------------------------------------------------------------------------------

PROBE = "__no_such_key__"
PROBES: dict[str, Any] = {
    "": {PROBE: 1},
    "store": {"store": {PROBE: 1}},
    "sandbox": {"sandbox": {PROBE: 1}},
    "search": {"search": {PROBE: 1}},
    "thresholds": {"thresholds": {PROBE: 1}},
    "options": {"options": {PROBE: {}}},
    "[[workloads]]": {"workloads": [{PROBE: 1}]},
    "[[champions]]": {"champions": [{PROBE: 1}]},
}
"""A config with one unknown key in each table: the reader's error lists the keys that table allows."""


CHAMPION = {"target": "kv", "file": "policy.py"}
"""The one key a config needs: a champion (its file is made empty beside the config)."""


def allowed_keys(data: Mapping[str, Any]) -> list[str]:
    """The keys the config reader accepts where `data` holds the unknown one, in its own words."""
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "policy.py").write_text("")
        path = Path(folder) / "crucible.toml"
        path.write_text(_toml({"champions": [CHAMPION], **data}))
        try:
            ci_config.load(path)
        except ci_config.ConfigError as exc:
            found = re.search(r"unknown key; expected one of (.*)$", str(exc))
            if found:
                return found.group(1).split(", ")
            raise
    raise AssertionError(f"the config reader accepted an unknown key: {data}")


def _toml(data: Mapping[str, Any], table: str = "") -> str:
    """The few TOML shapes the probes use: scalars, tables, arrays of tables."""
    lines, nested = [], []
    for key, value in data.items():
        if isinstance(value, dict):
            nested.append(f"[{table}{key}]\n" + _toml(value, f"{table}{key}."))
        elif isinstance(value, list):
            nested += [f"[[{table}{key}]]\n" + _toml(item) for item in value]
        else:
            lines.append(f"{key} = {value!r}".replace("'", '"'))
    return "\n".join(lines + nested) + "\n"


def defaults() -> dict[str, Any]:
    """The value of each key a config leaves out, read back from the reader on a config that names only
    one champion."""
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "policy.py").write_text("")
        path = Path(folder) / "crucible.toml"
        path.write_text(_toml({"champions": [CHAMPION]}))
        loaded = ci_config.load(path)
    found: dict[str, Any] = {"store.url": ci_config.DEFAULT_STORE, "sandbox.backend": loaded.sandbox}
    found |= {f"thresholds.{k}": v for k, v in dataclasses.asdict(loaded.thresholds).items()}
    settings = (*ci_config.RUN_SETTINGS, *proposers.settings())
    found |= {f"search.{s.name}": loaded.search.get(s.name, s.default) for s in settings}
    return found


def config_page() -> str:
    """Every key of crucible.toml, by table, with its default; then the annotated example file."""
    known = defaults()
    rows = []
    for table_name, probe in PROBES.items():
        for key in allowed_keys(probe):
            if table_name == "" and (key in PROBES or f"[[{key}]]" in PROBES):
                continue  # a table of its own: listed with its keys below
            dotted = f"{table_name}.{key}" if table_name else key
            default = known.get(dotted.strip("[]").replace("]].", "."), None)
            shown = code(default) if default not in (None, "", {}) else ""
            where = (
                "top level"
                if not table_name
                else code(f"[{table_name}]" if "[" not in table_name else table_name)
            )
            rows.append((where, code(key), shown))
    return (
        "\n\n".join(
            [
                "# crucible.toml reference",
                "The keys `crucible ci` reads, generated when the site builds from the config reader "
                "itself (`search/ci/config.py`): any other key is an error naming it (exit 2). Under "
                "`[options]` each key is a target, whose table takes that target's options (the "
                "[targets reference](targets.md)). A default shown is what the reader uses when the key "
                "is left out.",
                table(("table", "key", "default"), rows),
                "## The annotated example",
                "`crucible.toml.example` at the repository's root, as shipped:",
                '```toml\n--8<-- "crucible.toml.example"\n```',
            ]
        )
        + "\n"
    )


# --- targets -------------------------------------------------------------------------------------------


def target_section(name: str) -> str:
    """One target as its registry declares it."""
    target = targets.load(name)
    parts = [f"## {name}", cell(target.description)]
    objective = target.objective
    parts.append(f"**Objective:** {objective.direction} `{objective.metric}`.")
    parts.append(f"**Metrics reported:** {', '.join(code(m) for m in target.report_metrics)}.")
    if target.options:
        parts.append("### Options (`--set NAME=VALUE`)")
        options = [(code(o.name), o.type, code(o.default), o.allowed(), o.doc) for o in target.options]
        parts.append(table(("option", "type", "default", "allowed", "what it sets"), options))
    for signature in target.signatures:
        parts.append(f"### Features of `{signature.name}`")
        registry = target.registry(signature.name)
        features = [
            (code(f.name), f.shown_unit, f"[{f.low:g}, {f.high:g}]", f.doc) for f in registry.features
        ]
        parts.append(table(("feature", "unit", "domain", "meaning"), features))
        if registry.relations:
            parts.append(
                "Relations the verifier assumes: " + ", ".join(code(r) for r in registry.relations) + "."
            )
    parts.append("### Baselines")
    oracles = set(target.oracles())
    rows = [(code(b), "candidate format", "") for b in target.baselines()]
    rows += [
        (code(b), "built in", "oracle: reads the future" if b in oracles else "")
        for b in target.builtin_baselines()
    ]
    parts.append(table(("baseline", "written as", "note"), rows))
    properties = target.properties()
    if properties:
        parts.append("### Properties Z3 proves")
        shown = [(code(p.name), p.severity, p.function, p.statement) for p in properties]
        parts.append(table(("property", "severity", "function", "statement"), shown))
    return "\n\n".join(parts)


def targets_page() -> str:
    names = targets.names()
    intro = (
        "Generated from each target's registry when the site builds (`targets.names()`, `targets.load()`): "
        "the same data `crucible targets show TARGET` prints. Targets: "
        + ", ".join(f"[{n}](#{n})" for n in names)
        + "."
    )
    return "\n\n".join(["# Targets reference", intro, *(target_section(n) for n in names)]) + "\n"


def contract_page() -> str:
    """The Target protocol (targets/base.py) member by member: what every target declares, and the optional
    hooks with the default TargetBase gives each."""
    from targets.base import Target, TargetBase

    def first_line(doc: str | None) -> str:
        return " ".join((doc or "").split())

    def call(name: str, function: Any) -> str:
        shown = (
            str(inspect.signature(function)).replace("'", "").replace("self, ", "").replace("(self)", "()")
        )
        return f"`{name}{shown}`"

    attributes = inspect.get_annotations(Target)
    notes = _attribute_docs(Target)
    required = [(f"`{name}`", code(attributes[name]), first_line(notes.get(name))) for name in attributes]
    methods = {n: f for n, f in vars(Target).items() if inspect.isfunction(f) and not n.startswith("_")}
    required += [
        (call(n, f), "", first_line(f.__doc__)) for n, f in methods.items() if n not in vars(TargetBase)
    ]
    optional = [
        (call(n, f), first_line(f.__doc__), first_line(vars(TargetBase)[n].__doc__))
        for n, f in methods.items()
        if n in vars(TargetBase)
    ]
    intro = (
        "Generated from `targets/base.py` when the site builds: the `Target` protocol, every member a front "
        "end, the loop or the sandbox may use of a target. `tests/targets/test_contract.py` holds every "
        "registered target to it, a plugin's as Crucible's own."
    )
    parts = [
        "# The target contract",
        intro,
        "## What every target declares",
        table(("member", "type", "what it is"), required),
        "## Optional hooks, with the default `TargetBase` gives each",
        table(("hook", "what it answers", "default"), optional),
    ]
    return "\n\n".join(parts) + "\n"


def _attribute_docs(cls: type) -> dict[str, str]:
    """The docstrings written under a class's annotated attributes (as this codebase documents fields)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    found: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        named = isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
        if named and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            found[node.target.id] = str(after.value.value)  # type: ignore[union-attr]
    return found


def main() -> None:
    """Write the pages into the site being built."""
    import mkdocs_gen_files

    for path, text in (
        ("reference/cli.md", cli_page()),
        ("reference/config.md", config_page()),
        ("reference/targets.md", targets_page()),
        ("reference/target-contract.md", contract_page()),
    ):
        with mkdocs_gen_files.open(path, "w") as page:
            page.write(text)


if __name__ in ("__main__", "<run_path>"):  # mkdocs-gen-files runs this file with runpy.run_path
    main()
