"""What the tiers add to a kv decision: where a block sits, since when, and what loading it back costs
against computing it again, each in the registry with its domain, true of every block the mechanism scores,
verified by Z3, shown to the proposers and priced by a named deployment."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from prefix_traces import recording_lru

from search.loop.search import brief
from search.proposers.base import Entry, ProposalRequest
from search.proposers.evolve.proposer import EvolveProposer
from search.proposers.llm.prompting import Templates
from targets.base import OptionError, WorkloadError
from targets.costmodel.shapes import LLAMA3_8B, LLAMA3_70B
from targets.deployments.catalog import DEPLOYMENTS
from targets.kv.target import load_workload, shipped_workload_path
from targets.kv_tiered.cache import TIER_COUNTERS, replay_tiered_arrays
from targets.kv_tiered.costs import request_costs
from targets.kv_tiered.features import N_TIER_COLUMNS, TIER_FEATURES, TIERED_COLUMNS, TIERED_FEATURES
from targets.kv_tiered.target import TieredKVTarget
from verifiers.smt import prove
from verifiers.static import check

TARGET = TieredKVTarget()
TIER = tuple(f.name for f in TIER_FEATURES)
_ROWS = 300_000


def test_the_declared_domains_and_relations_hold_on_every_block_the_tiers_score() -> None:
    trace = load_workload(str(shipped_workload_path()))
    store = np.zeros(1 + _ROWS * N_TIER_COLUMNS)
    arrays = (trace.timestamps_s, trace.offsets, trace.blocks, trace.parent, trace.depth, trace.block_tokens)
    costs = request_costs(DEPLOYMENTS["llama3-8b-h100"], trace)
    counters, _ = replay_tiered_arrays(
        (0, recording_lru, recording_lru, recording_lru),
        store,
        0,
        np.array([300, 600, 900]),
        False,
        *arrays,
        costs,
        0,
    )
    counts = dict(zip(TIER_COUNTERS, counters.tolist(), strict=True))
    assert counts["host_evictions"] > 1000 and counts["disk_evictions"] > 100
    n = int(store[0])
    rows = store[1 : 1 + n * N_TIER_COLUMNS].reshape(n, N_TIER_COLUMNS)
    columns = {name: rows[:, i] for name, i in TIERED_COLUMNS.items()}
    for feature in TIERED_FEATURES.features:
        values = columns[feature.name]
        assert ((values >= feature.low) & (values <= feature.high)).all(), feature.name
    for relation in TIERED_FEATURES.relations:
        assert eval(relation, {}, columns).all(), relation
    assert set(np.unique(columns["tier"])) == {0.0, 1.0, 2.0}, "each tier's decisions are scored"
    gpu = columns["tier"] == 0.0
    assert set(np.unique(columns["backed"][gpu])) == {0.0, 1.0}, "a block loaded back keeps its copy below"
    assert (columns["backed"][~gpu] == 0.0).all()


def test_the_llm_prompt_shows_each_tier_feature_with_unit_domain_and_doc() -> None:
    lru = Entry(1, TARGET.baselines()["lru"], 0.05, {"prefill_ms_saved": 1.0})
    text = "\n".join(
        m["content"] for m in Templates.load().messages(ProposalRequest(brief(TARGET), lru, (), (), 0))
    )
    for name in TIER:
        f = TIERED_FEATURES[name]
        assert f"b.{name} ({f.unit}, in [{f.low:g}, {f.high:g}]): {f.doc}" in text
    for function in ("priority(b, p)", "keep(b, p)", "below(b, p)"):
        assert function in text


def test_the_offline_proposer_mutates_each_function_into_one_reading_the_tier_features() -> None:
    lru = Entry(1, TARGET.baselines()["lru"], 0.05)
    read: dict[str, set[str]] = {}
    for seed in range(300):
        child = EvolveProposer().propose(ProposalRequest(brief(TARGET), lru, (), (), seed=seed))
        program = check(child.source, TARGET.signatures)  # each child is a valid candidate
        for name, fn in program.functions.items():
            read.setdefault(name, set()).update(n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute))
    for name in ("priority", "keep", "below"):
        assert read[name] & set(TIER), name


# A key over the tier features, the property it is checked on, and the verdict their declared domain gives.
_VERDICTS = [
    ("b.recompute_ms / b.load_ms", "below-no-division-by-zero", "counterexample"),  # 0 ms for an empty block
    ("b.recompute_ms / (1 + b.load_ms)", "below-no-division-by-zero", "proved"),
    ("sqrt(b.lifetime - b.in_tier_s)", "below-no-sqrt-of-negative", "proved"),  # only through the relation
    ("sqrt(b.in_tier_s - b.lifetime)", "below-no-sqrt-of-negative", "counterexample"),
    ("log(b.tier)", "below-no-log-of-non-positive", "counterexample"),  # GPU blocks are tier 0
    ("log1p(b.tier) + log(1 + b.backed)", "below-no-log-of-non-positive", "proved"),
]


@pytest.mark.parametrize(("body", "prop", "verdict"), _VERDICTS)
def test_a_key_over_the_tier_features_is_verified_on_their_declared_domain(
    body: str, prop: str, verdict: str
) -> None:
    lru = TARGET.baselines()["lru"]
    program = check(
        lru.replace("def below(b, p):\n    return b.last_access", f"def below(b, p):\n    return {body}"),
        TARGET.signatures,
    )
    domains = {s.name: TARGET.registry(s.name).domain() for s in TARGET.signatures}
    [outcome] = prove(program, domains, [p for p in TARGET.properties() if p.name == prop])
    assert outcome.verdict == verdict


def test_a_deployment_prices_kv_bytes_from_the_model_config_and_loads_from_its_links() -> None:
    eight, seventy = DEPLOYMENTS["llama3-8b-h100"], DEPLOYMENTS["llama3-70b-4xh100"]
    # 2 (K and V) x layers x KV heads x head dim x 2 bytes (bfloat16), the 70B's heads split over 4 GPUs
    assert eight.kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2 == 131_072
    assert seventy.kv_bytes_per_token() == 2 * 80 * (8 // 4) * 128 * 2
    assert (LLAMA3_8B.kv_heads, LLAMA3_70B.kv_heads, LLAMA3_70B.layers) == (8, 8, 80)
    host, disk = eight.load_ms(np.array([512.0]))
    assert host[0] == pytest.approx(512 * 131_072 / 50e9 * 1e3)  # 64 MiB over 50 GB/s: 1.34 ms
    assert disk[0] == pytest.approx(512 * 131_072 / 13e9 * 1e3 + host[0])
    prefill = eight.prefill_ms(np.array([512.0, 512.0, 4096.0]), np.array([0.0, 32768.0, 0.0]))
    assert prefill[0] < prefill[1] < prefill[2], "more context and more tokens cost more"
    assert host[0] < eight.compute_ms(np.array([512.0]), np.array([0.0]))[0] / 5, "a load beats recompute"
    assert seventy.prefill_ms(np.array([512.0]), np.array([0.0]))[0] > prefill[0], "70B on 4 GPUs is slower"


@pytest.mark.parametrize(
    ("config", "error", "message"),
    [
        ({"disk_capacity": 100, "host_capacity": 0}, OptionError, "option disk_capacity needs a host-memory"),
        ({"write": "sideways"}, OptionError, "option write must be one of back, through, got 'sideways'"),
        ({"deployment": "llama3-405b"}, OptionError, r"option deployment must be one of .*'llama3-405b'"),
        ({"host_capacity": -1}, WorkloadError, "host_capacity must be a non-negative number of blocks"),
        ({"capacity": 0}, WorkloadError, "capacity must be a positive number of blocks up to 1e\\+12, got 0"),
    ],
)
def test_a_bad_tier_setting_is_one_line_naming_it(
    config: dict[str, object], error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        TARGET.instances(str(shipped_workload_path()), config)


def test_the_tiered_speed_benchmark_runs_quick_and_states_its_aims() -> None:
    bench = Path(__file__).resolve().parents[3] / "bench" / "kv_tiered.py"
    command = [sys.executable, str(bench), "--quick"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines if line.startswith("aim")] == ["aim LRU", "aim time-varying"]
    assert sum(" 100+800 " in line or " 400+3200 " in line for line in lines) == 4


def test_the_costs_command_prices_a_block_in_each_deployment() -> None:
    (costs,) = TARGET.commands()
    result = costs.run({"tokens": 512, "context": 16384})
    by_name = {row["deployment"]: row for row in result.rows}
    assert set(by_name) == set(DEPLOYMENTS)
    eight = by_name["llama3-8b-h100"]
    assert (eight["GPUs"], eight["MiB per GPU"], eight["host load ms"]) == (1, 64.0, 1.342)
    # the docs page's figures, unchanged since kv-tiered priced with a deployment of its own
    assert (eight["compute ms, first"], eight["compute ms, after 16384"]) == (14.928, 20.076)
    assert by_name["llama3-70b-4xh100"]["compute ms, after 16384"] == pytest.approx(53.15, abs=0.005)
    assert eight["compute ms, first"] < eight["compute ms, after 16384"], "attention grows with the context"
    assert by_name["llama3-70b-4xh100"]["MiB per GPU"] == 40.0


def test_a_deployment_other_than_the_first_pricing_is_named_in_the_label() -> None:
    default, other = (
        TARGET.instances(str(shipped_workload_path()), config)[-1].label
        for config in ({}, {"deployment": "h100-llama3-70b-tp8"})
    )
    assert "@" in default and "h100" not in default
    assert other == default.replace("@", "@h100-llama3-70b-tp8:", 1)
