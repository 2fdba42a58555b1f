"""DiT request streams: a documented trace format (JSON Lines) and a seeded generator.

Trace format: one JSON object per line, in arrival order:
    {"arrival_s": 0.0, "model": "flux.1-dev", "height": 1024, "width": 1024, "frames": 1, "steps": 28,
     "deadline_s": 12.0}
`arrival_s` is seconds from the start (non-decreasing); `deadline_s` is seconds after arrival by which the
request must finish; `frames` is 1 for image models; the model is one of `crucible dit plan --list`.

Generator `gen:<mix>:<seed>`: Poisson arrivals of a mix of requests; each request's deadline is `slo_scale`
times the time its fastest plan takes alone on the whole cluster, and the arrival rate is `load` times what
the cluster serves if every request ran on one GPU (its most efficient plan).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from targets.base import WorkloadError

from .models import MODELS, model
from .plans import Request

FIELDS = ("arrival_s", "model", "height", "width", "frames", "steps", "deadline_s")


@dataclass(frozen=True)
class Arrival:
    """One request of a stream: what it asks for, when it arrives, how long it may take."""

    request: Request
    arrival_s: float
    deadline_s: float
    """Seconds after arrival."""


MIXES: dict[str, tuple[tuple[str, int, int, int, int, float], ...]] = {
    # model, height, width, frames, steps, weight
    "images": (
        ("flux.1-dev", 1024, 1024, 1, 28, 3.0),
        ("flux.1-dev", 2048, 2048, 1, 28, 1.0),
        ("sd3-medium", 1024, 1024, 1, 28, 2.0),
        ("pixart-sigma", 1024, 1024, 1, 20, 2.0),
        ("pixart-sigma", 2048, 2048, 1, 20, 1.0),
        ("hunyuandit", 1024, 1024, 1, 50, 1.0),
    ),
    "mixed": (
        ("flux.1-dev", 1024, 1024, 1, 28, 4.0),
        ("flux.1-dev", 2048, 2048, 1, 28, 1.0),
        ("sd3-medium", 1024, 1024, 1, 28, 3.0),
        ("pixart-sigma", 2048, 2048, 1, 20, 2.0),
        ("cogvideox-5b", 480, 720, 49, 50, 0.5),
        ("hunyuanvideo", 544, 960, 65, 30, 0.25),
    ),
}
"""Request mixes of the generator: the models' own sizes, and larger images where the model makes them."""


def load_trace(path: str) -> list[Arrival]:
    """The requests of a JSON Lines trace; WorkloadError names the line and the field that is wrong."""
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"{path}: cannot read the trace ({exc})") from None
    found: list[Arrival] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path}:{number}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict) or set(row) != set(FIELDS):
            raise WorkloadError(f"{path}:{number}: expected exactly the fields {', '.join(FIELDS)}")
        found.append(_arrival(row, f"{path}:{number}"))
        if len(found) > 1 and found[-1].arrival_s < found[-2].arrival_s:
            raise WorkloadError(f"{path}:{number}: arrivals must not go back in time")
    if not found:
        raise WorkloadError(f"{path}: the trace has no requests")
    return found


def _arrival(row: dict[str, object], where: str) -> Arrival:
    numbers = {}
    for name in ("arrival_s", "deadline_s"):
        value = row[name]
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise WorkloadError(f"{where}: {name} must be a number, got {value!r}")
        numbers[name] = float(value)
    for name in ("height", "width", "frames", "steps"):
        value = row[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise WorkloadError(f"{where}: {name} must be a positive whole number, got {value!r}")
    if numbers["arrival_s"] < 0 or numbers["deadline_s"] <= 0:
        raise WorkloadError(f"{where}: arrival_s must be >= 0 and deadline_s > 0")
    try:
        m = model(str(row["model"]))
        request = Request(m, int(row["height"]), int(row["width"]), int(row["frames"]), int(row["steps"]))  # type: ignore[call-overload]
        m.grid(request.height, request.width, request.frames)
    except WorkloadError as exc:
        raise WorkloadError(f"{where}: {exc}") from None
    return Arrival(request, numbers["arrival_s"], numbers["deadline_s"])


def write_trace(arrivals: list[Arrival], path: str) -> None:
    """Write a stream in the trace format."""
    rows = [
        {
            "arrival_s": a.arrival_s,
            "model": a.request.model.name,
            "height": a.request.height,
            "width": a.request.width,
            "frames": a.request.frames,
            "steps": a.request.steps,
            "deadline_s": a.deadline_s,
        }
        for a in arrivals
    ]
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in rows))


def parse_generator(workload: str) -> tuple[str, int] | None:
    """(mix, seed) of a `gen:<mix>:<seed>` workload, None for a trace path; WorkloadError if malformed."""
    if not workload.startswith("gen:"):
        return None
    parts = workload.split(":")
    if len(parts) != 3 or parts[1] not in MIXES or not parts[2].isdigit():
        raise WorkloadError(f"{workload}: expected gen:<mix>:<seed> with mix one of {', '.join(MIXES)}")
    return parts[1], int(parts[2])


def generate(
    mix: str, seed: int, count: int, load: float, slo_scale: float, alone_s: dict[Request, float],
    one_gpu_s: dict[Request, float], gpus: int,
) -> list[Arrival]:  # fmt: skip
    """`count` seeded requests of `mix` arriving as a Poisson process at `load` of the cluster's capacity.

    `alone_s` is each kind's fastest time alone on the cluster (its deadline is `slo_scale` times that) and
    `one_gpu_s` its time on one GPU (the GPU-seconds its most efficient plan spends)."""
    kinds = [Request(MODELS[name], h, w, f, s) for name, h, w, f, s, _ in MIXES[mix]]
    weights = np.array([row[-1] for row in MIXES[mix]])
    weights /= weights.sum()
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(kinds), size=count, p=weights)
    work = float(sum(w * one_gpu_s[k] for w, k in zip(weights, kinds, strict=True)))
    rate = load * gpus / work
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=count))
    arrivals -= arrivals[0]
    return [
        Arrival(kinds[c], float(t), slo_scale * alone_s[kinds[c]])
        for c, t in zip(chosen.tolist(), arrivals.tolist(), strict=True)
    ]


def kinds(mix: str) -> list[Request]:
    """The request kinds a mix draws from."""
    return [Request(MODELS[name], h, w, f, s) for name, h, w, f, s, _ in MIXES[mix]]
