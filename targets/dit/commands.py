"""`crucible dit plan`: every valid parallel plan of one request on a topology, fastest first."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from targets.base import Command, CommandResult, Option, OptionError

from .cost import StepCost, ranked
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
    rows = [_row(i + 1, c, cluster.span(gpus)) for i, c in enumerate(costs)]
    m = request.model
    outside = m.outside_s(request.height, request.width, request.frames)
    title = (
        f"{m.name} {request.height}x{request.width}"
        + (f"x{request.frames}f" if m.video else "")
        + f", {request.steps} steps, {request.sequence} tokens, on {count} of {cluster.name}"
        + (f"; {outside:.1f} s outside the transformer in every plan" if outside else "")
        + ("" if rows else ": no valid plan (memory or divisibility)")
    )
    columns = ("rank", "plan", "gpus", "links", "step_s", "total_s", "comm_share", "memory_gib")
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
    return CommandResult(title, columns, rows, data)


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


COMMANDS = (
    Command(
        "plan",
        "rank every valid parallel plan (Ulysses, ring, CFG, PipeFusion, tensor) of one request by its "
        "predicted latency on a topology; --list shows the models and topologies",
        PLAN_ARGUMENTS,
        plan,
    ),
)
