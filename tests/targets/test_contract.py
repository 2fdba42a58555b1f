"""One contract for every target (targets/base.py's Target protocol), as Optuna's tests hold every sampler
to one: each registered target, built-in or plugin (the toy cache of tests/search/toy_plugin, installed by
an entry point), is run through the same checks. A new target passes them, or learns from the failure
exactly what it lacks: every message names the target and the member or the figure at fault."""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from plugins import forget, install

import targets
from search.loop.search import brief
from search.proposers.base import Entry, ProposalRequest
from search.proposers.llm.prompting import Templates
from targets.base import (
    Command,
    FeatureRegistry,
    Objective,
    Option,
    OptionError,
    Target,
    TargetBase,
    Validation,
    resolve_options,
    windowed,
)
from verifiers.program import Program
from verifiers.smt import Verifier
from verifiers.static import check

TOY = Path(__file__).resolve().parents[1] / "search" / "toy_plugin" / "toy_cache"
TOY_ENTRY = "[crucible.targets]\ntoy = toy_cache.target:ToyCacheTarget\n"
NAMES = (*targets.names(), "toy")
"""Every target registered by Crucible's own entry points, and a plugin's."""
HOOKS = tuple(name for name in vars(TargetBase) if not name.startswith("_"))
"""The optional hooks: the members TargetBase gives a default."""
MEMBERS = tuple(
    dict.fromkeys(
        [
            *inspect.get_annotations(Target),
            *(n for n, value in vars(Target).items() if inspect.isfunction(value) and not n.startswith("_")),
        ]
    )
)
"""Every member of the contract, required and optional, as the protocol declares them."""


def missing(target: object) -> list[str]:
    """The members of the contract the target lacks, named as the protocol names them."""
    return [name for name in MEMBERS if not hasattr(target, name)]


