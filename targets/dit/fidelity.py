"""The cost model against every published DiT measurement (measurements.toml), and the fit of its few
constants on the calibration half.

A "latency" table is ranked among its own rows; a "best" table among every plan xDiT can run for the model
on that many GPUs (its `methods`, degrees multiplying to the GPUs, Ulysses dividing the heads, the memory
fitting). A PipeFusion plan runs xDiT's default patch count, its degree. Per table: top-1 (the cost model's
fastest plan is the published one), top-3 (the published best is among the cost model's three fastest),
Kendall's tau-b of the rows' order, and each published time's relative error.
"""

from __future__ import annotations

import functools
import itertools
import math
import statistics
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any

from .cost import step_cost
from .models import MODELS
from .plans import Plan, Request
from .pricing import Calibration, Pricing, gpu_pricing, scaled_pricing
from .topology import H100, TOPOLOGIES, Topology

DEGREES = ("cfg", "pipefusion", "ring", "ulysses", "tensor")
"""The degrees a published plan names (any not named is 1)."""
HALVES = ("calibration", "check")

Degrees = tuple[int, int, int, int, int]
"""(cfg, pipefusion, ring, ulysses, tensor)."""


@dataclass(frozen=True)
class Row:
    """One published plan and its seconds (None where only its rank is published)."""

    degrees: Degrees
    seconds: float | None


@dataclass(frozen=True)
class Table:
    """One published table or best-plan statement, as measurements.toml states it."""

    id: str
    kind: str
    model: str
    half: str
    source: str
    size: tuple[int, int, int, int] = (0, 0, 0, 0)
    topology: str = ""
    rows: tuple[Row, ...] = ()
    gpus: int = 0
    methods: tuple[str, ...] = ()
    best: Row | None = None
    note: str = ""
    excluded: str = ""
    compiled: bool = False
    """Measured under torch.compile (the source says so); otherwise eager PyTorch, xDiT's default."""
    topology_assumed: str = ""
    """Why the topology was chosen where the source does not name the machine's interconnect."""

    @property
    def request(self) -> Request:
        return Request(MODELS[self.model], *self.size, compiled=self.compiled)


def label(degrees: Degrees) -> str:
    """A plan's degrees as xDiT's flags read: "cfg2 x ulysses2"; "single" for one GPU."""
    named = [f"{name}{d}" for name, d in zip(DEGREES, degrees, strict=True) if d > 1]
    return " x ".join(named) or "single"


def _degrees(entry: Mapping[str, Any]) -> Degrees:
    unknown = set(entry) - {*DEGREES, "seconds"}
    if unknown:
        raise ValueError(f"unknown plan keys {sorted(unknown)}")
    return tuple(int(entry.get(name, 1)) for name in DEGREES)  # type: ignore[return-value]


def _row(entry: Mapping[str, Any]) -> Row:
    seconds = entry.get("seconds")
    return Row(_degrees(entry), None if seconds is None else float(seconds))


@functools.cache
def tables() -> tuple[Table, ...]:
    """Every table of the shipped measurements.toml, each with its half of the split by model."""
    data = tomllib.loads(resources.files("targets.dit").joinpath("measurements.toml").read_text())
    halves = {name: half for half in HALVES for name in data["split"][half]}
    found = []
    for entry in data["table"]:
        excluded = entry.get("excluded", "")
        if not excluded and entry["model"] not in halves:
            raise ValueError(f"{entry['id']}: model {entry['model']} is in neither half of the split")
        best = entry.get("best")
        found.append(Table(
            entry["id"], entry["kind"], entry["model"], halves.get(entry["model"], "excluded"),
            entry["source"], tuple(entry.get("size", (0, 0, 0, 0))), entry.get("topology", ""),
            tuple(_row(r) for r in entry.get("rows", ())), int(entry.get("gpus", 0)),
            tuple(entry.get("methods", ())),
            None if best is None else Row(_degrees(best), entry.get("seconds")),
            entry.get("note", ""), excluded, bool(entry.get("compiled", False)),
            entry.get("topology_assumed", ""),
        ))  # fmt: skip
    return tuple(found)


