"""`crucible targets list|show`: the targets, and one target's options, features, metrics and baselines."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from search.cli import parsing
from search.cli.parsing import add_json

if TYPE_CHECKING:
    from targets.base import Target


def add_parser(sub: Any, name: str, help_text: str) -> None:
    t = parsing.add_command(sub, name, help_text)
    actions = t.add_subparsers(dest="action", required=True, metavar="ACTION")
    add_json(actions.add_parser("list", help="every target"))
    show = actions.add_parser("show", help="one target: options, features, metrics, baselines")
    show.add_argument("target", help="the target")
    add_json(show)
    t.set_defaults(handler=run)


def run(args: argparse.Namespace) -> None:
    from rich.table import Table

    from search.cli.render import print_json, show
    from search.service import load_target, target_names

    if args.action == "list":
        found = [load_target(name) for name in target_names()]
        if args.json:
            print_json([_summary(t) for t in found])
            return
        table = Table(title="targets")
        for column in ("name", "objective", "options", "about"):
            table.add_column(column)
        for t in found:
            table.add_row(
                t.name,
                f"{t.objective.direction} {t.objective.metric}",
                ", ".join(o.name for o in t.options),
                t.description.split(". ")[0],
            )
        show(table, "crucible targets show TARGET: its options, features, metrics and baselines")
        return
    target = load_target(args.target)
    data = described(target)
    if args.json:
        print_json(data)
        return
    options = Table(title=f"{target.name} options (--set NAME=VALUE; a flag of its own where shown)")
    for column in ("option", "flag", "type", "default", "allowed", "about"):
        options.add_column(column)
    for o in data["options"]:
        default = "-" if o["default"] is None else str(o["default"])
        options.add_row(o["name"], o["flag"] or "-", o["type"], default, o["allowed"], o["doc"])
    features = Table(title=f"{target.name} features")
    for column in ("function", "feature", "unit", "range", "about"):
        features.add_column(column)
    for s in target.signatures:
        for f in target.registry(s.name).features:
            features.add_row(s.name, f.name, f.shown_unit, f"[{f.low:g}, {f.high:g}]", f.doc)
    checked = Table(
        title=f"{target.name} validation options (crucible validate --target {target.name} --NAME V)"
    )
    for column in ("option", "type", "default", "allowed", "about"):
        checked.add_column(column)
    for o in data["validation_options"]:
        default = "-" if o["default"] is None else str(o["default"])
        checked.add_row(o["name"], o["type"], default, o["allowed"], o["doc"])
    objective = data["objective"]
    show(
        target.description,
        options,
        features,
        *([checked] if data["validation_options"] else []),
        f"objective: {objective['direction']} {objective['metric']}",
        f"metrics shown: {', '.join(data['metrics'])}",
        f"baselines: {', '.join(data['baselines'])}",
        f"built-in baselines: {', '.join(data['builtin_baselines']) or 'none'}",
        f"oracles (read the future; a bound, not a baseline to beat): {', '.join(data['oracles']) or 'none'}",
        f"commands: {', '.join(f'crucible {target.name} {c}' for c in data['commands']) or 'none'}",
        f"exports to (crucible export --to ENGINE): {', '.join(data['exports']) or 'none'}",
        f"checked against (crucible validate --against SYSTEM): {', '.join(data['references']) or 'none'}",
        "requirable (crucible search --require NAME=VALUE): "
        + ("; ".join(f"{n}={r['usage']}: {r['doc']}" for n, r in data["requirable"].items()) or "none"),
    )


def _summary(target: Target) -> dict[str, Any]:
    objective = target.objective
    return {
        "name": target.name,
        "objective": objective.metric,
        "direction": objective.direction,
        "description": target.description,
    }


def _option(o: Any) -> dict[str, Any]:
    return {
        "name": o.name,
        "flag": "--" + o.name.replace("_", "-") if o.flag else "",
        "type": o.type,
        "default": o.default,
        "doc": o.doc,
        "low": o.low,
        "high": o.high,
        "choices": list(o.choices),
        "allowed": o.allowed(),
    }


def described(target: Target) -> dict[str, Any]:
    """Everything `targets show --json` prints of a target, from its declarations."""
    return {
        **_summary(target),
        "objective": {"metric": target.objective.metric, "direction": target.objective.direction},
        "metrics": list(target.report_metrics),
        "integer_metrics": list(target.integer_metrics),
        "options": [_option(o) for o in target.options],
        "features": {
            s.name: [
                {"name": f.name, "unit": f.unit, "low": f.low, "high": f.high, "clock": f.clock, "doc": f.doc}
                for f in target.registry(s.name).features
            ]
            for s in target.signatures
        },
        "baselines": list(target.baselines()),
        "builtin_baselines": list(target.builtin_baselines()),
        "oracles": list(target.oracles()),
        "commands": [c.name for c in target.commands()],
        "exports": sorted(target.exports()),
        "validation_options": [_option(o) for o in _validation(target)],
        "references": {
            name: {"doc": r.doc, "options": [_option(o) for o in r.options]}
            for name, r in target.references().items()
        },
        "requirable": {name: {"usage": r.usage, "doc": r.doc} for name, r in target.requirable().items()},
    }


def _validation(target: Target) -> tuple[Any, ...]:
    """The options of the target's validation against a real engine (`crucible validate` flags)."""
    declared = target.validation()
    return declared.options if declared is not None else ()
