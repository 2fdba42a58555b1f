"""The Target protocol and its feature registry: what every target declares so the loop stays generic."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from verifiers.program import Program, Signature
from verifiers.properties import Domain, Property

if TYPE_CHECKING:
    from targets.export import Export


@dataclass(frozen=True)
class Feature:
    """One named input of a decision function; rendered into prompts and used by the verifiers."""

    name: str
    unit: str
    low: float
    high: float
    doc: str
    integer: bool = False
    """Takes whole values only (a head count, a GPU count), which the verifier then assumes."""
    clock: bool = False
    """A moment on the trace's clock, not a span: it only grows, so comparing it to a constant splits the
    trace in time (a regime for its first minutes) and later traffic never sees but one side."""
    shared: bool = False
    """The same for every alternative of one decision (the arriving request, for a router choosing among
    instances): alone it cannot change which alternative wins, only which rule picks it (a regime)."""

    @property
    def shown_unit(self) -> str:
        """The unit as prompts and tables show it: a clock feature says so beside it."""
        return f"{self.unit}, clock" if self.clock else self.unit


_NAMES = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""A name in a relation's text."""


@dataclass(frozen=True)
class FeatureRegistry:
    """The ordered features of one decision-function argument; the order fixes the column layout."""

    features: tuple[Feature, ...]
    relations: tuple[str, ...] = ()
    """Linear relations the mechanism guarantees between features, e.g. "age == now - last_access"."""

    def __post_init__(self) -> None:
        names = [f.name for f in self.features]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate feature names in registry: {names}")
        self.domain()  # a relation over unknown names fails here, when the target is built

    def domain(self) -> Domain:
        """The features' bounds and relations, as the verifier reads them."""
        integers = frozenset(f.name for f in self.features if f.integer)
        return Domain({f.name: (f.low, f.high) for f in self.features}, self.relations, integers)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.features)

    def columns(self) -> dict[str, int]:
        return {f.name: i for i, f in enumerate(self.features)}

    def only(self, names: Collection[str]) -> FeatureRegistry:
        """The registry narrowed to the named features, with the relations among them alone (what an engine
        exposes of it, say)."""
        kept = tuple(f for f in self.features if f.name in names)
        inside = {f.name for f in kept}
        relations = tuple(r for r in self.relations if set(_NAMES.findall(r)) <= inside)
        return FeatureRegistry(kept, relations)

    def __getitem__(self, name: str) -> Feature:
        for f in self.features:
            if f.name == name:
                return f
        raise KeyError(name)

    def __len__(self) -> int:
        return len(self.features)


@dataclass(frozen=True)
class Objective:
    """The primary metric of a target and whether larger is better."""

    metric: str
    direction: Literal["maximize", "minimize"]

    def better(self, a: float, b: float) -> bool:
        return a > b if self.direction == "maximize" else a < b


@dataclass(frozen=True)
class Instance:
    """One workload under one configuration; plain data so it crosses the sandbox boundary as JSON."""

    workload: str
    config: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""
    role: Literal["train", "eval"] = "eval"

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "config": dict(self.config),
            "label": self.label,
            "role": self.role,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Instance:
        return cls(
            workload=data["workload"],
            config=dict(data.get("config", {})),
            label=data.get("label", ""),
            role=data.get("role", "eval"),
        )


MOST = 10**12
"""The largest size (blocks, tokens, requests) an option takes: more than any machine holds or any trace
needs, and exact in the float64 a compiled mechanism computes in."""


TIMELINE = "timeline."
"""Metrics named `timeline.<series>.<lane>.<k>` are one figure over time, not figures of their own: point k
of series <series> (a queue length, a hit rate) for lane <lane> (a fleet's instance), `timeline.step_s`
seconds apart. Reports and tables leave them out; the run page draws them (`timelines`)."""