def plan_of(degrees: Degrees) -> Plan:
    """The plan on the first GPUs, PipeFusion at xDiT's default patch count (its degree)."""
    cfg, pipefusion, ring, ulysses, tensor = degrees
    gpus = tuple(range(math.prod(degrees)))
    return Plan(cfg, pipefusion, pipefusion, ring, ulysses, tensor, gpus)


def candidates(table: Table, pricing: Pricing) -> list[Degrees]:
    """Every plan xDiT can run for a "best" table: its methods only, valid, fitting the GPUs' memory."""
    m = MODELS[table.model]
    n = table.gpus
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    found = []
    for degrees in itertools.product(divisors, repeat=len(DEGREES)):
        cfg, pipefusion, _, ulysses, tensor = degrees
        used = {name for name, d in zip(DEGREES, degrees, strict=True) if d > 1}
        if math.prod(degrees) != n or not used <= set(table.methods) or m.heads % (ulysses * tensor):
            continue
        if cfg > 2 or (cfg > 1 and not m.cfg) or pipefusion > m.blocks:
            continue
        cost = step_cost(table.request, plan_of(degrees), pricing)  # type: ignore[arg-type]
        if cost.memory_bytes <= pricing.topology.gpu.memory_bytes:
            found.append(degrees)
    return found  # type: ignore[return-value]


@dataclass(frozen=True)
class Compared:
    """One plan of a table: the published seconds (None if not published) and the cost model's."""

    degrees: Degrees
    published_s: float | None
    predicted_s: float

    @property
    def error(self) -> float | None:
        """Relative error of the predicted time, None without a published time."""
        return None if self.published_s is None else self.predicted_s / self.published_s - 1.0


@dataclass(frozen=True)
class Verdict:
    """A table's comparison: its plans, fastest predicted first, and how the published ranking fares."""

    table: Table
    plans: tuple[Compared, ...]
    published_best: Degrees
    published_rank: int
    """1-based place of the published best plan in the cost model's order (0: not a valid plan here)."""
    tau: float | None
    """Kendall's tau-b between published and predicted times (latency tables of 3+ rows)."""

    @property
    def top1(self) -> bool:
        return self.published_rank == 1

    @property
    def top3(self) -> bool:
        return 1 <= self.published_rank <= 3

    @property
    def errors(self) -> list[float]:
        return [e for p in self.plans if (e := p.error) is not None]


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b: concordant minus discordant pairs over the pairs not tied in each ranking."""
    concordant = discordant = ties_a = ties_b = 0
    for i, j in itertools.combinations(range(len(a)), 2):
        sa, sb = (
            math.copysign(1, a[i] - a[j]) if a[i] != a[j] else 0,
            (math.copysign(1, b[i] - b[j]) if b[i] != b[j] else 0),
        )
        if sa == 0 and sb == 0:
            continue
        if sa == 0:
            ties_a += 1
        elif sb == 0:
            ties_b += 1
        elif sa == sb:
            concordant += 1
        else:
            discordant += 1
    pairs = concordant + discordant
    denominator = math.sqrt((pairs + ties_a) * (pairs + ties_b))
    return (concordant - discordant) / denominator if denominator else 0.0


def compare(table: Table, pricing: Pricing) -> Verdict:
    """The cost model's order of a table's plans, and where the published best lands in it."""
    request = table.request
    if table.kind == "latency":
        priced = [Compared(r.degrees, r.seconds, _total(request, r.degrees, pricing)) for r in table.rows]
        published_best = min(table.rows, key=lambda r: r.seconds or math.inf).degrees
    else:
        assert table.best is not None
        published_best = table.best.degrees
        priced = [
            Compared(d, table.best.seconds if d == published_best else None, _total(request, d, pricing))
            for d in candidates(table, pricing)
        ]
    order = sorted(priced, key=lambda c: (c.predicted_s, label(c.degrees)))
    rank = next((i + 1 for i, c in enumerate(order) if c.degrees == published_best), 0)
    tau = None
    if table.kind == "latency" and len(priced) >= 3:
        tau = kendall_tau([c.published_s or 0.0 for c in priced], [c.predicted_s for c in priced])
    return Verdict(table, tuple(order), published_best, rank, tau)


def _total(request: Request, degrees: Degrees, pricing: Pricing) -> float:
    return step_cost(request, plan_of(degrees), pricing).total_s


def verdicts(pricing_of: Callable[[Topology], Pricing] = gpu_pricing) -> list[Verdict]:
    """Every table not excluded, compared under the pricing each topology gets."""
    return [compare(t, pricing_of(TOPOLOGIES[t.topology])) for t in tables() if not t.excluded]


@dataclass(frozen=True)
class Summary:
    """A half's figures: agreement with the published best plans, ranking, and absolute-time errors."""

    half: str
    tables: int
    top1: float
    top3: float
    tau_median: float | None
    error_median: float
    error_worst: float
    times: int


