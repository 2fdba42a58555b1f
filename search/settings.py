"""The settings of a run, declared once with one default each.

The CLI's flags, the UI's launch form and crucible.toml's `[search]` keys are generated from `SETTINGS` and
from each proposer's own declarations (search/proposers/), so a setting or a proposer never touches a front
end. `RunConfig` is what a run stores: these settings, checked, plus what the service derives (the target's
options with their defaults, the held-out split).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from sandbox.base import BACKENDS
from search.terms import SELECT_CHOICES
from targets.base import Option, OptionError, Target, setting

DEFAULT_STORE = "sqlite:///crucible.db"
"""Where runs are stored unless a front end is told otherwise (`--db`, crucible.toml's [store])."""
STORE_ENV = "CRUCIBLE_DB"
"""The variable a front end started by another reads its store URL from (the web UI, from `crucible ui`)."""


def redacted(url: str) -> str:
    """A store URL as messages show it: a password in it is never echoed."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


SETTINGS: tuple[Option, ...] = (
    setting("budget", "int", 300, "candidates to propose", low=1, resumable=True),
    setting(
        "time_budget_s",
        "float",
        None,
        "stop (resumably) after this many seconds",
        low=0,
        open_low=True,
        resumable=True,
    ),
    setting("seed", "int", 0, "seed of the whole run: the same seed, the same run"),
    setting("trials", "int", 32, "Optuna trials per candidate", low=1),
    setting("workers", "int", 2, "candidate jobs run side by side", low=1, resumable=True),
    setting(
        "max_cost_usd",
        "float",
        None,
        "stop (resumably) once proposals cost this much",
        low=0,
        open_low=True,
        resumable=True,
    ),
    setting(
        "max_tokens",
        "int",
        None,
        "stop (resumably) once proposals used this many tokens",
        low=0,
        open_low=True,
        resumable=True,
    ),
    setting(
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
    setting(
        "select",
        "str",
        None,
        "what candidates are ranked on: the whole window, or 'unseen', the window after the train share "
        "their constants were tuned on, replayed warm where the target can (the default with --holdout, "
        "and for a target that ranks so by default, as batching-capacity does)",
        choices=SELECT_CHOICES,
    ),
    setting("sandbox", "str", "auto", "where candidate code runs", choices=BACKENDS, resumable=True),
    setting(
        "require",
        "str",
        None,
        "hard properties every candidate must be proved to have beyond the target's own, NAME=VALUE[,...] "
        "(`crucible targets show TARGET` lists them; batching: bounded-wait=W[:SHARE]); a candidate Z3 "
        "does not prove them of is rejected, its counterexample stored and shown to the proposer",
        metavar="NAME=VALUE",
    ),
    setting(
        "for_engine",
        "str",
        None,
        "search only the features this engine exposes (`crucible targets show TARGET` lists the target's "
        "engines), so whatever is found exports into it: `crucible export best.py --to ENGINE`",
        flag_name="--for",
        metavar="ENGINE",
    ),
)
"""The settings of a run a user gives, but which proposer writes its candidates: that one is the proposer
registry's (search/proposers: its choices are the installed proposers). Their defaults are the only
defaults (RunConfig reads them)."""

BY_NAME: Mapping[str, Option] = {s.name: s for s in SETTINGS}


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
    proposer: str
    """Who writes candidates: an installed proposer's name (search/proposers: the registry's setting)."""
    budget: int = default("budget")
    seed: int = default("seed")
    trials: int = default("trials")
    """Optuna trials per candidate: TPE engages after 10; the mean tuned score levels off by 32."""
    workers: int = default("workers")
    islands: int = 4
    proposer_settings: dict[str, Any] = field(default_factory=dict)
    """The proposer's own settings (its declared `Option`s, by name), checked by the proposer."""
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
    require: str | None = default("require")
    """Hard properties candidates must be proved to have beyond the target's (`--require`), as given."""
    for_engine: str | None = default("for_engine")
    """The engine whose exposed features alone candidates may read (`--for`): what is found exports there."""

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


def checked(settings: Iterable[Option], given: Mapping[str, Any]) -> dict[str, Any]:
    """Every declared setting's value: the given ones checked, the others at their defaults; an unknown
    name is one line."""
    declared = {s.name: s for s in settings}
    for name in given:
        if name not in declared:
            raise OptionError(f"unknown setting {name!r}")
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
    """The option's value; a text of the wrong type is told what the option allows."""
    try:
        return option.parse(text)
    except OptionError as exc:
        if not exc.reason.startswith("expects") or option.type == "bool":
            raise
        raise OptionError(f"{exc}; allowed: {option.allowed()}", option, exc.reason) from None


def option_flags(target: Target) -> dict[str, Option]:
    """The options a target also takes as flags of their own (`--capacity N` for `--set capacity=N`)."""
    return {o.switch: o for o in target.options if o.flag}
