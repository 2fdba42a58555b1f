"""MkDocs hook: a line `{{ result NAME }}` in a page becomes the figures of docs/results/NAME.json, stamped
with the command that wrote them, its commit, date and machine, so a figure and its command cannot disagree.

`{{ result NAME PATH }}` shows one part of the data only: PATH is a dotted path to a table (a list of
rows), a mapping of rows (by name) or a mapping; several paths joined by commas make one table (a mapping
is one row), e.g.
`{{ result kv_search best,baselines }}`. A row's nested mappings (a candidate's `metrics`) become columns of
their own; `columns=a,b,c` keeps some columns, in that order; `sort=-a` orders the rows by a column
(descending with the minus). A missing file, a PATH that names nothing or a quick
bench's figures fail the build. The found candidate's row is named `found #N`.

`{{ chart NAME PATH metric=M }}` draws the same rows as a bar chart (docs/charts.py): the found policy,
each baseline and the oracle bound on one axis. Several files (`{{ chart A,B holdout.rows metric=tail }}`,
held-out seeds) are drawn side by side, a series each, named by their command's `--seed`.

`{{ timeline NAME:PATH=LABEL ... }}` draws figures over time (a serving fleet's queue and hit rate per
instance, as `crucible eval --json` and `crucible baselines --json` keep them under `timelines`): one column
per NAME:PATH, labelled LABEL, one row per series, a line per instance.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from charts import grouped, lines
from mkdocs.exceptions import PluginError
from record import RESULTS, read

PLACEHOLDER = re.compile(r"^\{\{ result (?P<name>[\w.-]+)(?P<rest>[^}]*)\}\}$", re.MULTILINE)
CHART = re.compile(r"^\{\{ chart (?P<names>[\w.,-]+)(?P<rest>[^}]*)\}\}$", re.MULTILINE)
TIMELINE = re.compile(r"^\{\{ timeline (?P<rest>[^}]*)\}\}$", re.MULTILINE)


def number(value: Any) -> str:
    """Figures as a reader compares them: four significant digits, thousands grouped, whole counts whole."""
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value)
    if value.is_integer() and abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 1000:
        return f"{value:,.1f}"
    return f"{value:.4g}"


def cell(value: Any) -> str:
    if isinstance(value, list | dict):
        value = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
    return " ".join(number(value).split()).replace("|", "\\|")


def rows_table(rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    header = columns or list(dict.fromkeys(k for row in rows for k in row))
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(row.get(c, "")) for c in header) + " |" for row in rows]
    return "\n".join(lines)


def named_rows(value: Any) -> Any:
    """A mapping of mappings (each baseline's metrics, by name) as rows with a `name`; else as it is."""
    if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
        return [{"name": k, **v} for k, v in value.items()]
    return value


def flat(row: dict[str, Any]) -> dict[str, Any]:
    """A row with its nested mappings' scalars as columns of its own (lists left out); the found candidate
    (a row with a label and no name) named `found #N`."""
    out = {k: v for k, v in row.items() if not isinstance(v, list | dict)}
    if "label" in out and not out.get("name"):
        out["name"] = f"found {out['label']}"
    for value in row.values():
        if isinstance(value, dict):
            out |= {k: v for k, v in value.items() if not isinstance(v, list | dict) and k not in out}
    return out


def part(value: Any, columns: list[str] | None = None) -> str:
    """A table for a list of rows or a mapping; a line for anything else."""
    if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
        return rows_table([flat(r) for r in value], columns)
    if isinstance(value, dict):
        scalars = {k: v for k, v in value.items() if not isinstance(v, list | dict)}
        return rows_table([{"": k, "value": v} for k, v in scalars.items()], None)
    return cell(value)


def stamp(record: dict[str, Any], name: str) -> str:
    """Who measured it, where and when; a loaded machine is said in a warning."""
    m = record["machine"]
    load = ", ".join(number(float(x)) for x in m["load_average"])
    line = (
        f"`{record['command']}` at commit `{record['commit']}`, {record['date']}; {m['cores']} cores, "
        f"{number(float(m['memory_gib']))} GiB, load average {load} at the start "
        f"([{name}.json](results/{name}.json))"
    )
    if record["loaded"]:
        line += (
            '\n\n!!! warning "Measured on a loaded machine"\n    Other work was running '
            f"(load average {load} on {m['cores']} cores at the start): timings are slower than idle."
        )
    return f"<small>{line}</small>" if not record["loaded"] else line


def select(data: Any, path: str, name: str) -> Any:
    for key in path.split("."):
        if isinstance(data, dict) and key in data:
            data = data[key]
        elif isinstance(data, list) and key.isdigit() and int(key) < len(data):
            data = data[int(key)]
        else:
            raise PluginError(f"results/{name}.json holds nothing at {path!r} (at {key!r})")
    return data


def render(name: str, rest: str, page_path: str) -> str:
    path = RESULTS / f"{name}.json"
    if not path.is_file():
        raise PluginError(
            f"{page_path}: no results file {path} (record it: docs/record.py or a bench's --record)"
        )
    record = read(path)
    if "--quick" in shlex.split(record["command"]):
        raise PluginError(f"{path}: recorded by a --quick run; a page shows full runs only")
    words = rest.split()
    columns = next((w.split("=", 1)[1].split(",") for w in words if w.startswith("columns=")), None)
    selected = [w for w in words if not w.startswith(("columns=", "sort="))]
    depth = "../" * page_path.count("/")
    shown = stamp(record, name).replace("](results/", f"]({depth}results/")
    if selected:
        chosen = [select(record["data"], path, name) for path in selected[0].split(",")]
        rows = [r for c in chosen for r in (c if isinstance(c, list) else [c])]
        value: Any = rows if len(chosen) > 1 or isinstance(chosen[0], list) else named_rows(chosen[0])
        order = next((w.split("=", 1)[1] for w in words if w.startswith("sort=")), "")
        if order and isinstance(value, list):
            key = order.lstrip("-")
            value = sorted(value, key=lambda r: flat(r).get(key, 0), reverse=order.startswith("-"))
        return part(value, columns) + "\n\n" + shown
    parts = []
    for key, value in record["data"].items():
        parts.append(
            f"**{key}**: {cell(value)}"
            if not isinstance(value, list | dict)
            else f"**{key}**\n\n{part(value)}"
        )
    return "\n\n".join([*parts, shown])


def _recorded(name: str, page_path: str) -> dict[str, Any]:
    path = RESULTS / f"{name}.json"
    if not path.is_file():
        raise PluginError(
            f"{page_path}: no results file {path} (record it: docs/record.py or a bench's --record)"
        )
    record = read(path)
    if "--quick" in shlex.split(record["command"]):
        raise PluginError(f"{path}: recorded by a --quick run; a page shows full runs only")
    return record


def _kind(row: dict[str, Any]) -> str:
    if row.get("oracle"):
        return "oracle"
    return "found" if row.get("kind") == "found" or ("label" in row and not row.get("name")) else "baseline"


def chart(names: str, rest: str, page_path: str) -> str:
    """The rows a `{{ result }}` line would show, as bars of one metric: one series per file."""
    words = rest.split()
    (path,) = [w for w in words if "=" not in w] or ["best,baselines"]
    metric = next((w.split("=", 1)[1] for w in words if w.startswith("metric=")), "")
    if not metric:
        raise PluginError(f"{page_path}: a chart names its metric=")
    series: dict[str, dict[str, tuple[str, float]]] = {}
    for name in names.split(","):
        record = _recorded(name, page_path)
        seed = re.search(r"--seed (\d+)", record["command"])
        key = f"seed {seed[1]}" if seed and "," in names else ""
        chosen = [select(record["data"], p, name) for p in path.split(",")]
        for row in (r for c in chosen for r in (c if isinstance(c, list) else [c])):
            shown = flat(row)
            value = shown.get(metric)
            if isinstance(value, int | float):
                series.setdefault(key, {})[str(shown.get("name", ""))] = (_kind(row), float(value))
    policies: dict[str, tuple[str, dict[str, float]]] = {}
    for key, rows in series.items():
        for policy, (kind, value) in rows.items():
            policies.setdefault(policy, (kind, {}))[1][key] = value
    ordered = sorted(policies.items(), key=lambda kv: -max(kv[1][1].values()))
    title = f"{metric}: found, baselines and the bound"
    svg = grouped(title, metric, [(policy, kind, values) for policy, (kind, values) in ordered])
    return f'<figure markdown="0">\n{svg}\n</figure>'


def timeline(rest: str, page_path: str) -> str:
    """Each NAME:PATH=LABEL's timelines ({step_s, series}) as small multiples, a column per label."""
    panels = []
    for word in rest.split():
        where, _, label = word.partition("=")
        name, _, path = where.partition(":")
        if not (name and path and label):
            raise PluginError(f"{page_path}: a timeline names NAME:PATH=LABEL, got {word!r}")
        kept = select(_recorded(name, page_path)["data"], path, name)
        for series, lanes in kept["series"].items():
            panels.append((label, series, lanes, float(kept["step_s"])))
    svg = lines("each instance over the window", panels)
    return f'<figure markdown="0">\n{svg}\n</figure>'


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Replace each placeholder line of the page with its figures, each chart line with its chart."""
    markdown = CHART.sub(lambda m: chart(m["names"], m["rest"], page.file.src_uri), markdown)
    markdown = TIMELINE.sub(lambda m: timeline(m["rest"], page.file.src_uri), markdown)
    return PLACEHOLDER.sub(lambda m: render(m["name"], m["rest"], page.file.src_uri), markdown)
