"""The offline evolve proposer: valid, new, small, safe children; deterministic per seed; real crossover."""

from __future__ import annotations

import ast
import itertools
import math

import pytest

import targets
from search.loop.search import brief, domains
from search.proposers.base import Entry, Proposal, ProposalFailed, ProposalRequest, TargetBrief
from search.proposers.evolve.proposer import OPERATORS, EvolveProposer
from targets.kv.features import BLOCK_FEATURES
from targets.kv.target import KVTarget
from verifiers.compiler import to_python
from verifiers.program import Program, is_docstring, node_count
from verifiers.smt import Verifier
from verifiers.static import check

TARGET = KVTarget()
BRIEF = TargetBrief(
    name=TARGET.name,
    description=TARGET.description,
    signatures=TARGET.signatures,
    registries={"priority": BLOCK_FEATURES},
    objective=TARGET.objective.metric,
    direction=TARGET.objective.direction,
)
BASELINES = {name: Entry(i, source, 0.0) for i, (name, source) in enumerate(TARGET.baselines().items())}
RICH = Entry(
    90,
    '''"""A parent with a local, a guard, a literal, a weight and a call, so every operator has a site."""
PARAMS = {"w": (0.1, 10.0, "log")}


def priority(b, p):
    recency = b.last_access / 60.0
    if b.evictions > 2:
        return recency + 5.0
    return recency + p.w * log1p(b.hits) - min(b.age, 30.0)
''',
    0.0,
)
DONOR = Entry(
    91,
    '''"""An inspiration reading a feature no baseline reads, scaled by a param of its own."""
PARAMS = {"zeta": (0.5, 2.0)}


def priority(b, p):
    fan = b.fanout + 1
    return b.depth + p.zeta * fan
''',
    0.0,
)


def propose(parent: Entry, seed: int, inspirations: tuple[Entry, ...] = (), **kw: object) -> Proposal:
    request = ProposalRequest(BRIEF, parent, inspirations, failures=(), seed=seed)
    return EvolveProposer(**kw).propose(request)  # type: ignore[arg-type]


def canonical(source: str) -> list[str]:
    fn = next(s for s in ast.parse(source).body if isinstance(s, ast.FunctionDef))
    return [ast.dump(s) for s in fn.body if not is_docstring(s)]


def test_baselines_are_what_the_tests_expect() -> None:
    assert {"fifo", "gdsf", "lfu", "lru", "slru"} <= set(BASELINES)


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_children_of_each_baseline_pass_the_static_check(name: str) -> None:
    parent = BASELINES[name]
    others = (*(e for n, e in sorted(BASELINES.items()) if n != name), DONOR)
    proposer = EvolveProposer()
    sources = set()
    for seed in range(200):
        inspirations = others[seed % 3 : seed % 3 + 1 + seed % 4]
        proposal = proposer.propose(ProposalRequest(BRIEF, parent, inspirations, (), seed))
        program = check(proposal.source, TARGET.signatures)
        assert proposal.proposer == "evolve"
        assert program.docstring.startswith(f"Parent #{parent.candidate_id} ")
        assert "\n" not in program.docstring
        assert len(program.params) <= proposer.max_params
        assert canonical(proposal.source) != canonical(parent.source)
        sources.add(proposal.source)
    assert len(sources) >= 120  # a one-feature parent has few distinct one-step changes of some kinds


def test_new_params_are_ranges_without_defaults() -> None:
    for seed in range(50):
        program = check(propose(BASELINES["lru"], seed, (DONOR,)).source, TARGET.signatures)
        for param in program.params:
            assert param.default is None
            assert param.low < param.high
            assert not param.log or param.low > 0


def test_same_seed_same_child_and_different_seeds_differ() -> None:
    parent, inspirations = BASELINES["gdsf"], (BASELINES["lfu"], DONOR)
    first = [propose(parent, seed, inspirations) for seed in range(30)]
    again = [propose(parent, seed, inspirations) for seed in range(30)]
    assert first == again
    assert len({p.source for p in first}) >= 25


def test_a_long_lineage_stays_under_the_caps() -> None:
    """Feeding each child back as the parent never breaks the caps: growth stops and deletion takes over."""
    for max_params, max_nodes in ((8, 60), (2, 20)):
        parent = BASELINES["gdsf"]
        for step in range(150):
            inspirations = (DONOR, BASELINES["slru"])
            proposal = propose(parent, step, inspirations, max_params=max_params, max_nodes=max_nodes)
            program = check(proposal.source, TARGET.signatures)
            assert len(program.params) <= max_params
            assert node_count(program.functions["priority"]) <= max(max_nodes, node_count_of(parent))
            parent = Entry(100 + step, proposal.source, 0.0)


def node_count_of(entry: Entry) -> int:
    return node_count(check(entry.source, TARGET.signatures).functions["priority"])