def timeline_metrics(series: Mapping[str, Sequence[Sequence[float]]], step_s: float) -> dict[str, float]:
    """Series of lanes over time (one row a lane) as metrics, named by TIMELINE's rule."""
    metrics = {f"{TIMELINE}step_s": float(step_s)}
    for name, lanes in series.items():
        for lane, points in enumerate(lanes):
            metrics.update({f"{TIMELINE}{name}.{lane}.{k}": float(v) for k, v in enumerate(points)})
    return metrics


def timelines(metrics: Mapping[str, float]) -> tuple[dict[str, float], dict[str, list[list[float]]], float]:
    """The metrics apart from their timelines, the timelines (series -> lanes -> points) and their step."""
    plain = {k: v for k, v in metrics.items() if not k.startswith(TIMELINE)}
    series: dict[str, dict[int, dict[int, float]]] = {}
    for key, value in metrics.items():
        parts = key.split(".")
        if key.startswith(TIMELINE) and len(parts) == 4 and parts[2].isdigit() and parts[3].isdigit():
            series.setdefault(parts[1], {}).setdefault(int(parts[2]), {})[int(parts[3])] = value
    lanes = {
        name: [[points[k] for k in sorted(points)] for _, points in sorted(by_lane.items())]
        for name, by_lane in series.items()
    }
    return plain, lanes, float(metrics.get(f"{TIMELINE}step_s", 0.0))


class WorkloadError(ValueError):
    """A workload a user supplied cannot be used; the message is one line that says why."""