def summarize(found: Iterable[Verdict], half: str) -> Summary:
    """The figures of one half (top-1 and top-3 as shares of its tables; errors as absolute shares)."""
    mine = [v for v in found if v.table.half == half]
    taus = [v.tau for v in mine if v.tau is not None]
    errors = [abs(e) for v in mine for e in v.errors]
    return Summary(
        half, len(mine), sum(v.top1 for v in mine) / len(mine), sum(v.top3 for v in mine) / len(mine),
        statistics.median(taus) if taus else None, statistics.median(errors), max(errors), len(errors),
    )  # fmt: skip


def calibrate(rounds: int = 3) -> Calibration:
    """Fit the constants on the calibration half's published times, minimizing squared log error: the two
    host overheads on H100 rows (whose kernels are measured), then each other GPU's efficiency on its rows."""
    rows = [(t, r) for t in tables() if t.half == "calibration" and not t.excluded for r in _timed(t)]
    fitted = Calibration(0.0, 0.0, {})
    on_h100 = [(t, r) for t, r in rows if TOPOLOGIES[t.topology].gpu == H100]
    for _ in range(rounds):
        for name in ("block_overhead_s", "ring_step_overhead_s"):
            fitted = replace(fitted, **{name: _line_search(_fit_loss(on_h100, fitted, name), 0.0, 1e-3)})
    efficiency = {}
    for gpu in sorted({TOPOLOGIES[t.topology].gpu.name for t, _ in rows} - {H100.name}):
        mine = [(t, r) for t, r in rows if TOPOLOGIES[t.topology].gpu.name == gpu]
        efficiency[gpu] = math.exp(_line_search(_fit_loss(mine, fitted, gpu), -2.0, 2.0))
    return replace(fitted, efficiency=efficiency)


def _fit_loss(
    rows: Sequence[tuple[Table, Row]], calibration: Calibration, constant: str
) -> Callable[[float], float]:
    """The loss as a function of one constant: an overhead by its field name, or a GPU's log-efficiency."""
    if constant in ("block_overhead_s", "ring_step_overhead_s"):
        return lambda x: _loss(rows, replace(calibration, **{constant: x}))
    return lambda x: _loss(rows, replace(calibration, efficiency={constant: math.exp(x)}))


def _timed(table: Table) -> list[Row]:
    """The table's plans that have a published time."""
    rows = list(table.rows) + ([table.best] if table.best is not None else [])
    return [r for r in rows if r.seconds is not None]


def _loss(rows: Sequence[tuple[Table, Row]], calibration: Calibration) -> float:
    total = 0.0
    for table, row in rows:
        pricing = scaled_pricing(TOPOLOGIES[table.topology], calibration)
        assert row.seconds is not None
        total += math.log(_total(table.request, row.degrees, pricing) / row.seconds) ** 2
    return total


def _line_search(loss: Callable[[float], float], low: float, high: float, iterations: int = 48) -> float:
    """The minimum of a unimodal loss on [low, high] by golden-section search."""
    ratio = (math.sqrt(5) - 1) / 2
    a, b = low, high
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = loss(c), loss(d)
    for _ in range(iterations):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = loss(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = loss(d)
    return (a + b) / 2