def test_unreferenced_params_are_dropped() -> None:
    for seed in range(40):
        program = check(propose(RICH, seed, weights={"delete": 1.0}).source, TARGET.signatures)
        read = {n.attr for n in ast.walk(program.functions["priority"]) if isinstance(n, ast.Attribute)}
        assert set(program.param_names()) <= read


@pytest.mark.parametrize("operator", sorted(set(OPERATORS) - {"knobs"}))  # kv's engine has no knobs
def test_every_operator_produces_valid_children(operator: str) -> None:
    notes = set()
    for seed in range(20):
        proposal = propose(RICH, seed, (DONOR,), weights={operator: 1.0})
        check(proposal.source, TARGET.signatures)
        assert proposal.note.startswith(f"{operator}: ")
        notes.add(proposal.note)
    assert len(notes) > 1


def test_a_moment_on_the_trace_s_clock_is_never_compared_to_a_threshold() -> None:
    """`if b.now < p.t` splits the trace in time: later traffic only ever takes one branch."""
    clocks = {f.name for f in BLOCK_FEATURES.features if f.clock}
    assert clocks == {"now", "last_access", "inserted_at"}
    bounded = set()
    for operator, seed in itertools.product(
        ("guard", "switch", "replace_feature", "add_term", "wrap"), range(40)
    ):
        tree = ast.parse(propose(RICH, seed, (DONOR,), weights={operator: 1.0}).source)
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                bounded |= {block_feature(n) for n in [node.left, *node.comparators]}
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("min", "max", "clamp"):
                bounded |= {block_feature(n) for n in node.args}
    assert bounded - clocks - {""}, "features are compared at all"
    assert not bounded & clocks


def block_feature(node: ast.AST) -> str:
    """The feature `b.<name>` reads, or "" for anything else."""
    is_read = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "b"
    return node.attr if is_read else ""


def test_an_operator_with_no_site_fails_in_one_line() -> None:
    with pytest.raises(ProposalFailed, match=r"^evolve: no valid child of #\d+ after 5 tries; last: delete"):
        propose(BASELINES["lru"], 0, weights={"delete": 1.0}, tries=5)


def test_crossover_alone_without_inspirations_fails() -> None:
    with pytest.raises(ProposalFailed, match="no inspiration offers material"):
        propose(BASELINES["lru"], 0, weights={"splice": 1.0})


def test_a_child_keeps_its_parent_s_engine_knobs_and_may_take_an_inspiration_s() -> None:
    """The offline engine reads its token budget and batch cap from PARAMS, though no function does: every
    child keeps the parent's, and the knobs operator takes them from an inspiration that sets them."""
    offline = targets.load("batching-offline")
    knobs = {"token_budget", "max_seqs"}
    assert set(brief(offline).knobs) == knobs
    tuned, spf = (
        Entry(i, offline.baselines()[name], 0.0, label=name) for i, name in enumerate(("fcfs_tuned", "spf"))
    )

    def child(parent: Entry, inspirations: tuple[Entry, ...], seed: int, **kw: object) -> Proposal:
        request = ProposalRequest(brief(offline), parent, inspirations, (), seed)
        return EvolveProposer(**kw).propose(request)  # type: ignore[arg-type]

    for seed in range(30):
        assert knobs <= set(check(child(tuned, (spf,), seed).source, offline.signatures).param_names())
    for seed in range(5):
        taken = child(spf, (tuned,), seed, weights={"knobs": 1.0})
        program = check(taken.source, offline.signatures)
        assert taken.note.startswith("knobs: takes ") and taken.note.endswith(" from fcfs_tuned")
        assert set(program.param_names()) & knobs
        assert canonical(taken.source) == canonical(spf.source)  # the order is the parent's
    with pytest.raises(ProposalFailed, match="no inspiration offers material"):
        child(tuned, (tuned,), 0, weights={"knobs": 1.0})  # nothing to take that it lacks


def test_a_parent_outside_the_subset_fails() -> None:
    bad = Entry(7, '"""Bad."""\nimport os\n\ndef priority(b, p):\n    return b.age\n', 0.0)
    with pytest.raises(ProposalFailed, match="parent #7 fails the static check"):
        propose(bad, 0)


def test_unknown_operator_weights_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown evolve operators: nope"):
        EvolveProposer(weights={"nope": 1.0})


@pytest.mark.parametrize("operator", ["splice", "blend"])
def test_crossover_brings_in_inspiration_material(operator: str) -> None:
    for seed in range(30):
        proposal = propose(BASELINES["lru"], seed, (DONOR,), weights={operator: 1.0})
        assert "b.fanout" in proposal.source or "b.depth" in proposal.source
        assert f"#{DONOR.candidate_id}" in proposal.note
    blended = check(propose(BASELINES["lru"], 0, (DONOR,), weights={"blend": 1.0}).source, TARGET.signatures)
    assert "b.fanout" in ast.unparse(blended.functions["priority"])  # the donor's local is inlined
    assert any((p.name, p.low, p.high) == ("zeta", 0.5, 2.0) for p in blended.params)


