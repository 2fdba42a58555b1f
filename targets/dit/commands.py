"""`crucible dit plan`: every valid parallel plan of one request on a topology, fastest first, and where
each one's time and memory go (`--explain`); `crucible dit check`: the cost model against every published
measurement (measurements.toml)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from targets.base import Command, CommandResult, Option, OptionError

from .cost import HIDDEN_PARTS, ONCE_PARTS, STEP_PARTS, StepCost, ranked
from .fidelity import HALVES, Verdict, label, summarize, tables, verdicts
from .models import MODELS, model
from .plans import Request
from .pricing import gpu_pricing
from .topology import TOPOLOGIES, topology

GiB = 2**30

PLAN_ARGUMENTS = (
    Option("model", "str", None, "the DiT to serve", choices=tuple(MODELS)),
    Option("height", "int", None, "image height in pixels (default: the model's)", low=1),
    Option("width", "int", None, "image width in pixels (default: the model's)", low=1),
    Option("frames", "int", None, "video frames (default: the model's; 1 for images)", low=1),
    Option("steps", "int", None, "denoising steps (default: the model's)", low=1),
    Option("gpus", "int", None, "GPUs to use, the first of the topology", low=1),
    Option("topology", "str", None, "the cluster", choices=tuple(TOPOLOGIES)),
    Option("list", "bool", False, "list the models and topologies instead"),
    Option("explain", "bool", False, "break each plan's step time and memory per GPU down by part"),
)


def request_of(values: Mapping[str, Any]) -> Request:
    """The request the arguments describe, the model's own size and steps where none is given."""
    m = model(values["model"])
    height, width, frames, steps = m.default
    request = Request(
        m,
        int(values.get("height") or height),
        int(values.get("width") or width),
        int(values.get("frames") or (frames if m.video else 1)),
        int(values.get("steps") or steps),
    )
    request.model.grid(request.height, request.width, request.frames)  # a size that does not patch fails
    return request


def _row(rank: int, cost: StepCost, span: str) -> dict[str, Any]:
    p = cost.plan
    return {
        "rank": rank,
        "plan": p.label,
        "cfg": p.cfg,
        "pipefusion": p.pipefusion,
        "patches": p.patches,
        "ring": p.ring,
        "ulysses": p.ulysses,
        "tensor": p.tensor,
        "gpus": ",".join(str(g) for g in p.gpus),
        "links": span,
        "step_s": cost.step_s,
        "outside_s": cost.outside_s,
        "total_s": cost.total_s,
        "comm_share": cost.comm_share,
        "memory_gib": cost.memory_bytes / GiB,
    }


def _explained(cost: StepCost) -> dict[str, Any]:
    """Where a plan's time goes per step, what it overlaps, what a request pays once, and its memory."""
    m = cost.memory
    memory = {"weights": m.weights, "activations": m.activations, "kv": m.kv, "stale_kv": m.stale_kv,
              "ring_buffer": m.ring_buffer}  # fmt: skip
    return {
        "pipelined_steps": cost.pipelined_steps,
        "step_parts": dict(cost.parts),
        "overlapped": dict(cost.hidden),
        "request_parts": dict(cost.once),
        "memory_gib_parts": {k: v / GiB for k, v in memory.items()},
    }


def _explain_columns(rows: list[dict[str, Any]]) -> tuple[str, ...]:
    """The table's columns under --explain: the parts some plan spends time or memory on."""
    used = {k for r in rows for group in ("step_parts", "request_parts", "memory_gib_parts")
            for k, v in r[group].items() if v > 0}  # fmt: skip
    hidden = any(v > 0 for r in rows for v in r["overlapped"].values())
    return (
        "rank", "plan", "step_s",
        *(p for p in STEP_PARTS if p in used),
        *(("overlapped",) if hidden else ()),
        *(p for p in ONCE_PARTS if p in used),
        "total_s", "memory_gib",
        *(f"mem_{p}" for p in ("weights", "activations", "kv", "stale_kv", "ring_buffer") if p in used),
    )  # fmt: skip


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    """A --explain row as the table shows it: every part in its own column."""
    return {**row, **row["step_parts"], **row["request_parts"], "overlapped": sum(row["overlapped"].values()),
            **{f"mem_{k}": v for k, v in row["memory_gib_parts"].items()}}  # fmt: skip


