"""Tune an existing policy with no proposer: an Optuna study over its PARAMS and the mechanism's knobs.

Every trial is one sandbox job on the train instances; when the study is done the best trial (or the Pareto
front, with several objectives) and the policy as configured are scored on the eval instances. The study
lives in an Optuna storage, so several processes can share it and a killed study continues; each trial
claims a slot by its number, so together they run exactly the requested trials. The outcome is recorded
as a run (proposer "tune") in the run store, where `runs list/show` and the UI find it.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import optuna

from sandbox.base import Sandbox
from sandbox.job import Limits, Result
from search.errors import UserError
from search.jobs import job, run
from search.service import records
from search.service.runs import RunService, instances
from search.settings import RunConfig
from search.stats.means import mean_metrics
from targets.base import Option, Target
from verifiers.fingerprint import fingerprint
from verifiers.program import Program
from verifiers.static import render

Direction = Literal["maximize", "minimize"]
COUNTED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.RUNNING)
"""Trial states that hold a slot of the study's budget: run, ran without a value, or running now."""
OPEN_ATTEMPTS = 5
"""Processes that start a study at the same moment race to create its tables: the losers try again."""
LOWER_IS_BETTER = ("_ms", "_s")
"""Metric name endings that are times, so smaller is better when an objective gives no direction."""


@dataclass(frozen=True)
class Knob:
    """One dimension of the study: a PARAMS constant of the policy or a tunable option of the mechanism."""

    name: str
    kind: Literal["param", "option"]
    low: float
    high: float
    log: bool
    integer: bool

    def suggest(self, trial: optuna.Trial) -> float | int:
        if self.integer:
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(self.name, self.low, self.high, log=self.log)


@dataclass(frozen=True)
class Goal:
    """One objective: a metric averaged over the instances, and which way is better."""

    metric: str
    direction: Direction

    @classmethod
    def parse(cls, text: str, target: Target) -> Goal:
        """`metric`, `metric:max` or `metric:min`; the target's objective and times know their direction."""
        metric, _, way = text.partition(":")
        if way:
            if way not in ("max", "min"):
                raise UserError(f"objective {text!r}: write {metric}:max or {metric}:min")
            return cls(metric, "maximize" if way == "max" else "minimize")
        if metric == target.objective.metric:
            return cls(metric, target.objective.direction)
        if metric.endswith(LOWER_IS_BETTER):
            return cls(metric, "minimize")
        raise UserError(f"objective {metric!r}: say which way is better, {metric}:max or {metric}:min")

    def gain(self, before: float, after: float) -> float:
        """How much better `after` is than `before` in this goal's direction (negative: worse)."""
        return after - before if self.direction == "maximize" else before - after


@dataclass(frozen=True)
class TuneSpec:
    """Everything that defines a study; its name defaults to a digest of these, so rerunning resumes it."""

    target: str
    policy: str
    """The policy's name: a packaged baseline's, or the heuristic file's stem."""
    source: str
    workload: str
    options: dict[str, Any]
    goals: tuple[Goal, ...]
    trials: int
    seed: int = 0
    timeout_s: float | None = None
    storage: str = "sqlite:///crucible-tune.db"
    study: str = ""
    limits: dict[str, Any] = field(default_factory=dict)

    def study_name(self) -> str:
        if self.study:
            return self.study
        what = {k: v for k, v in asdict(self).items() if k not in ("trials", "timeout_s", "storage", "study")}
        digest = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:10]
        return f"tune-{self.target}-{self.policy}-{digest}"


@dataclass(frozen=True)
class Point:
    """A trial's knob values with its objective values on the train instances and, once scored, the eval."""

    number: int
    values: dict[str, float]
    train: dict[str, float]
    eval: dict[str, float] | None = None