def test_crossover_renames_a_param_whose_name_is_taken_with_another_range() -> None:
    source = '"""Parent."""\nPARAMS = {"zeta": (10.0, 20.0)}\ndef priority(b, p):\n    return p.zeta * b.age'
    parent = Entry(5, source, 0.0)
    program = check(propose(parent, 0, (DONOR,), weights={"blend": 1.0}).source, TARGET.signatures)
    assert zetas(program) == {"zeta": (10.0, 20.0), "zeta_1": (0.5, 2.0)}

    source = '"""Donor."""\nPARAMS = {"zeta": (1.0, 3.0), "zeta_1": (4.0, 5.0)}\ndef priority(b, p):\n'
    donor = Entry(6, source + "    return p.zeta * b.depth + p.zeta_1 * b.fanout", 0.0)
    program = check(propose(parent, 0, (donor,), weights={"blend": 1.0}).source, TARGET.signatures)
    assert zetas(program) == {"zeta": (10.0, 20.0), "zeta_1": (4.0, 5.0), "zeta_2": (1.0, 3.0)}
    assert "p.zeta_2 * b.depth + p.zeta_1 * b.fanout" in ast.unparse(program.functions["priority"])


def zetas(program: Program) -> dict[str, tuple[float, float]]:
    return {p.name: (p.low, p.high) for p in program.params if p.name.startswith("zeta")}


def test_children_never_fault_at_the_corners_of_the_feature_domains() -> None:
    """Divisions, logs and roots that operators introduce are safe over every feature and param range."""
    corners = [
        {f.name: f.low for f in BLOCK_FEATURES.features},
        {f.name: f.high for f in BLOCK_FEATURES.features},
        {f.name: f.low if i % 2 else f.high for i, f in enumerate(BLOCK_FEATURES.features)},
        {f.name: f.high if i % 2 else f.low for i, f in enumerate(BLOCK_FEATURES.features)},
    ]
    parents = [*BASELINES.values(), RICH]
    for parent, seed in itertools.product(parents, range(60)):
        program = check(propose(parent, seed, (DONOR, RICH)).source, TARGET.signatures)
        run = to_python(program, "priority")
        for state, params in itertools.product(corners, param_corners(program)):
            try:
                value = run(state, params)
            except OverflowError:
                continue
            assert not math.isnan(value), program.source


def param_corners(program: Program) -> list[dict[str, float]]:
    return [{p.name: p.low for p in program.params}, {p.name: p.high for p in program.params}]


def test_a_regime_switch_returns_another_key_above_a_tuned_threshold_and_verifies() -> None:
    children = [propose(BASELINES["lru"], seed, (DONOR,), weights={"switch": 1.0}) for seed in range(6)]
    with Verifier() as verifier:
        for child in children:
            program = check(child.source, TARGET.signatures)
            (switch,) = [s for s in program.functions["priority"].body if isinstance(s, ast.If)]
            (threshold,) = switch.test.comparators  # type: ignore[attr-defined]
            assert ast.unparse(threshold).startswith("p.t_") or ast.unparse(threshold) == "0.5"
            assert ast.unparse(switch.body[0]) != "return b.last_access"
            outcomes = verifier.verify(program, domains(TARGET), TARGET.properties())
            assert not [o for o in outcomes if o.rejects], child.source
    assert any("#91" in c.note for c in children), "an inspiration's whole key as the other regime"


def test_an_operator_whose_children_behaved_as_evaluated_programs_is_drawn_less() -> None:
    def operators(repeated: tuple[str, ...]) -> list[str]:
        notes = [
            EvolveProposer().propose(ProposalRequest(BRIEF, RICH, (), (), seed, repeated=repeated)).note
            for seed in range(60)
        ]
        return [note.split(":")[0] for note in notes]

    plain = operators(())
    damped = operators(("add_term: + weighted b.hits",) * 2)
    assert damped.count("add_term") < plain.count("add_term") / 4


def test_a_regime_switch_of_a_router_tests_a_feature_every_instance_shares_half_the_time() -> None:
    serving = targets.load("serving")
    registry = serving.registry("route")
    shared = {f.name for f in registry.features if f.shared}
    assert {"prompt_tokens", "prompt_blocks", "best_match"} <= shared < set(registry.names)
    parent = Entry(0, serving.baselines()["mooncake_conductor"], 0.0)
    tested = []
    for seed in range(240):
        request = ProposalRequest(brief(serving), parent, (), (), seed)
        note = EvolveProposer(weights={"switch": 1.0}).propose(request).note
        if note.startswith("switch: + regime switch: if s."):
            tested.append(note.removeprefix("switch: + regime switch: if s.").split()[0])
    uniform = len(shared) / len(registry.names)  # the share a draw over every feature would give
    assert len(tested) > 40
    assert sum(name in shared for name in tested) / len(tested) > uniform + 0.15  # half of them, and more
    assert set(tested) - shared, "features that differ between instances are tested too"
