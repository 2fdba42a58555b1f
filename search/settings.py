"""The settings of a run, declared once with one default each.

The CLI's flags, the UI's launch form and crucible.toml's `[search]` keys are generated from `SETTINGS` and
from each proposer's own declarations (search/proposers/), so a setting or a proposer never touches a front
end. `RunConfig` is what a run stores: these settings, checked, plus what the service derives (the target's
options with their defaults, the held-out split).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from sandbox.base import BACKENDS
from targets.base import Option, OptionError, Target

SettingType = Literal["int", "float", "str", "bool", "list"]
DEFAULT_STORE = "sqlite:///crucible.db"
"""Where runs are stored unless a front end is told otherwise (`--db`, crucible.toml's [store])."""


def redacted(url: str) -> str:
    """A store URL as messages show it: a password in it is never echoed."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


class SettingError(ValueError):
    """A setting's value is of the wrong type or out of range; `reason` says why without naming it, so each
    front end names it its own way (`--budget ...`, `search.budget: ...`)."""

    def __init__(self, setting: Setting, reason: str) -> None:
        super().__init__(f"{setting.flag} {reason}")
        self.setting = setting
        self.reason = reason


@dataclass(frozen=True)
class Setting:
    """One setting of a run or of a proposer: its crucible.toml key and form field are `name`, its CLI flag
    `flag` (derived from the name unless given). `low`/`high` bound numbers, inclusive unless `open_low`/
    `open_high`; `choices` (or a callable that lists them) is the whole set of allowed texts; a `list`
    holds texts (a repeatable flag, a TOML array, whitespace-separated in a form field). `resumable`
    settings may change when a stopped run resumes; the others are the run's identity."""

    name: str
    type: SettingType
    default: Any
    doc: str
    flag_name: str = ""
    metavar: str = ""
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] = ()
    resumable: bool = False

    @property
    def flag(self) -> str:
        return self.flag_name or "--" + self.name.removesuffix("_s").replace("_", "-")

    def allowed(self) -> tuple[str, ...]:
        return self.choices() if callable(self.choices) else self.choices

    def parse(self, text: str | Sequence[str]) -> Any:
        """The value of a flag or form field given as text (a list setting takes its items)."""
        if self.type == "list":
            items = [text] if isinstance(text, str) else list(text)
            return self.check([item for t in items for item in t.split()])
        assert isinstance(text, str)
        if self.type == "bool":
            lowered = text.strip().lower()
            if lowered not in ("true", "false", "1", "0", "yes", "no"):
                raise SettingError(self, f"expects true or false, got {text!r}")
            return lowered in ("true", "1", "yes")
        if self.type in ("int", "float"):
            try:
                number: Any = int(text) if self.type == "int" else float(text)
            except ValueError:
                kind = "a whole number" if self.type == "int" else "a number"
                raise SettingError(self, f"expects {kind}, got {text!r}") from None
            return self.check(number)
        return self.check(text)

    def check(self, value: Any) -> Any:
        """A typed value (TOML, JSON, a form's number) checked; None is "not set" where the default is."""
        if value is None and self.default is None:
            return None
        if self.type == "bool":
            if not isinstance(value, bool):
                raise SettingError(self, f"expects true or false, got {value!r}")
            return value
        if self.type == "list":
            if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
                raise SettingError(self, f"expects a list of texts, got {value!r}")
            return list(value)
        if self.type in ("int", "float"):
            return self._number(value)
        if not isinstance(value, str) or not value:
            raise SettingError(self, f"expects a non-empty text, got {value!r}")
        allowed = self.allowed()
        if allowed and value not in allowed:
            raise SettingError(self, f"must be one of {', '.join(allowed)}, got {value!r}")
        return value

    def _number(self, value: Any) -> int | float:
        whole = isinstance(value, int) and not isinstance(value, bool)
        if self.type == "int" and not whole:
            raise SettingError(self, f"expects a whole number, got {value!r}")
        if self.type == "float" and not (whole or isinstance(value, float)):
            raise SettingError(self, f"expects a number, got {value!r}")
        below = self.low is not None and (value <= self.low if self.open_low else value < self.low)
        above = self.high is not None and (value >= self.high if self.open_high else value > self.high)
        if below or above or (isinstance(value, float) and not math.isfinite(value)):
            raise SettingError(self, f"{self.bounds()}, got {value!r}")
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
        return f"must be {kind}"


def _proposer_names() -> tuple[str, ...]:
    from search import proposers  # the registry reads entry points: only when choices are asked for

    return proposers.names()


SELECT_CHOICES = ("window", "unseen")
"""What candidates are ranked on (search/loop/selection.py): the whole window, or what tuning never saw."""