def plan(values: Mapping[str, Any]) -> CommandResult:
    """Rank every valid plan of the request on the first `gpus` GPUs of the topology."""
    if values.get("list"):
        return listing()
    missing = [f"--{n}" for n in ("model", "gpus", "topology") if values.get(n) is None]
    if missing:
        raise OptionError(f"dit plan needs {', '.join(missing)} (or --list)")
    request = request_of(values)
    cluster = topology(values["topology"])
    count = int(values["gpus"])
    cluster.check_gpus(count)
    gpus = tuple(range(count))
    costs = ranked(request, gpus, gpu_pricing(cluster))
    if not costs:
        m = request.model
        pricing = gpu_pricing(cluster)
        fitting = [
            n for n in range(1, cluster.gpus + 1) if n != count and ranked(request, tuple(range(n)), pricing)
        ]
        hint = (
            f"GPU counts with a valid plan: {', '.join(map(str, fitting))}"
            if fitting
            else (
                f"no GPU count of {values['topology']} has one (a smaller resolution or fewer frames may fit)"
            )
        )
        raise OptionError(
            f"no valid plan of {m.name} on {count} GPUs: the degrees must multiply to {count}, Ulysses and "
            f"tensor degrees divide its {m.heads} heads, each patch's {request.sequence} tokens split evenly "
            f"and the memory fit; {hint}"
        )
    rows = [_row(i + 1, c, cluster.span(gpus)) for i, c in enumerate(costs)]
    explain = bool(values.get("explain"))
    if explain:
        rows = [{**row, **_explained(c)} for row, c in zip(rows, costs, strict=True)]
    m = request.model
    outside = m.outside_s(request.height, request.width, request.frames)
    title = (
        f"{m.name} {request.height}x{request.width}"
        + (f"x{request.frames}f" if m.video else "")
        + f", {request.steps} steps, {request.sequence} tokens, on {count} of {cluster.name}"
        + (f"; {outside:.1f} s outside the transformer in every plan" if outside else "")
    )
    columns = ("rank", "plan", "gpus", "links", "step_s", "total_s", "comm_share", "memory_gib")
    if explain:
        columns = _explain_columns(rows)
        title += "; seconds per pipelined step by part, then per request, and GiB per GPU"
    data = {
        "model": m.name,
        "height": request.height,
        "width": request.width,
        "frames": request.frames,
        "steps": request.steps,
        "tokens": request.sequence,
        "topology": cluster.name,
        "plans": rows,
    }
    if explain:
        data["parts"] = {"step": STEP_PARTS, "overlapped": HIDDEN_PARTS, "request": ONCE_PARTS}
    return CommandResult(title, columns, [_flat(r) for r in rows] if explain else rows, data)


def listing() -> CommandResult:
    """The models and topologies by the names `dit plan` takes."""
    rows = [
        {
            "kind": "model",
            "name": m.name,
            "shape": f"{m.blocks} blocks, hidden {m.hidden}, {m.heads}x{m.head_dim} heads, "
            f"{m.params / 1e9:g}B params, {'CFG' if m.cfg else 'no CFG'}, text {m.text} {m.text_tokens}",
            "default": f"{m.default[0]}x{m.default[1]}"
            + (f"x{m.default[2]}f" if m.video else "")
            + f", {m.default[3]} steps",
            "source": m.source,
        }
        for m in MODELS.values()
    ] + [
        {
            "kind": "topology",
            "name": t.name,
            "shape": t.doc,
            "default": f"{t.gpus} x {t.gpu.name}",
            "source": f"{t.socket_link.name}; {t.node_link.name}" + ("; network" if t.nodes > 1 else ""),
        }
        for t in TOPOLOGIES.values()
    ]
    data = {"models": [r["name"] for r in rows if r["kind"] == "model"],
            "topologies": [r["name"] for r in rows if r["kind"] == "topology"]}  # fmt: skip
    return CommandResult(
        "DiT models and topologies", ("kind", "name", "shape", "default", "source"), rows, data
    )


