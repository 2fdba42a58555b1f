"""`crucible.toml`: what the CI job checks and searches, read and checked key by key before anything runs.

Every mistake is one ConfigError line naming the file and the key (`champions[0].file`), so a CI log says
what to fix; relative paths are relative to the file, which lives in the user's repository.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import targets
from search import proposers
from search.all_settings import BY_NAME, SETTINGS
from search.errors import UserError
from targets.base import OptionError, Target, resolve_options

DEFAULT_STORE = "sqlite:///.crucible/crucible.db"
"""Beside the config file, so a CI cache of `.crucible/` keeps the previous results."""
RUN_SETTINGS = tuple(s for s in SETTINGS if s.name != "sandbox")
"""The run settings [search] takes ([sandbox] backend is the sandbox setting, as it always was)."""


def search_keys() -> tuple[str, ...]:
    """Every key [search] takes: the run's settings and every installed proposer's."""
    return (*(s.name for s in RUN_SETTINGS), *(s.name for s in proposers.settings()))


class ConfigError(UserError):
    """A key of the config file is missing, unknown, of the wrong type or out of range."""


@dataclass(frozen=True)
class Thresholds:
    """Relative worsening of the objective that warns (alert) and that fails the job (fail), as
    github-action-benchmark separates them; `margin` is the relative gain on the held-out workloads a found
    heuristic needs before the job proposes it as a patch."""

    alert: float = 0.02
    fail: float = 0.05
    margin: float = 0.01


@dataclass(frozen=True)
class Workload:
    """A trace (or the target's shipped one when `path` is empty) with its options; held-out workloads are
    never searched on, only used to judge what a search found."""

    name: str
    target: str
    path: str
    held_out: bool
    options: dict[str, Any]


@dataclass(frozen=True)
class Champion:
    """A heuristic file of the user's repository that is in production for a target."""

    name: str
    target: str
    file: Path
    workloads: tuple[str, ...]
    """The names of its workloads: the ones listed, else every workload of its target."""
    baseline: str
    """A baseline it must not fall behind by more than the thresholds (empty: none)."""
    thresholds: Thresholds


@dataclass(frozen=True)
class CIConfig:
    path: Path
    store: str
    sandbox: str
    workloads: tuple[Workload, ...]
    champions: tuple[Champion, ...]
    thresholds: Thresholds
    search: dict[str, Any]
    """The [search] keys given, each checked: run settings and the chosen proposer's (search/settings.py's
    and the proposers' declarations, as the CLI's flags and the UI's form are); the others keep their
    defaults."""

    def workloads_of(self, champion: Champion) -> list[Workload]:
        return [w for w in self.workloads if w.name in champion.workloads]


def load(path: Path) -> CIConfig:
    """The checked config at `path`; ConfigError names the file and the first bad key."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return _Reader(path).config(data)


class _Reader:
    """Reads one file's tables; every error names the file and the dotted key."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.root = path.resolve().parent

    def fail(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.path}: {key}: {message}")

    def table(self, data: Mapping[str, Any], key: str, allowed: tuple[str, ...], name: str) -> dict[str, Any]:
        value = data.get(key, {})
        where = f"{name}.{key}" if name else key
        if not isinstance(value, dict):
            raise self.fail(where, "expected a table")
        self.known(value, allowed, where)
        return value

    def known(self, data: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
        for key in data:
            if key not in allowed:
                raise self.fail(
                    f"{where}.{key}" if where else key, f"unknown key; expected one of {', '.join(allowed)}"
                )

    def typed(
        self, data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str, default: Any
    ) -> Any:
        if key not in data:
            return default
        value = data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            names = (
                " or ".join(k.__name__ for k in kinds).replace("str", "text").replace("int", "whole number")
            )
            raise self.fail(f"{where}.{key}" if where else key, f"expected {names}, got {value!r}")
        return value

    def config(self, data: dict[str, Any]) -> CIConfig:
        self.known(
            data, ("store", "sandbox", "search", "thresholds", "options", "workloads", "champions"), ""
        )
        store = self.table(data, "store", ("url",), "")
        sandbox = self.table(data, "sandbox", ("backend",), "")
        try:
            backend = BY_NAME["sandbox"].check(sandbox.get("backend", BY_NAME["sandbox"].default))
        except OptionError as exc:
            raise self.fail("sandbox.backend", exc.reason) from None
        thresholds = self.thresholds(data.get("thresholds", {}), "thresholds", Thresholds())
        options = self.table(data, "options", tuple(targets.names()), "")
        workloads = self.workloads(data.get("workloads", []), options)
        champions = self.champions(data.get("champions"), workloads, thresholds)
        used = {c.target for c in champions}
        for target in used - {w.target for w in workloads}:  # the target's shipped workload stands in
            shipped = Workload(
                f"{target}-shipped",
                target,
                "",
                False,
                self.options(target, options.get(target, {}), {}, f"options.{target}"),
            )
            workloads = (*workloads, shipped)
        champions = tuple(
            c if c.workloads else _with_workloads(c, tuple(w.name for w in workloads if w.target == c.target))
            for c in champions
        )
        return CIConfig(
            path=self.path,
            store=self.store_url(self.typed(store, "url", str, "store", DEFAULT_STORE)),
            sandbox=backend,
            workloads=workloads,
            champions=champions,
            thresholds=thresholds,
            search=self.search(self.table(data, "search", search_keys(), "")),
        )

    def store_url(self, url: str) -> str:
        """A SQLite file relative to the config file's folder, made absolute."""
        if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
            file = Path(url.removeprefix("sqlite:///")).expanduser()
            file = file if file.is_absolute() else self.root / file
            return f"sqlite:///{file}"
        return url

    def thresholds(self, data: Any, where: str, base: Thresholds) -> Thresholds:
        if not isinstance(data, dict):
            raise self.fail(where, "expected a table")
        self.known(data, ("alert", "fail", "margin"), where)
        values = {}
        for key in ("alert", "fail", "margin"):
            value = self.typed(data, key, (int, float), where, getattr(base, key))
            if not 0 <= value <= 1:
                raise self.fail(f"{where}.{key}", f"{value!r} is outside [0, 1] (a share: 0.05 is 5 %)")
            values[key] = float(value)
        if values["alert"] > values["fail"]:
            raise self.fail(f"{where}.alert", f"{values['alert']:g} is above fail ({values['fail']:g})")
        return Thresholds(**values)

    def target(self, name: Any, where: str) -> Target:
        if not isinstance(name, str) or name not in targets.names():
            raise self.fail(where, f"unknown target {name!r}; known targets: {', '.join(targets.names())}")
        return targets.load(name)

    def options(self, target: str, shared: Any, given: Any, where: str) -> dict[str, Any]:
        """The target's shared options overlaid with a workload's, each checked by the target's Option."""
        declared = targets.load(target).options
        for value, key in ((shared, f"options.{target}"), (given, where)):
            if not isinstance(value, dict):
                raise self.fail(key, "expected a table")
            for name, item in value.items():
                try:
                    resolve_options(declared, {name: item})
                except OptionError as exc:
                    raise self.fail(f"{key}.{name}", exc.reason) from None
        return {**shared, **given}

    def workloads(self, data: Any, options: Mapping[str, Any]) -> tuple[Workload, ...]:
        if not isinstance(data, list):
            raise self.fail("workloads", "expected an array of tables ([[workloads]])")
        found: list[Workload] = []
        for i, item in enumerate(data):
            where = f"workloads[{i}]"
            if not isinstance(item, dict):
                raise self.fail(where, "expected a table")
            self.known(item, ("name", "target", "path", "held_out", "options"), where)
            name = self.required(item, "name", where)
            if any(w.name == name for w in found):
                raise self.fail(f"{where}.name", f"{name!r} is used twice")
            target = self.target(item.get("target"), f"{where}.target").name
            path = self.typed(item, "path", str, where, "")
            if path:
                file = Path(path).expanduser()
                file = file if file.is_absolute() else self.root / file
                if not file.exists() and ":" not in path:
                    raise self.fail(f"{where}.path", f"no such file {file}")
                path = str(file) if file.exists() else path
            held = self.typed(item, "held_out", bool, where, False)
            given = self.options(target, options.get(target, {}), item.get("options", {}), f"{where}.options")
            found.append(Workload(name, target, path, held, given))
        return tuple(found)

    def required(self, item: Mapping[str, Any], key: str, where: str) -> str:
        if key not in item:
            raise self.fail(f"{where}.{key}", "missing")
        value = self.typed(item, key, str, where, "")
        if not value:
            raise self.fail(f"{where}.{key}", "must not be empty")
        return str(value)

    def champions(self, data: Any, workloads: tuple[Workload, ...], base: Thresholds) -> tuple[Champion, ...]:
        if data is None:
            raise self.fail("champions", "missing: name at least one champion ([[champions]])")
        if not isinstance(data, list) or not data:
            raise self.fail("champions", "expected a non-empty array of tables ([[champions]])")
        found: list[Champion] = []
        for i, item in enumerate(data):
            where = f"champions[{i}]"
            if not isinstance(item, dict):
                raise self.fail(where, "expected a table")
            self.known(item, ("name", "target", "file", "workloads", "baseline", "thresholds"), where)
            target = self.target(item.get("target"), f"{where}.target")
            file = Path(self.required(item, "file", where)).expanduser()
            file = file if file.is_absolute() else self.root / file
            if not file.is_file():
                raise self.fail(f"{where}.file", f"no such file {file}")
            name = self.typed(item, "name", str, where, file.stem) or file.stem
            if any(c.name == name for c in found):
                raise self.fail(f"{where}.name", f"{name!r} is used twice")
            listed = self.typed(item, "workloads", list, where, [])
            for j, w in enumerate(listed):
                match = [x for x in workloads if x.name == w]
                if not match:
                    raise self.fail(f"{where}.workloads[{j}]", f"no workload named {w!r}")
                if match[0].target != target.name:
                    raise self.fail(f"{where}.workloads[{j}]", f"{w!r} is a workload of {match[0].target}")
            baseline = self.typed(item, "baseline", str, where, "")
            known = (*target.baselines(), *target.builtin_baselines())
            if baseline and baseline not in known:
                raise self.fail(
                    f"{where}.baseline",
                    f"{baseline!r} is not a baseline of {target.name} ({', '.join(known)})",
                )
            thresholds = self.thresholds(item.get("thresholds", {}), f"{where}.thresholds", base)
            found.append(Champion(name, target.name, file, tuple(listed), baseline, thresholds))
        return tuple(found)

    def search(self, data: Mapping[str, Any]) -> dict[str, Any]:
        declared = {s.name: s for s in (*RUN_SETTINGS, *proposers.settings())}
        values = {}
        for key, value in data.items():
            try:
                values[key] = declared[key].check(value)
            except OptionError as exc:
                raise self.fail(f"search.{key}", exc.reason) from None
        chosen = values.get("proposer", BY_NAME["proposer"].default)
        own = {s.name for s in proposers.load(chosen).settings}
        for key in values:
            if key not in BY_NAME and key not in own:
                owners = [n for n in proposers.names() if key in {s.name for s in proposers.load(n).settings}]
                raise self.fail(f"search.{key}", f"applies to proposer {' or '.join(owners)}")
        return values


def _with_workloads(champion: Champion, names: tuple[str, ...]) -> Champion:
    return Champion(
        champion.name, champion.target, champion.file, names, champion.baseline, champion.thresholds
    )