SETTINGS: tuple[Setting, ...] = (
    Setting("budget", "int", 300, "candidates to propose", low=1, resumable=True),
    Setting(
        "time_budget_s",
        "float",
        None,
        "stop (resumably) after this many seconds",
        low=0,
        open_low=True,
        resumable=True,
    ),
    Setting("seed", "int", 0, "seed of the whole run: the same seed, the same run"),
    Setting("trials", "int", 32, "Optuna trials per candidate", low=1),
    Setting("workers", "int", 2, "candidate jobs run side by side", low=1, resumable=True),
    Setting("proposer", "str", "evolve", "who writes candidates", choices=_proposer_names),
    Setting(
        "max_cost_usd",
        "float",
        None,
        "stop (resumably) once proposals cost this much",
        low=0,
        open_low=True,
        resumable=True,
    ),
    Setting(
        "max_tokens",
        "int",
        None,
        "stop (resumably) once proposals used this many tokens",
        low=0,
        open_low=True,
        resumable=True,
    ),
    Setting(
        "holdout",
        "float",
        None,
        "hold out this share of the workload's requests, the last in time (e.g. 0.33): tune and select on "
        "the head, then report the best and the baselines on the tail, as tuned and re-tuned there",
        metavar="SHARE",
        low=0,
        high=1,
        open_low=True,
        open_high=True,
    ),
    Setting(
        "select",
        "str",
        None,
        "what candidates are ranked on: the whole window (the default without --holdout), or 'unseen', the "
        "window after the train share their constants were tuned on, replayed warm where the target can "
        "(the default with --holdout)",
        choices=SELECT_CHOICES,
    ),
    Setting("sandbox", "str", "auto", "where candidate code runs", choices=BACKENDS, resumable=True),
)
"""The settings of a run a user gives; their defaults are the only defaults (RunConfig reads them)."""

BY_NAME: Mapping[str, Setting] = {s.name: s for s in SETTINGS}


def default(name: str) -> Any:
    return BY_NAME[name].default


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run; stored as JSON so the run can be resumed and reproduced."""

    target: str
    workload: str
    """A file (stored as an absolute path) or a generator spec the target understands."""
    options: dict[str, Any]
    """The target's options (its declared `Option`s), defaults filled in: what `instances()` is given."""
    budget: int = default("budget")
    seed: int = default("seed")
    trials: int = default("trials")
    """Optuna trials per candidate: TPE engages after 10; the mean tuned score levels off by 32."""
    workers: int = default("workers")
    islands: int = 4
    proposer: str = default("proposer")
    proposer_settings: dict[str, Any] = field(default_factory=dict)
    """The proposer's own settings (its declared `Setting`s, by name), checked by the proposer."""
    time_budget_s: float | None = default("time_budget_s")
    gate_top_k: int = 8
    migrate_every: int = 25
    limits: dict[str, Any] = field(default_factory=dict)
    max_cost_usd: float | None = default("max_cost_usd")
    """Stop (resumably) once the proposals have cost this much, failed ones included."""
    max_tokens: int | None = default("max_tokens")
    """Stop (resumably) once the proposals have used this many tokens, failed ones included."""
    seeds: dict[str, str] = field(default_factory=dict)
    """More heuristics (name -> source) run like the baselines and seeding the islands (a CI champion)."""
    schedule: str = "steady"
    """steady (a freed slot takes the next candidate) | batch (the older loop; the benchmark's baseline)."""
    holdout: dict[str, Any] = field(default_factory=dict)
    """The time split of `--holdout` (loop/holdout.py: share, head, tail windows); {} for none."""
    select: str = "window"
    """What candidates are ranked on (loop/selection.py): the whole window, or what tuning never saw."""
    sandbox: str = default("sandbox")
    """Where the run's jobs run unless the process that executes it is told otherwise."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunConfig:
        stored = dict(data)
        if "target_config" in stored:  # stored before options were declared by the targets
            stored["options"] = stored.pop("target_config")
        if "llm" in stored:  # stored before proposers declared their settings: the LLM's config as it was
            stored["proposer_settings"] = _llm_settings(stored.pop("llm"))
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in stored.items() if k in known})


def _llm_settings(llm: Mapping[str, Any]) -> dict[str, Any]:
    """An LLM config stored before proposers declared their settings, as those settings' values."""
    if not llm:
        return {}
    renamed = {"timeout_s": "llm_timeout", "retries": "llm_retries", "concurrency": "llm_concurrency"}
    values = {renamed.get(k, k): v for k, v in llm.items() if k not in ("models", "prices", "share")}
    values["models"] = [f"{m['name']}:{m['weight']:g}" for m in llm.get("models", [])]
    values["prices"] = [f"{n}={p['prompt']:g},{p['completion']:g}" for n, p in llm.get("prices", {}).items()]
    values["llm_share"] = llm.get("share", 0.25)
    return values


def checked(settings: Iterable[Setting], given: Mapping[str, Any]) -> dict[str, Any]:
    """Every declared setting's value: the given ones checked, the others at their defaults; an unknown
    name is one line."""
    declared = {s.name: s for s in settings}
    for name in given:
        if name not in declared:
            raise SettingError(Setting(name, "str", None, ""), "is not a setting")
    return {name: s.check(given[name]) if name in given else s.default for name, s in declared.items()}


def target_options(target: Target, assignments: Iterable[str]) -> dict[str, Any]:
    """`--set NAME=VALUE` texts (and a target's own option flags, given the same way), each parsed by the
    target's Option: the one place they are parsed. OptionError names the first bad one and what it allows."""
    known = {o.name: o for o in target.options}
    given: dict[str, Any] = {}
    for pair in assignments:
        name, sep, text = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            raise OptionError(f"--set expects NAME=VALUE, got {pair!r}")
        if name not in known:
            choices = ", ".join(known) or "none"
            raise OptionError(f"unknown option {name!r} for target {target.name}; options: {choices}")
        given[name] = _parse(known[name], text)
    return given


def _parse(option: Option, text: str) -> Any:
    try:
        return option.parse(text)
    except OptionError as exc:
        message, allowed = str(exc), option.allowed()
        raise OptionError(message if allowed in message else f"{message}; allowed: {allowed}") from None


def option_flags(target: Target) -> dict[str, Option]:
    """The options a target also takes as flags of their own (`--capacity N` for `--set capacity=N`)."""
    return {"--" + o.name.replace("_", "-"): o for o in target.options if o.flag}