CHECK_ARGUMENTS = (
    Option("half", "str", "all", "which half of the split to show", choices=(*HALVES, "all")),
    Option("table", "str", None, "one table's plans, published and predicted, fastest predicted first"),
    Option("out", "str", None, "also write the result's data as JSON to this file"),
)


def _figures(found: list[Verdict], half: str) -> dict[str, Any]:
    s = summarize(found, half)
    return {"tables": s.tables, "top1": s.top1, "top3": s.top3, "tau_median": s.tau_median,
            "error_median": s.error_median, "error_worst": s.error_worst, "times": s.times}  # fmt: skip


def _verdict(v: Verdict) -> dict[str, Any]:
    errors = [abs(e) for e in v.errors]
    return {
        "table": v.table.id, "half": v.table.half, "kind": v.table.kind, "model": v.table.model,
        "topology": v.table.topology, "published_best": label(v.published_best),
        "predicted_best": label(v.plans[0].degrees), "published_rank": v.published_rank,
        "plans": len(v.plans), "top1": v.top1, "top3": v.top3, "tau": v.tau,
        "error_median": sorted(errors)[len(errors) // 2] if errors else None,
        "error_worst": max(errors) if errors else None, "source": v.table.source, "note": v.table.note,
        "compiled": v.table.compiled, "topology_assumed": v.table.topology_assumed,
        "rows": [{"plan": label(c.degrees), "published_s": c.published_s, "predicted_s": c.predicted_s,
                  "error": c.error} for c in v.plans],
    }  # fmt: skip


def check(values: Mapping[str, Any]) -> CommandResult:
    """Every published table against the cost model: per table and per half of the split."""
    result = _check(values)
    if values.get("out"):
        try:
            Path(values["out"]).write_text(json.dumps(result.data, indent=2, sort_keys=True) + "\n")
        except OSError as exc:
            raise OptionError(f"option out cannot write {values['out']} ({exc.strerror})") from None
    return result


def _check(values: Mapping[str, Any]) -> CommandResult:
    half = values.get("half") or "all"
    found = verdicts()
    if values.get("table"):
        chosen = [v for v in found if v.table.id == values["table"]]
        if not chosen:
            known = ", ".join(v.table.id for v in found)
            raise OptionError(f"option table names no table {values['table']!r}; tables: {known}")
        v = _verdict(chosen[0])
        rows = [{"rank": i + 1, **r} for i, r in enumerate(v["rows"])]
        columns = ("rank", "plan", "published_s", "predicted_s", "error")
        return CommandResult(f"{v['table']} ({v['source']})", columns, rows, {"table": v})
    data: dict[str, Any] = {
        "summary": {h: _figures(found, h) for h in HALVES if half in ("all", h)},
        "tables": [_verdict(v) for v in found if half in ("all", v.table.half)],
        "excluded": [{"table": t.id, "model": t.model, "why": t.excluded} for t in tables() if t.excluded],
    }
    title = "; ".join(
        f"{h}: top-1 {f['top1']:.0%}, top-3 {f['top3']:.0%} of {f['tables']} tables, median |error| "
        f"{f['error_median']:.0%} (worst {f['error_worst']:.0%}) over {f['times']} times"
        for h, f in data["summary"].items()
    )
    columns = ("table", "half", "published_best", "predicted_best", "published_rank", "plans", "tau",
               "error_median", "error_worst")  # fmt: skip
    return CommandResult(title, columns, data["tables"], data)


COMMANDS = (
    Command(
        "plan",
        "rank every valid parallel plan (Ulysses, ring, CFG, PipeFusion, tensor) of one request by its "
        "predicted latency on a topology; --explain breaks each plan's time and memory down by part; "
        "--list shows the models and topologies",
        PLAN_ARGUMENTS,
        plan,
    ),
    Command(
        "check",
        "compare the cost model with every published DiT latency (targets/dit/measurements.toml): per "
        "table the published best plan's rank, Kendall's tau and relative errors; per half of the split "
        "top-1, top-3 and the median and worst error; --table shows one table's plans",
        CHECK_ARGUMENTS,
        check,
    ),
)