class OptionError(ValueError):
    """A value a user supplied for an option or a setting is unknown, of the wrong type or out of bounds: one
    line naming it. `option` and `reason` let a front end name it its own way (`search.budget: ...`)."""

    def __init__(self, message: str, option: Option | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.option = option
        self.reason = reason or message


OptionType = Literal["int", "float", "str", "bool", "path", "list"]


@dataclass(frozen=True)
class Option:
    """One typed value a user sets, declared once: a target's option (`--set name=value`), a run's setting
    (`--budget`) or a proposer's (`--model`). The CLI's flags, the UI's form fields and crucible.toml's keys
    are generated from these, so a new option or setting never touches a front end.

    `type` "path" is a file a job reads (a profile, a side table): the sandbox mounts it read-only; "list"
    holds texts (a repeatable flag, a TOML array, whitespace-separated in a form field). `low`, `high` bound
    numbers, inclusive unless `open_low`/`open_high`; `choices` (or a callable that lists them, read when
    asked) is the whole set of allowed values (a "path" option may also accept them as names, e.g. a
    shipped profile). `default` None means "not set".
    """

    name: str
    type: OptionType
    default: Any
    doc: str
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    choices: tuple[Any, ...] | Callable[[], tuple[Any, ...]] = ()
    required: bool = False
    """For a command's arguments: no default, the user must give it."""
    tune: tuple[float, float] | None = None
    """A knob a deployment sets freely: the range `crucible tune` searches (log scale over a decade)."""
    flag: bool = False
    """A target's option that is also a flag of its own (`--capacity N` for `--set capacity=N`): for the
    option a user of the target sets on nearly every command."""
    setting: bool = False
    """A run's or a proposer's setting rather than a target's option: always a flag, and messages name it
    by its flag (`--budget ...`) where a target's option is named `option NAME`."""
    flag_name: str = ""
    """The flag's spelling where it is not the name's (`--model` for `models`)."""
    metavar: str = ""
    resumable: bool = False
    """A setting a stopped run may change when it resumes (its budget, caps, workers); the others are the
    run's identity."""

    @property
    def switch(self) -> str:
        """The command-line flag: `--name` with dashes (a trailing `_s`, seconds, dropped), or `flag_name`."""
        return self.flag_name or "--" + self.name.removesuffix("_s").replace("_", "-")

    @property
    def label(self) -> str:
        """How messages name it: a setting by its flag, a target's option as `option NAME`."""
        return self.switch if self.setting else f"option {self.name}"

    def error(self, reason: str) -> OptionError:
        return OptionError(f"{self.label} {reason}", self, reason)

    def allowed_values(self) -> tuple[Any, ...]:
        """The choices, listed now where a callable gives them."""
        return self.choices() if callable(self.choices) else self.choices

    def parse(self, text: str | Sequence[str]) -> Any:
        """The value of a flag, `--set name=text` or a form field, given as text (a list takes its items),
        checked; OptionError names it and says what it allows."""
        if self.type == "list":
            items = [text] if isinstance(text, str) else list(text)
            return self.check([item for t in items for item in t.split()])
        assert isinstance(text, str)
        if self.type == "bool":
            lowered = text.strip().lower()
            if lowered not in ("true", "false", "1", "0", "yes", "no"):
                raise self.error(f"expects true or false, got {text!r}")
            return lowered in ("true", "1", "yes")
        if self.type in ("int", "float"):
            try:
                number: Any = int(text) if self.type == "int" else float(text)
            except ValueError:
                kind = "a whole number" if self.type == "int" else "a number"
                raise self.error(f"expects {kind}, got {text!r}") from None
            return self.check(number)  # outside the try: OptionError is a ValueError too
        return self.check(text)

    def check(self, value: Any) -> Any:
        """A typed value (JSON, TOML, a form's number) checked against the type, bounds and choices; None is
        "not set" where the default is."""
        if value is None and self.default is None and not self.required:
            return None
        if self.type == "bool":
            if not isinstance(value, bool):
                raise self.error(f"expects true or false, got {value!r}")
            return value
        if self.type == "list":
            if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
                raise self.error(f"expects a list of texts, got {value!r}")
            return list(value)
        if self.type in ("int", "float"):
            return self._number(value)
        if not isinstance(value, str) or not value:
            raise self.error(f"expects a non-empty text, got {value!r}")
        if self.type == "path" and "\x00" in value:
            raise self.error(f"expects a file name, got {value!r}")
        allowed = self.allowed_values()
        if allowed and self.type != "path" and value not in allowed:
            raise self.error(f"must be one of {', '.join(str(c) for c in allowed)}, got {value!r}")
        return value

    def _number(self, value: Any) -> int | float:
        whole = isinstance(value, int) and not isinstance(value, bool)
        if self.type == "int" and not whole:
            raise self.error(f"expects a whole number, got {value!r}")
        if self.type == "float" and not (whole or isinstance(value, float)):
            raise self.error(f"expects a number, got {value!r}")
        below = self.low is not None and (value <= self.low if self.open_low else value < self.low)
        above = self.high is not None and (value >= self.high if self.open_high else value > self.high)
        if below or above or (isinstance(value, float) and not math.isfinite(value)):
            raise self.error(f"{self.bounds()}, got {value!r}")
        return float(value) if self.type == "float" else int(value)

    def bounds(self) -> str:
        """The range in words, as errors say it."""
        kind = "a whole number" if self.type == "int" else "a number"
        if self.low == 0 and self.open_low and self.high is None:
            return "must be positive"
        if self.low is not None and self.high is None:
            return f"must be {kind} of at least {self.low:g}"
        if self.low is not None and self.high is not None:
            left, right = "(" if self.open_low else "[", ")" if self.open_high else "]"
            return f"must lie in {left}{self.low:g}, {self.high:g}{right}"
        if self.high is not None:
            return f"must be {kind} of at most {self.high:g}"
        return f"must be {kind}"

    def allowed(self) -> str:
        """The allowed values in words, for errors and help."""
        if choices := self.allowed_values():
            return ", ".join(str(c) for c in choices) + (" or a file" if self.type == "path" else "")
        if self.type in ("int", "float"):
            low = "-inf" if self.low is None else f"{self.low:g}"
            high = "inf" if self.high is None else f"{self.high:g}"
            return f"{'(' if self.open_low else '['}{low}, {high}{')' if self.open_high else ']'}"
        return {"bool": "true or false", "path": "a file", "str": "any text", "list": "texts"}[self.type]


def setting(name: str, type: OptionType, default: Any, doc: str, **more: Any) -> Option:
    """A run's or a proposer's setting: an Option named by its flag (`--budget`) in every message."""
    return Option(name, type, default, doc, setting=True, **more)


@dataclass(frozen=True)
class CommandResult:
    """What a target's command returns: rows a front end draws as a table, and the data `--json` prints."""

    title: str
    columns: tuple[str, ...]
    rows: list[dict[str, Any]]
    data: Any


@dataclass(frozen=True)
class Command:
    """A target's own command (`crucible <target> <name>`), declared as data so no front end names a
    target: its arguments are Options (`--height 1024` for an Option named "height"), and it returns plain
    data. A user's mistake raises OptionError or WorkloadError with one line."""

    name: str
    doc: str
    arguments: tuple[Option, ...]
    run: Callable[[Mapping[str, Any]], CommandResult]


class ReferenceFailed(RuntimeError):
    """The real system of a Reference did not start or answer as the check needs; `str()` is one line."""


@dataclass(frozen=True)
class Reference:
    """A real system outside Crucible that a target's simulator is checked against decision by decision
    (`crucible validate --target T --against NAME`), declared as data: its options are flags, and
    `run(target, workload, values)` returns the comparison, whose data holds "checks" (each a name, value,
    bound and whether it passed). A missing system or a user's mistake raises OptionError, one line."""

    name: str
    doc: str
    options: tuple[Option, ...]
    run: Callable[[Any, str, Mapping[str, Any]], CommandResult]


@dataclass(frozen=True)
class Compared:
    """A figure the simulator predicts (`simulated`, a metric of the evaluation) and the engine measures
    (`measured`, a metric of the same evaluation on an engine instance); shown as `label`, formatted by
    `fmt` (a format spec, e.g. ".1f" or ".2%")."""

    label: str
    simulated: str
    measured: str
    fmt: str = ".1f"


@dataclass(frozen=True)
class Shown:
    """One more metric a validation table shows per policy, as it is (no counterpart to compare with)."""

    label: str
    metric: str
    fmt: str = ".1f"


@dataclass(frozen=True)
class Check:
    """A bound a figure of the validation report must meet for the simulator's ranking to be trusted:
    `figure` is "kendall_tau", "error_max" (the ranking figure's worst per-policy error),
    "engine_settled" (the share of pairs whose order the engine kept in every round), "pairs_compared"
    (the share left in the rankings' agreement: settled by the engine and resolved by the simulator) or a
    name of `Validation.largest`."""

    figure: str
    at_least: float | None = None
    at_most: float | None = None

    def passed(self, value: float) -> bool:
        return (self.at_least is None or value >= self.at_least) and (
            self.at_most is None or value <= self.at_most
        )

    def bound(self) -> str:
        parts = [f">= {self.at_least:g}"] if self.at_least is not None else []
        return " and ".join([*parts, *([f"<= {self.at_most:g}"] if self.at_most is not None else [])])


Rounds = dict[str, list[dict[str, float]]]
"""Each policy's metrics in each round of a validation, simulator's and engine's."""


@dataclass(frozen=True)
class Calibration:
    """The slice for the simulator alone, priced as the engine's jobs measured the machine as they ran:
    `priced` at the speed its figures are compared at, `band` at the other ends of what the jobs measured
    (a pair the simulator orders one way at one of these speeds and the other way at another is a pair it
    does not resolve at the precision the machine was measured), and `figures` that say what was measured."""

    priced: Instance
    band: tuple[Instance, ...]
    figures: dict[str, Any]


Calibrated = Callable[[Instance, Mapping[str, Any], Rounds, Path], "Calibration | None"]
"""From what the engine's jobs measured (metrics of theirs), the simulator's calibration (profiles written
into the folder); None where the options asked for no measurement."""


@dataclass(frozen=True)
class Validation:
    """How a target's simulator is checked against the real engine (`crucible validate`), as data.

    `instance(workload, values)` builds the slice both serve from the checked `options` values: an
    Instance whose config asks `evaluate` for the engine's figures too (WorkloadError or OptionError on
    bad input). Every compared figure is shown simulated against measured with its relative error;
    policies are ranked by `rank_by` (a compared figure's label) in `direction`, in the simulator and in
    the engine, and Kendall's tau says how well the two rankings agree. `largest` names report figures
    that are the largest value of a metric over the policies (e.g. a logit difference that must stay
    tiny); `checks` bound figures; `requires` are the extras the engine needs (a one-line error names
    the one absent);
    `calibrated`, if set, prices the simulator as the engine's jobs measured the machine (a CPU's speed
    drifts while a validation runs), and across the speeds they measured.
    """

    options: tuple[Option, ...]
    instance: Callable[[str, Mapping[str, Any]], Instance]
    compared: tuple[Compared, ...]
    rank_by: str
    direction: Literal["maximize", "minimize"]
    shown: tuple[Shown, ...] = ()
    largest: Mapping[str, str] = field(default_factory=dict)
    checks: tuple[Check, ...] = ()
    requires: tuple[str, ...] = ()
    calibrated: Calibrated | None = None

    def __post_init__(self) -> None:
        if self.rank_by not in {c.label for c in self.compared}:
            raise ValueError(f"rank_by {self.rank_by!r} is not the label of a compared figure")

    @property
    def ranked(self) -> Compared:
        return next(c for c in self.compared if c.label == self.rank_by)


def resolve_options(options: tuple[Option, ...], given: Mapping[str, Any]) -> dict[str, Any]:
    """The defaults of `options` overlaid with checked `given` values; OptionError on an unknown name."""
    known = {o.name: o for o in options}
    for name in given:
        if name not in known:
            raise OptionError(f"unknown option {name!r}; options: {', '.join(known) or 'none'}")
    values = {o.name: o.default for o in options if o.default is not None}
    values.update({name: known[name].check(value) for name, value in given.items()})
    return values


WINDOW = Option("requests", "str", None, "a window START:STOP of the trace's requests (default: all of them)")
"""The option of a windowed target that cuts its workload (a held-out tail is such a window)."""
WARM = Option(
    "warm",
    "bool",
    None,
    "replay the trace's requests before the window first, uncounted: the window meets the mechanism's "
    "state, and every feature's history, as a system in service would, not empty",
)
"""The option of a windowed target that can replay what came before a window: its tail is scored warm."""

Decisions = tuple[tuple[Mapping[str, float], ...], ...]
"""A behaviour sample: decisions, each the feature rows one call of a Rank function ranks."""


class Target(Protocol):
    """A mechanism that asks a candidate only for a narrow policy over declared features: the whole
    contract a target meets, every member a front end, the loop or the sandbox may use. The members TargetBase
    defines are optional hooks, each with its default there; the others every target declares.
    tests/targets/test_contract.py holds every registered target to it."""

    name: str
    """What commands call it (`--target NAME`), its entry point's name."""
    description: str
    """The mechanism and the decision asked for, in words: what the prompt tells a proposer."""
    signatures: tuple[Signature, ...]
    """The decision functions a candidate defines, with the features each reads."""
    objective: Objective
    """The metric a run optimizes, and its direction (unless an option chooses another: objective_for)."""
    report_metrics: tuple[str, ...]
    """The metrics a report shows, the objective first."""
    integer_metrics: tuple[str, ...]
    """Metrics that are counts (preemptions, unfinished requests): reports show them as whole numbers."""
    options: tuple[Option, ...]
    """The settings a user may change, as data: front ends generate their flags and forms from these."""

    def default_config(self) -> dict[str, Any]:
        """A shipped workload (key "workload") and configuration, so every command runs with no flags."""
        ...

    def registry(self, signature: str) -> FeatureRegistry:
        """The features readable on the state argument of the named decision function."""
        ...

    def instances(self, workload: str, config: Mapping[str, Any]) -> list[Instance]:
        """Instances to tune on (role "train") and to score on (role "eval"); WorkloadError on bad input."""
        ...

    def properties(self) -> tuple[Property, ...]:
        """What Z3 proves of every candidate (failing a hard one rejects it): targets/<name>/properties.py."""
        ...

    def evaluate(self, program: Program, instance: Instance, params: Mapping[str, float]) -> dict[str, float]:
        """Run the mechanism with the candidate's policy; metrics include the objective."""
        ...

    def evaluate_builtin(self, name: str, instance: Instance) -> dict[str, float]:
        """Run a built-in baseline on an instance."""
        ...

    # The optional hooks: TargetBase gives each its default.
    def files(self, instance: Instance) -> tuple[str, ...]:
        """Every file a job on this instance reads (the workload, a user's profile...), as absolute paths:
        the Docker sandbox mounts exactly these, read-only."""
        ...

    def baselines(self) -> dict[str, str]:
        """Baselines written in the candidate format: name -> source."""
        ...

    def builtin_baselines(self) -> tuple[str, ...]:
        """Baselines that are mechanism variants rather than candidates (e.g. an offline optimum)."""
        ...

    def oracles(self) -> tuple[str, ...]:
        """The built-in baselines that read the future (an offline optimum): a bound reports measure against,
        never the best baseline a found policy is said to beat."""
        ...

    def tuned_baselines(self) -> tuple[str, ...]:
        """Baselines whose constants are fitted on a run's train instances like a candidate's."""
        ...

    def objective_for(self, options: Mapping[str, Any]) -> Objective:
        """What a run with these options optimizes, where an option chooses (kv: hit rate or time saved)."""
        ...

    def requests(self, workload: str) -> int | None:
        """How many requests the workload holds, in time order, for a target that declares the WINDOW option
        (a search may then hold out a tail); None where its workloads have no request window."""
        ...

    def behaviour_sample(self, signature: str) -> Decisions:
        """Decisions of the named Rank function on which two candidates that rank every one alike are one
        program (the loop's novelty), the same seeded sample in every process; () for none."""
        ...

    def behaviour_cuts(self, signature: str) -> tuple[float, ...]:
        """Values the mechanism compares the named function's scores against, besides one another (a score
        below which it waits): the side of each a score falls on is part of a behaviour."""
        ...

    def mechanism_params(self) -> tuple[str, ...]:
        """PARAMS names the mechanism reads besides the key: their values are part of a behaviour."""
        ...

    def knobs(self) -> tuple[str, ...]:
        """The mechanism params a search tunes beside the key (an engine's settings): the offline proposer
        keeps a parent's in its children and may take an inspiration's."""
        ...

    def commands(self) -> tuple[Command, ...]:
        """The target's own commands (e.g. DiT's `plan`); most targets have none."""
        ...

    def validation(self) -> Validation | None:
        """How `crucible validate` checks the simulator against the real engine; None where there is none."""
        ...

    def exports(self) -> Mapping[str, Export]:
        """Each engine a program of this target exports into (`crucible export --to NAME`), by name."""
        ...

    def references(self) -> Mapping[str, Reference]:
        """The real systems `crucible validate --against NAME` compares the simulator with, by name."""
        ...

    def requirable(self) -> Mapping[str, Requirable]:
        """Hard properties a run may require beyond `properties()` (`--require NAME=VALUE`), by name."""
        ...

    def ranks_unseen(self) -> bool:
        """Whether a run ranks its candidates on the requests after the train share even when it holds out
        no tail (`--select unseen`): where a fit to the tuned requests misleads, as capacity on a short
        head does."""
        ...


class TargetBase:
    """The defaults of the Target protocol's optional hooks, given once: a target class derives from this
    and declares the rest (its features, instances, properties and evaluate)."""

    def files(self, instance: Instance) -> tuple[str, ...]:
        """The workload file, where the workload is one (a generator spec reads no file)."""
        path = Path(instance.workload)
        return (str(path.resolve()),) if path.is_file() else ()

    def baselines(self) -> dict[str, str]:
        """The baselines shipped in the target's package, in `baselines/<name>.py`."""
        return packaged_baselines(type(self).__module__.rpartition(".")[0])

    def builtin_baselines(self) -> tuple[str, ...]:
        """None: every baseline is written in the candidate format."""
        return ()

    def oracles(self) -> tuple[str, ...]:
        """None: no baseline reads the future."""
        return ()

    def tuned_baselines(self) -> tuple[str, ...]:
        """None: every baseline runs with the constants it is written with."""
        return ()

    def objective_for(self, options: Mapping[str, Any]) -> Objective:
        """The target's one objective, whatever the options."""
        objective: Objective = self.objective  # type: ignore[attr-defined]
        return objective

    def requests(self, workload: str) -> int | None:
        """None: the workloads have no request window, so no held-out tail."""
        return None

    def behaviour_sample(self, signature: str) -> Decisions:
        """None: novelty is judged on the program's text alone."""
        return ()

    def behaviour_cuts(self, signature: str) -> tuple[float, ...]:
        """None: only how scores rank against one another is a behaviour."""
        return ()

    def mechanism_params(self) -> tuple[str, ...]:
        """None: the mechanism reads no PARAMS of its own."""
        return ()

    def knobs(self) -> tuple[str, ...]:
        """None: a search tunes the key at the engine settings the options give."""
        return ()

    def commands(self) -> tuple[Command, ...]:
        """None of its own."""
        return ()

    def validation(self) -> Validation | None:
        """None: the simulator is not checked against a real engine."""
        return None

    def exports(self) -> Mapping[str, Export]:
        """None: its programs run only in Crucible."""
        return {}

    def references(self) -> Mapping[str, Reference]:
        """None: no real system decides as its simulator does, request by request."""
        return {}

    def requirable(self) -> Mapping[str, Requirable]:
        """None: a run proves the target's own properties only."""
        return {}

    def ranks_unseen(self) -> bool:
        """No: a run without a held-out tail ranks on its whole window, as it reports."""
        return False


@dataclass(frozen=True)
class Requirable:
    """A hard property a run may require, made from the text after `NAME=` (and the run's options, which
    may fix what it assumes of the mechanism); `usage` says what the text holds. OptionError on bad text."""

    usage: str
    doc: str
    make: Callable[[str, Mapping[str, Any]], Property]


def required(target: Target, text: str | None, options: Mapping[str, Any]) -> tuple[Property, ...]:
    """The properties `--require NAME=VALUE[,NAME=VALUE...]` asks of a run (none for None); OptionError
    names what the target offers."""
    if not text:
        return ()
    offered = target.requirable()
    made = []
    for part in text.split(","):
        name, sep, value = part.strip().partition("=")
        if name not in offered:
            known = ", ".join(f"{n}={r.usage}" for n, r in offered.items()) or "none"
            raise OptionError(f"--require {part.strip()}: target {target.name} offers {known}")
        if not sep or not value.strip():
            raise OptionError(f"--require {name} needs a value: {name}={offered[name].usage}")
        made.append(offered[name].make(value.strip(), options))
    return tuple(made)


def windowed(target: Target) -> bool:
    """Whether the target's workloads are requests in time order it can cut (it declares the WINDOW option,
    this very declaration: another option of that name is not a window)."""
    return WINDOW in target.options


def packaged_baselines(package: str) -> dict[str, str]:
    """The baselines a target ships in candidate form: `<package>/baselines/<name>.py`, by name."""
    folder = resources.files(package) / "baselines"
    return {
        Path(entry.name).stem: entry.read_text()
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".py")
    }


def request_window(text: str, n: int) -> tuple[int, int]:
    """A slice `START:STOP` of a workload of `n` requests; OptionError names the option and the range."""
    try:
        start, stop = (int(x) for x in text.split(":"))
    except ValueError:
        raise OptionError(f"option requests expects START:STOP, got {text!r}") from None
    if not 0 <= start < stop <= n:
        raise OptionError(f"option requests needs 0 <= START < STOP <= {n} requests, got {text!r}")
    return start, stop