@pytest.fixture(params=NAMES)
def target(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    if request.param == "toy":
        install(TOY, TOY_ENTRY, tmp_path / "plugins", monkeypatch)
    yield targets.load(request.param)
    if request.param == "toy":
        forget("toy_cache")


def _options(target: Any) -> dict[str, Any]:
    """The target's shipped configuration as option values (the workload aside)."""
    config = dict(target.default_config())
    config.pop("workload")
    declared = {o.name for o in target.options}
    return resolve_options(target.options, {k: v for k, v in config.items() if k in declared})


def _evaluated(target: Any) -> tuple[Program, Any, dict[str, float]]:
    """The first baseline, the shipped workload's first eval instance, and its metrics there."""
    workload = target.default_config()["workload"]
    instance = next(i for i in target.instances(workload, _options(target)) if i.role == "eval")
    program = check(next(iter(target.baselines().values())), target.signatures)
    return program, instance, target.evaluate(program, instance, program.defaults())


def test_every_member_of_the_contract_is_there(target: Any) -> None:
    assert missing(target) == [], f"target {target.name} lacks {', '.join(missing(target))}"
    assert isinstance(target.name, str) and target.name
    assert isinstance(target.description, str) and target.description
    assert target.signatures, f"target {target.name} declares no decision function"


def test_a_hook_taken_away_is_named() -> None:
    """The check the test above makes, on a built-in target with each hook in turn taken away."""
    kv = targets.load("kv")

    class Without:
        def __init__(self, hook: str) -> None:
            self.hook = hook

        def __getattr__(self, name: str) -> object:
            if name == self.hook:
                raise AttributeError(name)
            return getattr(kv, name)

    assert {"objective_for", "tuned_baselines", "exports", "validation", "requests"} <= set(HOOKS)
    for hook in MEMBERS:
        assert missing(Without(hook)) == [hook]


def test_options_are_declared_with_their_defaults_valid(target: Any) -> None:
    names = [o.name for o in target.options]
    assert len(names) == len(set(names)), f"target {target.name} declares an option twice"
    for option in target.options:
        assert isinstance(option, Option) and option.doc, f"{target.name}: option {option.name} has no doc"
        assert not option.setting, f"{target.name}: option {option.name} is declared as a run's setting"
        if option.low is not None and option.high is not None:
            assert option.low <= option.high, f"{target.name}: option {option.name}'s bounds are crossed"
        if option.default is not None:
            assert option.check(option.default) == option.default, f"{target.name}: {option.name}'s default"
    with pytest.raises(OptionError, match="unknown option"):
        resolve_options(target.options, {"no_such_option": 1})


def test_features_have_units_and_domains_and_reach_the_prompt(target: Any) -> None:
    parent = Entry(1, next(iter(target.baselines().values())), 0.0)
    prompt = "\n".join(
        m["content"] for m in Templates.load().messages(ProposalRequest(brief(target), parent, (), (), 0))
    )
    for signature in target.signatures:
        registry = target.registry(signature.name)
        assert isinstance(registry, FeatureRegistry)
        assert set(signature.features) <= set(registry.names), f"{target.name}: {signature.name}'s features"
        for feature in registry.features:
            where = f"{target.name}: feature {feature.name} of {signature.name}"
            assert feature.unit and feature.doc, f"{where} has no unit or doc"
            assert feature.low <= feature.high, f"{where} has crossed bounds"
            if feature.name in signature.features:
                shown = f"{signature.state_arg}.{feature.name} ({feature.shown_unit}, in ["
                assert shown in prompt, f"{where} is not in the prompt as {shown}...]"


def test_baselines_compile_and_z3_runs_every_property(target: Any) -> None:
    baselines = target.baselines()
    assert baselines or target.builtin_baselines(), f"target {target.name} has no baseline"
    programs = {name: check(source, target.signatures) for name, source in baselines.items()}
    assert set(target.oracles()) <= set(target.builtin_baselines()), (
        f"{target.name}: an oracle is no baseline"
    )
    assert set(target.tuned_baselines()) <= set(baselines), f"{target.name}: a tuned baseline is not shipped"
    domains = {s.name: target.registry(s.name).domain() for s in target.signatures}
    with Verifier() as verifier:
        outcomes = verifier.verify(next(iter(programs.values())), domains, target.properties())
    assert {o.property for o in outcomes} == {p.name for p in target.properties()}
    assert {o.verdict for o in outcomes} <= {"proved", "counterexample", "unknown"}


def test_evaluate_names_its_metrics_and_its_objective_and_repeats_itself(target: Any) -> None:
    program, instance, metrics = _evaluated(target)
    objective = target.objective_for(_options(target))
    assert isinstance(objective, Objective) and objective.direction in ("maximize", "minimize")
    assert target.report_metrics[0] == target.objective.metric, f"{target.name}: the objective shows first"
    assert set(target.integer_metrics) <= set(target.report_metrics)
    for metric in {objective.metric, *target.report_metrics}:
        assert metric in metrics, f"target {target.name}'s evaluate does not report {metric}"
    assert all(isinstance(v, float | int) and math.isfinite(v) for v in metrics.values()), metrics
    again = target.evaluate(program, instance, program.defaults())
    assert again == metrics, f"target {target.name}'s evaluate is not deterministic"
    for name in target.builtin_baselines():
        assert objective.metric in target.evaluate_builtin(name, instance), f"{target.name}: built-in {name}"


def test_a_window_is_declared_with_the_requests_it_cuts(target: Any) -> None:
    counted = target.requests(target.default_config()["workload"])
    declared = windowed(target)
    assert declared == (counted is not None), (
        f"target {target.name}: a WINDOW option goes with requests() counting its workload's requests"
    )


def test_hooks_answer_in_their_declared_types(target: Any) -> None:
    assert all(isinstance(c, Command) for c in target.commands())
    validation = target.validation()
    assert validation is None or isinstance(validation, Validation)
    if validation is not None:
        assert all(isinstance(o, Option) for o in validation.options)
    for engine, export in target.exports().items():
        assert set(export.features) <= set(target.registry(export.signature).names), (target.name, engine)
    assert all(isinstance(p, str) for p in target.mechanism_params())
    assert set(target.knobs()) <= set(target.mechanism_params()), "a knob is a param the mechanism reads"
    assert isinstance(target.ranks_unseen(), bool)
    assert not target.ranks_unseen() or windowed(target), f"{target.name} ranks on unseen requests it has not"


def test_a_behaviour_sample_holds_only_states_within_every_domain_and_relation(target: Any) -> None:
    for signature in target.signatures:
        registry = target.registry(signature.name)
        decisions = target.behaviour_sample(signature.name)
        assert not decisions or (len(decisions) > 1 and all(len(d) > 1 for d in decisions)), "choices"
        for decision in decisions:
            for row in decision:
                assert isinstance(row, Mapping) and set(row) == set(registry.names), signature.name
                for f in registry.features:
                    assert f.low <= row[f.name] <= f.high, (signature.name, f.name)
                for relation in registry.relations:
                    assert eval(relation, {}, dict(row)), (signature.name, relation)
            for f in registry.features:
                assert not f.shared or len({row[f.name] for row in decision}) == 1, f"{f.name} is shared"
        assert target.behaviour_sample(signature.name) == decisions, "the same sample every time"


def test_a_target_with_no_export_is_refused_in_one_line(
    target: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from search.cli.main import main

    if target.exports():
        pytest.skip(f"target {target.name} exports to {', '.join(target.exports())}")
    name, source = next(iter(target.baselines().items()))
    file = tmp_path / f"{name}.py"
    file.write_text(source)
    with pytest.raises(SystemExit) as exit_:
        main(["export", str(file), "--to", "sglang", "--target", target.name])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1, err
    assert target.name in err[0] and "sglang" in err[0]