@dataclass(frozen=True)
class TuneReport:
    """What a study found: the policy as configured, the best trial(s), and the study's bookkeeping."""

    study: str
    storage: str
    run_id: str
    target: str
    policy: str
    goals: list[dict[str, str]]
    knobs: list[dict[str, Any]]
    trials_here: int
    trials_done: int
    trials_requested: int
    configured: Point
    front: list[Point]
    """The best trial, or the Pareto front (best first by the first objective) with several objectives."""
    gain: dict[str, float]
    """How much better the first point's eval figure is than the configured policy's, per objective: its
    increase for a metric to maximize, its decrease for one to minimize (negative: worse)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def goal(self, metric: str) -> dict[str, str]:
        """The goal of a metric: its name and direction."""
        return next(g for g in self.goals if g["metric"] == metric)


def knobs(target: Target, program: Program) -> tuple[Knob, ...]:
    """The policy's PARAMS, then the target's tunable options it does not already tune as PARAMS."""
    found = [Knob(p.name, "param", p.low, p.high, p.log, False) for p in program.params]
    taken = set(program.param_names())
    for option in target.options:
        bounds = tune_range(option)
        if bounds and option.name not in taken:
            low, high = bounds
            log = low > 0 and high / low >= 10
            found.append(Knob(option.name, "option", low, high, log, option.type == "int"))
    return tuple(found)


def tune_range(option: Option) -> tuple[float, float] | None:
    """The range an option declares for tuning (None when it is not a knob of the mechanism)."""
    bounds = option.tune
    return (float(bounds[0]), float(bounds[1])) if bounds else None


class Study:
    """One shared Optuna study of a policy; `run` adds trials until the study holds the requested number."""

    def __init__(
        self, spec: TuneSpec, target: Target, program: Program, sandbox: Sandbox, service: RunService
    ) -> None:
        self.spec = spec
        self.target = target
        self.program = program
        self.sandbox = sandbox
        self.service = service
        self.knobs = knobs(target, program)
        self._check_goals()  # before the study exists: a metric the target has not leaves nothing stored
        self.optuna = _open_study(spec, len(self.knobs))

    def _check_goals(self) -> None:
        """One job of the policy as configured, on the first train instance: UserError (one line) when it
        cannot run, or when a goal names a metric the target does not report."""
        result = self._job(self.configured_values(), "train", first=True)
        if result.status != "ok":
            raise UserError(
                f"{self.spec.policy} does not run as configured: {result.status}: {result.message}"
            )
        reported = result.instances[0].metrics
        for goal in self.spec.goals:
            if goal.metric not in reported:
                known = ", ".join(sorted(reported))
                name = self.target.name
                raise UserError(f"--objective {goal.metric}: {name} reports no such metric; it has {known}")

    def configured_values(self) -> dict[str, float]:
        """The policy's own PARAMS defaults and the options as given: the point tuning must beat. An option
        whose default the target fills in per instance (batching's token budget, per deployment) is the
        value its first instance holds."""
        values: dict[str, float] = dict(self.program.defaults())
        filled = instances(self.target, self.spec.workload, self.spec.options)[0].config
        for knob in self.knobs:
            if knob.kind == "option":
                values[knob.name] = self.spec.options.get(knob.name, filled.get(knob.name))
        return values

    def run(self, on_trial: Callable[[int, int, str], None] = lambda n, total, status: None) -> int:
        """Run trials until the study holds `trials` of them or the timeout passes; how many ran here."""
        study, requested = self.optuna, self.spec.trials
        _release_abandoned(study)
        if not study.trials:
            study.enqueue_trial(self.configured_values(), skip_if_exists=True)
        started, ran = time.monotonic(), 0
        while self.spec.timeout_s is None or time.monotonic() - started < self.spec.timeout_s:
            if len(study.get_trials(deepcopy=False, states=COUNTED)) >= requested:
                break
            trial = study.ask()
            if _slot(study, trial.number) >= requested:  # another process claimed the last slot first
                study.tell(trial, state=optuna.trial.TrialState.FAIL)  # not run: the budget is taken
                study.set_user_attr(f"surplus:{trial.number}", True)
                break
            try:
                status = self._trial(trial)
            except optuna.exceptions.UpdateFinishedTrialError:
                # SQLite locks no row: another process popped the same enqueued trial and told it first
                continue
            ran += 1
            on_trial(ran, requested, status)
        return ran

    def _trial(self, trial: optuna.Trial) -> str:
        """Run one trial in the sandbox and tell the study its train objectives; the job's status."""
        trial.set_user_attr("pid", os.getpid())
        trial.set_user_attr("host", socket.gethostname())
        values = {knob.name: knob.suggest(trial) for knob in self.knobs}
        result = self._job(values, "train")
        if result.status != "ok":
            trial.set_user_attr("message", f"{result.status}: {result.message}")
            self.optuna.tell(trial, state=optuna.trial.TrialState.PRUNED)
            return result.status
        trial.set_user_attr("instances", [asdict(i) for i in result.instances])
        train = mean_metrics([i.metrics for i in result.instances])
        missing = [g.metric for g in self.spec.goals if g.metric not in train]
        if missing:
            self.optuna.tell(trial, state=optuna.trial.TrialState.FAIL)
            raise UserError(f"no metric {missing[0]!r} on {self.target.name}; it has {', '.join(train)}")
        self.optuna.tell(trial, [train[g.metric] for g in self.spec.goals])
        return result.status

    def done(self) -> list[optuna.trial.FrozenTrial]:
        """The trials that ran (with or without a value), surplus claims left out."""
        states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
        return [t for t in self.optuna.get_trials(deepcopy=False, states=states)]

    def front(self) -> list[optuna.trial.FrozenTrial]:
        """The best trial, or the Pareto front ordered by the first objective."""
        if not [t for t in self.done() if t.state == optuna.trial.TrialState.COMPLETE]:
            return []
        if len(self.spec.goals) == 1:
            return [self.optuna.best_trial]
        first = self.spec.goals[0]
        return sorted(
            self.optuna.best_trials,
            key=lambda t: (t.values[0] if first.direction == "minimize" else -t.values[0], t.number),
        )

    def scored(self, key: str, values: Mapping[str, float]) -> dict[str, Any]:
        """The eval instances' results for `values`, from the study if some process scored them already."""
        attr = f"eval:{key}"
        known = self.optuna.user_attrs.get(attr)
        if known is None:
            result = self._job(dict(values), "eval")
            if result.status != "ok":
                raise UserError(
                    f"{self.spec.policy} with {json.dumps(values)} failed on eval: {result.message}"
                )
            known = {"instances": [asdict(i) for i in result.instances], "backend": result.backend}
            self.optuna.set_user_attr(attr, known)
        return known

    def _job(self, values: Mapping[str, float], role: str, first: bool = False) -> Result:
        """One sandbox job of the policy at `values` on the instances of `role` (the first one alone)."""
        params = {k: float(v) for k, v in values.items() if k in self.program.param_names()}
        chosen = {k: v for k, v in values.items() if k not in params}
        options = {**self.spec.options, **_typed(self.target, chosen)}
        found = [i for i in instances(self.target, self.spec.workload, options) if i.role == role]
        found = found[:1] if first else found
        limits = Limits(**self.spec.limits)
        each = job(self.target.name, self.spec.source, found, params=params, limits=limits)
        (result,) = run(self.sandbox, [each])
        return result


def tune(
    study: Study, on_trial: Callable[[int, int, str], None] = lambda n, total, status: None
) -> TuneReport:
    """Run the study's trials here, score the configured policy and the front on eval, and record the run."""
    ran = study.run(on_trial)
    configured = study.configured_values()
    baseline = study.scored("configured", configured)
    front = [(t, study.scored(str(t.number), t.params)) for t in study.front()]
    run_id = record(study, baseline, {t.number: s for t, s in front})
    goals = study.spec.goals
    points = [Point(t.number, dict(t.params), _train(t, goals), _eval_means(s, goals)) for t, s in front]
    configured_point = Point(-1, configured, {}, _eval_means(baseline, goals))
    gain = {}
    if points and points[0].eval is not None and configured_point.eval is not None:
        gain = {g.metric: g.gain(configured_point.eval[g.metric], points[0].eval[g.metric]) for g in goals}
    done = study.done()
    return TuneReport(
        study=study.spec.study_name(),
        storage=study.spec.storage,
        run_id=run_id,
        target=study.target.name,
        policy=study.spec.policy,
        goals=[asdict(g) for g in goals],
        knobs=[asdict(k) for k in study.knobs],
        trials_here=ran,
        trials_done=len(done),
        trials_requested=study.spec.trials,
        configured=configured_point,
        front=points,
        gain=gain,
    )


def record(study: Study, configured: Mapping[str, Any], front: Mapping[int, Mapping[str, Any]]) -> str:
    """The study handed to the run service as plain data, which stores it as a run of kind tune."""
    trials = []
    for trial in study.done():
        params = {k: v for k, v in trial.params.items() if k in study.program.param_names()}
        source = render(study.program, params)
        trials.append(
            records.Trial(
                number=trial.number,
                source=source,
                mark=_trial_mark(source, trial),
                params=dict(trial.params),
                complete=trial.state == optuna.trial.TrialState.COMPLETE,
                message=str(trial.user_attrs.get("message", "")),
                note=_note(study, trial),
                train=list(trial.user_attrs.get("instances", [])),
                train_score=trial.values[0] if trial.values else None,
                scored=dict(front[trial.number]) if trial.number in front else None,
            )
        )
    spec = study.spec
    config = RunConfig(
        target=spec.target,
        workload=spec.workload,
        options=spec.options,
        proposer="none",  # Optuna's sampler proposes every trial
        budget=spec.trials,
        seed=spec.seed,
        trials=1,
        workers=1,
    )
    return study.service.record_study(
        records.Study(
            name=spec.study_name(),
            storage=spec.storage,
            target=spec.target,
            policy=spec.policy,
            source=spec.source,
            config=config.to_json(),
            objectives=[asdict(g) for g in spec.goals],
            knobs=[k.name for k in study.knobs],
            requested=spec.trials,
            configured=dict(configured),
            configured_values=study.configured_values(),
            trials=trials,
        )
    )


def _trial_mark(source: str, trial: optuna.trial.FrozenTrial) -> str:
    """A trial row's fingerprint: its number too, since two processes' samplers may draw the same point."""
    return f"{fingerprint(source)}:trial-{trial.number}"


def _note(study: Study, trial: optuna.trial.FrozenTrial) -> str:
    options = {k.name: trial.params.get(k.name) for k in study.knobs if k.kind == "option"}
    return f"options {json.dumps(options, sort_keys=True)}" if options else ""


def _open_study(spec: TuneSpec, dimensions: int) -> optuna.Study:
    """The study in its storage, made on first use: TPE for one objective, NSGA-II for several."""
    if spec.trials < 1:
        raise UserError(f"--trials must be at least 1, got {spec.trials}")
    if not spec.storage.startswith(("sqlite://", "postgresql", "mysql")):
        raise UserError(f"--storage {spec.storage!r}: expected an RDB URL such as sqlite:///tune.db")
    if len(spec.goals) > 1:
        population = max(4, min(50, spec.trials // 3))
        sampler: optuna.samplers.BaseSampler = optuna.samplers.NSGAIISampler(
            population_size=population, seed=spec.seed
        )
    else:
        startup = min(10, max(1, spec.trials // 3))
        sampler = optuna.samplers.TPESampler(n_startup_trials=startup, seed=spec.seed)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for attempt in range(OPEN_ATTEMPTS):
        try:
            return optuna.create_study(
                storage=spec.storage,
                study_name=spec.study_name(),
                sampler=sampler,
                directions=[g.direction for g in spec.goals],
                load_if_exists=True,
            )
        except ValueError as exc:  # the same name with other directions
            raise UserError(f"study {spec.study_name()}: {exc}") from None
        except Exception as exc:  # the storage cannot be opened, or another process is making it
            if attempt + 1 == OPEN_ATTEMPTS:
                raise UserError(f"cannot open --storage {spec.storage}: {str(exc).splitlines()[0]}") from None
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def _slot(study: optuna.Study, number: int) -> int:
    """How many counted trials precede trial `number`: its place in the budget, the same in every process."""
    return sum(1 for t in study.get_trials(deepcopy=False, states=COUNTED) if t.number < number)


def _release_abandoned(study: optuna.Study) -> None:
    """Trials left running by a killed process of this host fail, so a resumed study runs them again."""
    host = socket.gethostname()
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        pid = t.user_attrs.get("pid")
        if t.user_attrs.get("host") == host and isinstance(pid, int) and not _alive(pid):
            study.tell(t.number, state=optuna.trial.TrialState.FAIL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _typed(target: Target, values: Mapping[str, float]) -> dict[str, Any]:
    """Knob values checked as their options' types (an int option gets a whole number)."""
    options = {o.name: o for o in target.options}
    return {
        k: options[k].check(round(v) if options[k].type == "int" else float(v)) for k, v in values.items()
    }


def _train(trial: optuna.trial.FrozenTrial, goals: Sequence[Goal]) -> dict[str, float]:
    return {g.metric: v for g, v in zip(goals, trial.values or (), strict=False)}


def _eval_means(scored: Mapping[str, Any], goals: Sequence[Goal]) -> dict[str, float]:
    means = mean_metrics([i["metrics"] for i in scored["instances"]])
    return {g.metric: means[g.metric] for g in goals if g.metric in means}


__all__ = ["Goal", "Knob", "Study", "TuneReport", "TuneSpec", "knobs", "tune"]
