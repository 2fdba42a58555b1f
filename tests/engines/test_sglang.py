"""The found kv program exported to SGLang, replayed through SGLang's real RadixCache beside Crucible's kv
simulator on the same slice of the shipped Mooncake trace, with SGLang's own LRU beside Crucible's LRU.

Matched capacity: Crucible holds CAPACITY blocks of 512 tokens, SGLang a token pool of CAPACITY x 512
tokens. The mechanisms differ (SGLang evicts whole tree nodes and counts tokens, so a partial last block
takes only its tokens; Crucible evicts and counts 512-token blocks); docs/guides/engines.md gives figures.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from engine_runs import ROOT, engine_python, export, run_engine, run_script

from targets.kv.target import KVTarget, shipped_workload_path
from verifiers.static import check

pytestmark = pytest.mark.engines

SLICE = "0:1000"
CAPACITY = 2000
FOUND = ROOT / "bench" / "policies" / "found_kv.py"
EVERY_FEATURE = '''"""Reads every feature SGLang exposes."""


def priority(b, p):
    return b.now + b.last_access + b.inserted_at + b.age + b.lifetime + b.hits + b.depth + b.tokens + (
        b.prefix_tokens + b.evictions + b.since_evicted + b.parent_age
    )
'''
AGREEMENT = 0.05
"""Each engine hit rate within 5 % (relative) of Crucible's for the same program."""


def crucible_rate(source: str) -> float:
    target = KVTarget()
    config = {"capacity": CAPACITY, "requests": SLICE}
    instance = next(i for i in target.instances(str(shipped_workload_path()), config) if i.role == "eval")
    program = check(source, target.signatures)
    return target.evaluate(program, instance, program.defaults())["block_hit_rate"]


def installed(tmp_path_factory: pytest.TempPathFactory, source: Path) -> Path:
    """The exported module installed as a user installs it: pip, into a folder put on the path."""
    python = engine_python("sglang")
    folder = export(tmp_path_factory.mktemp("export"), source, "sglang")
    plugins = tmp_path_factory.mktemp("plugins")
    install = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target"]
    done = subprocess.run([*install, str(plugins), str(folder)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return plugins


def replay_args(policy: str, tree_core: str | None = None) -> list[str]:
    args = [str(shipped_workload_path()), "--requests", SLICE, "--capacity-tokens", str(CAPACITY * 512)]
    return [*args, "--policy", policy, *(["--tree-core", tree_core] if tree_core else [])]


def sglang_replay(policy: str, plugins: Path | None = None, tree_core: str | None = None) -> dict:
    env = {"PYTHONPATH": str(plugins)} if plugins else None
    return run_engine("sglang", "sglang_replay.py", replay_args(policy, tree_core), env=env)


@pytest.fixture(scope="module")
def replays(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """LRU and the exported found program through RadixCache, the latter loaded by SGLang's plugin entry
    point."""
    plugins = installed(tmp_path_factory, FOUND)
    return {
        "lru": sglang_replay("lru"),
        "found": sglang_replay("crucible_found_kv", plugins),
        "serving lru": sglang_replay("lru", tree_core="python"),
        "serving found": sglang_replay("crucible_found_kv", plugins, tree_core="python"),
        "plugins": {"path": str(plugins)},
    }


def test_the_replays_keep_to_the_pool(replays: dict[str, dict]) -> None:
    """Free slots and the tree's tokens add up to the pool: no slot is freed while the tree holds it."""
    for name in ("lru", "found", "serving lru", "serving found"):
        assert replays[name]["held_tokens"] == CAPACITY * 512, name


def test_the_exported_policy_is_what_sglang_runs(replays: dict[str, dict]) -> None:
    assert replays["found"]["strategy"] == "crucible_found_kv.Strategy"
    assert replays["lru"]["strategy"].endswith("LRUStrategy")
    assert replays["found"]["crucible_modules"] == []  # self-contained: nothing of Crucible was imported


def test_on_the_cache_sglang_serves_with_the_python_tree_core_runs_it(replays: dict[str, dict]) -> None:
    """UnifiedRadixCache, SGLang's serving cache: its Python core calls the exported strategy, and the
    found program beats LRU there too; its Rust core refuses a policy it does not know."""
    assert replays["serving found"]["strategy"] == "crucible_found_kv.Strategy"
    print(json.dumps({name: replays[f"serving {name}"]["block_hit_rate"] for name in ("found", "lru")}))
    assert replays["serving found"]["block_hit_rate"] > replays["serving lru"]["block_hit_rate"]
    env = {"PYTHONPATH": replays["plugins"]["path"]}
    rust = run_script("sglang", "sglang_replay.py", replay_args("crucible_found_kv", "rust"), env=env)
    assert rust.returncode != 0
    assert "Unknown eviction policy: crucible_found_kv" in rust.stderr


def test_found_program_beats_lru_in_sglang_as_in_crucible(replays: dict[str, dict]) -> None:
    crucible = {
        "found": crucible_rate(FOUND.read_text()),
        "lru": crucible_rate(KVTarget().baselines()["lru"]),
    }
    sglang = {name: replays[name]["block_hit_rate"] for name in ("found", "lru")}
    print(json.dumps({"crucible": crucible, "sglang": sglang}))
    assert crucible["found"] > crucible["lru"]
    assert sglang["found"] > sglang["lru"]
    for name in ("found", "lru"):
        assert abs(sglang[name] - crucible[name]) <= AGREEMENT * crucible[name], (name, sglang, crucible)


def test_features_read_off_real_tree_nodes(tmp_path_factory: pytest.TempPathFactory) -> None:
    """sglang_features.py's scenario, in blocks of 4 tokens: A = 1..10 at t=10; B = 1..6, 50..52 at t=20
    splits A into U = 1..6 and A' = 7..10 beside B' = 50..52; all evicted at t=30; A again at t=40."""
    source = tmp_path_factory.mktemp("program") / "every_feature.py"
    source.write_text(EVERY_FEATURE)
    plugins = installed(tmp_path_factory, source)
    env = {"PYTHONPATH": str(plugins)}
    out = run_engine("sglang", "sglang_features.py", ["--policy", "crucible_every_feature"], env=env)
    names = ("now", "last_access", "inserted_at", "age", "lifetime", "hits", "depth", "tokens")
    names += ("prefix_tokens", "evictions", "since_evicted", "parent_age")
    expected = {
        # A split node is created at the split (creation_time 20), its hits those of A plus B's reuse.
        "U": (25, 20, 20, 5, 5, 1, 2, 2, 6, 0, 1e6, 5),
        # B's match touched A before splitting it, so A's tail was accessed at 20 though B did not use it.
        "A'": (25, 20, 10, 5, 15, 0, 3, 2, 10, 0, 1e6, 5),
        "B'": (25, 20, 20, 5, 5, 0, 3, 1, 9, 0, 1e6, 5),
        # Every block of the new A was evicted once, at 30 (as part of U or A').
        "A again": (45, 40, 40, 5, 5, 0, 3, 2, 10, 1, 15, 5),
    }
    assert out["evicted"] == 13
    assert out["features"] == {k: dict(zip(names, map(float, v), strict=True)) for k, v in expected.items()}
