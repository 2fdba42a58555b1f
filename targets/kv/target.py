"""The kv target: prefix KV-cache eviction, with the policy as one `priority(b, p)` key."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from targets.base import (
    MOST,
    WARM,
    WINDOW,
    FeatureRegistry,
    Instance,
    Objective,
    Option,
    OptionError,
    TargetBase,
    Validation,
    WorkloadError,
    request_window,
)
from targets.costmodel.model import DEFAULT_PROFILE, SHIPPED
from targets.export import Export
from targets.trace_files import parsed
from verifiers.compiler import to_numba
from verifiers.program import Program, Signature
from verifiers.properties import Property
from verifiers.static import check

from .block_tree import COUNTERS, POLICY_S3FIFO, POLICY_SIEVE, POLICY_STATIC_KEY
from .export import SGLANG
from .features import BLOCK_FEATURES, NEVER_S, ORACLE_COLUMNS, ORACLE_NEXT_USE
from .generators import GENERATORS
from .kernels import cost_model, engine_metrics, prefill_ms_saved, prefill_ms_total
from .prefix_cache import (
    ALL_POPULATION,
    key_policy,
    key_reads,
    population_reads,
    replay_arrays,
)
from .properties import PROPERTIES
from .trace import Trace, load_mooncake, whole_blocks
from .validation import validation_of

PRIORITY = Signature(
    name="priority",
    features=BLOCK_FEATURES.names,
    doc="Score an evictable cache block; the lowest score is evicted first.",
)
_BELADY = Signature(name="priority", features=(*BLOCK_FEATURES.names, ORACLE_NEXT_USE.name))
_BELADY_SOURCE = '''"""Belady: evict the block whose next use lies furthest in the future (offline bound)."""


def priority(b, p):
    return -b.next_use
'''
_QUEUE_POLICIES = {"s3fifo": POLICY_S3FIFO, "sieve": POLICY_SIEVE}
SHIPPED_WORKLOAD = "mooncake_conversation_head.jsonl"
SHIPPED_CAPACITY = 2000
"""The head of the Mooncake conversation trace, shipped in targets/kv/workloads/ (see its README)."""


WINDOW_OPTIONS = (
    Option(
        "train_share",
        "float",
        0.3,
        "share of the requests, from the start, that PARAMS are tuned on",
        low=0.01,
        high=1.0,
    ),
    WINDOW,
    WARM,
)
"""How a kv trace is cut into the part PARAMS are tuned on and the window scored (windowed_instances)."""
OBJECTIVES = ("block_hit_rate", "prefill_ms_saved")
"""The metrics a kv run may maximize (the `objective` option)."""

OPTIONS = (
    Option("capacity", "int", SHIPPED_CAPACITY, "cache capacity in blocks", low=1, high=MOST, flag=True),
    Option(
        "block_tokens",
        "int",
        None,
        "tokens per cache block; unset keeps the trace's own (512 for Mooncake): another size rescales "
        "every prompt to whole blocks, which changes prefill times, not hits",
        low=1,
        high=MOST,
    ),
    Option(
        "profile",
        "path",
        DEFAULT_PROFILE,
        "kernel profile that prices prefill time: a shipped one or a file written by `crucible profile`",
        choices=SHIPPED,
    ),
    *WINDOW_OPTIONS,
    Option(
        "objective",
        "str",
        None,
        "what a run maximizes: block_hit_rate (unset), or prefill_ms_saved, the prefill time the hits save "
        "(priced with the profile: a deep block saves more than a shallow one)",
        choices=OBJECTIVES,
    ),
)
BEHAVIOUR_DECISIONS = 24
BEHAVIOUR_BLOCKS = 16
"""The behaviour sample: 24 evictions, each ranking 16 evictable blocks (384 block states in all)."""
_CARRIED = ("profile", "block_tokens")
"""Options every job's instance carries (capacity aside): they change what a job measures."""


def shipped_workload_path() -> Path:
    return Path(str(resources.files("targets.kv") / "workloads" / SHIPPED_WORKLOAD))


class KVTarget(TargetBase):
    """Prefix KV-cache eviction under a block capacity; the objective is the block hit rate."""

    name = "kv"
    description = (
        "Choose which block to evict from a prefix (radix) KV cache of fixed-size token blocks, as in vLLM "
        "automatic prefix caching and SGLang RadixAttention. A request reuses only the contiguous cached "
        "prefix of its blocks. When a request needs room, every evictable block (an unpinned leaf: no cached "
        "child, not used by the request in flight) is scored with priority(b, p) at that moment, and the "
        "lowest scores are evicted first. Maximize the block hit rate."
    )
    signatures = (PRIORITY,)
    objective = Objective("block_hit_rate", "maximize")
    report_metrics = ("block_hit_rate", "token_hit_rate", "gap_closed", "prefill_ms_saved")
    integer_metrics = ()
    options = OPTIONS

    def tuned_baselines(self) -> tuple[str, ...]:
        """LFU-DA, whose one constant (its clock) is tuned on the train instances like a candidate's."""
        return ("lfu_da",)

    def objective_for(self, options: Mapping[str, Any]) -> Objective:
        """The objective a run with these options maximizes: the `objective` option's metric."""
        metric = str(options.get("objective") or self.objective.metric)
        if metric not in OBJECTIVES:
            raise OptionError(f"option objective must be one of {', '.join(OBJECTIVES)}, got {metric!r}")
        return Objective(metric, "maximize")

    def default_config(self) -> dict[str, Any]:
        return {"workload": str(shipped_workload_path()), "capacity": SHIPPED_CAPACITY}

    def registry(self, signature: str) -> FeatureRegistry:
        if signature != PRIORITY.name:
            raise KeyError(signature)
        return BLOCK_FEATURES

    def instances(self, workload: str, config: Mapping[str, Any]) -> list[Instance]:
        capacity = blocks_option(config, "capacity")
        cost_model(_profile(Instance(workload, config)))  # a profile that cannot answer fails here
        carried = {"capacity": capacity, **{k: config[k] for k in _CARRIED if config.get(k) is not None}}
        name = f"{Path(workload).name}@{capacity}{never_full(workload, capacity)}"
        plain = windowed_instances(workload, config, name, carried)
        # LRU and Belady once here, not in every job: they turn a hit rate into the share of the gap closed.
        return [replace(i, config={**i.config, "reference": list(_reference_rates(i))}) for i in plain]

    def behaviour_sample(self, signature: str) -> tuple[tuple[Mapping[str, float], ...], ...]:
        """Evictions to rank: block states drawn within every feature's domain and relations (seeded)."""
        if signature != PRIORITY.name:
            raise KeyError(signature)
        return _behaviour_sample()

    def behaviour_cuts(self, signature: str) -> tuple[float, ...]:
        """The cache compares keys only with one another: it evicts the lowest, whatever its value."""
        return ()

    def mechanism_params(self) -> tuple[str, ...]:
        """The eviction mechanism reads no PARAMS: a key's order is its whole behaviour."""
        return ()

    def requests(self, workload: str) -> int:
        """How many requests the workload holds, in time order (what a holdout of its tail splits)."""
        return load_workload(workload).n_requests

    def files(self, instance: Instance) -> tuple[str, ...]:
        profile = _profile(instance)
        paths = [instance.workload] if Path(instance.workload).is_file() else []
        paths += [profile] if profile not in SHIPPED else []
        return tuple(str(Path(p).resolve()) for p in paths)

    def exports(self) -> dict[str, Export]:
        """Where a kv program runs outside Crucible: SGLang's radix cache (vLLM's prefix-cache eviction is a
        fixed LRU list, not pluggable)."""
        return {"sglang": SGLANG}

    def properties(self) -> tuple[Property, ...]:
        return PROPERTIES

    def builtin_baselines(self) -> tuple[str, ...]:
        return ("s3fifo", "sieve", "belady")

    def oracles(self) -> tuple[str, ...]:
        return ("belady",)

    def validation(self) -> Validation:
        return validation_of(self)

    def evaluate(self, program: Program, instance: Instance, params: Mapping[str, float]) -> dict[str, float]:
        key = _compiled(program.source)
        values = np.array([float(params[name]) for name in program.param_names()], dtype=np.float64)
        population = population_reads(key_reads(program, PRIORITY.name))
        return self._metrics(instance, key, values, key_policy(program, PRIORITY.name), population)

    def evaluate_builtin(self, name: str, instance: Instance) -> dict[str, float]:
        if name == "belady":
            return self._metrics(instance, _belady_key(), np.zeros(0), POLICY_STATIC_KEY)  # reads next_use
        if name in _QUEUE_POLICIES:
            return self._metrics(instance, _belady_key(), np.zeros(0), _QUEUE_POLICIES[name])
        raise KeyError(f"unknown built-in baseline {name!r} (have {', '.join(self.builtin_baselines())})")

    def _metrics(
        self, instance: Instance, key: Any, params: np.ndarray, policy: int, population: int = ALL_POPULATION
    ) -> dict[str, float]:
        (replayed, counted), capacity = replayed_trace(instance), int(instance.config["capacity"])
        engine = instance.config.get("engine")
        counters, hits, evicted_req, evicted_block = replay_trace(
            replayed,
            capacity,
            key,
            params,
            policy,
            record=bool(engine),
            population=population,
            counted_from=counted,
        )
        trace, hits, evicted_req = instance_trace(instance), hits[counted:], evicted_req - counted
        metrics = rates(dict(zip(COUNTERS, (int(c) for c in counters), strict=True)))
        lru, belady = _reference_rates(instance)
        room = belady - lru
        metrics["gap_closed"] = (metrics["block_hit_rate"] - lru) / room if room > 0 else 0.0
        metrics["prefill_ms_saved"] = prefill_ms_saved(trace, hits, _profile(instance))
        metrics["prefill_ms_total"] = prefill_ms_total(trace, _profile(instance))
        metrics["prefill_share_saved"] = metrics["prefill_ms_saved"] / max(metrics["prefill_ms_total"], 1e-12)
        if engine:
            metrics |= engine_metrics(trace, capacity, hits, (evicted_req, evicted_block), engine)
        return metrics


def blocks_option(config: Mapping[str, Any], name: str, least: int = 1) -> int:
    """A capacity in blocks from a configuration; WorkloadError names it unless a whole number >= least."""
    value = config.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= MOST:
        kind = "a positive" if least == 1 else "a non-negative"
        raise WorkloadError(f"{name} must be {kind} number of blocks up to {MOST:.0e}, got {value!r}")
    return value


def never_full(workload: str, capacity: int) -> str:
    """A note for an instance's name where the cache holds every block the trace has (it never evicts, and
    runs as a cache of exactly that size), else nothing."""
    blocks = load_workload(workload).n_blocks
    return f" (holds all {blocks:,} blocks of the trace: never evicts)" if capacity >= blocks else ""


def windowed_instances(
    workload: str, config: Mapping[str, Any], name: str, carried: Mapping[str, Any]
) -> list[Instance]:
    """The train instance (the first `train_share` of the requests window) and the eval instance (the whole
    window), each carrying `carried` and the window; with `warm` and a window, both replay the requests
    before it first, uncounted."""
    train_share = float(config.get("train_share", 0.3))
    n = load_workload(workload).n_requests
    window = config.get("requests")
    lo, hi = request_window(window, n) if isinstance(window, str) else (0, n)
    cut = lo + max(1, int((hi - lo) * train_share))
    warm = bool(window and config.get("warm"))  # unset, false and warm without a window: one replay
    name += f"[{lo}:{hi}]{' warm' if warm else ''}" if window else ""
    carried = {**carried, "warm": True} if warm else dict(carried)
    scored = {**carried, "requests": [lo, hi]} if window else carried
    return [
        Instance(workload, {**carried, "requests": [lo, cut]}, f"{name}[:{cut - lo}]", role="train"),
        Instance(workload, scored, name, role="eval"),
    ]


def replay(instance: Instance, key: Any, params: np.ndarray, policy: int) -> dict[str, int]:
    """Run the compiled mechanism on an instance and return its counters by name."""
    trace, counted = replayed_trace(instance)
    counters, _, _, _ = replay_trace(
        trace, int(instance.config["capacity"]), key, params, policy, counted_from=counted
    )
    return dict(zip(COUNTERS, (int(c) for c in counters), strict=True))


def replay_trace(
    trace: Trace,
    capacity: int,
    key: Any,
    params: np.ndarray,
    policy: int,
    record: bool = False,
    population: int = ALL_POPULATION,
    counted_from: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The compiled mechanism over a trace: counters, hits per request, and with `record` every eviction.

    `population` (POP_HITS, POP_AGE bits) names the population statistics the key reads; others stay 0.
    The counters and recorded evictions start at request `counted_from`; the requests before only warm up.
    """
    arrays = (trace.timestamps_s, trace.offsets, trace.blocks, trace.parent, trace.depth, trace.block_tokens)
    return replay_arrays(key, params, policy, population, capacity, *arrays, record, counted_from)


def rates(counts: Mapping[str, int]) -> dict[str, float]:
    """Hit rates from replay counters, plus the raw counts for the record."""
    accesses = max(counts["accesses"], 1)
    tokens = max(counts["tokens"], 1)
    return {
        "block_hit_rate": counts["hits"] / accesses,
        "token_hit_rate": counts["hit_tokens"] / tokens,
        **{name: float(value) for name, value in counts.items()},
    }


def instance_trace(instance: Instance) -> Trace:
    """The trace of an instance: sliced to `requests: [start, stop]`, flattened when `flat` is set, and
    scaled to whole blocks of `block_tokens` tokens when that is set (for the real engine)."""
    window = instance.config.get("requests")
    bounds = (int(window[0]), int(window[1])) if window else None
    flat, scaled = bool(instance.config.get("flat")), int(instance.config.get("block_tokens", 0))
    return _shaped(load_workload(instance.workload), bounds, flat, scaled)


def replayed_trace(instance: Instance) -> tuple[Trace, int]:
    """What a replay of the instance runs and the request it counts from: its own trace, or with `warm` the
    workload from its first request to the window's end, counted from the window's start."""
    window = instance.config.get("requests")
    if not (window and instance.config.get("warm")):
        return instance_trace(instance), 0
    flat, scaled = bool(instance.config.get("flat")), int(instance.config.get("block_tokens", 0))
    trace, whole, start = load_workload(instance.workload), (0, int(window[1])), int(window[0])
    if flat:  # a flat stream's requests are single accesses
        start = int(_shaped(trace, whole, False, scaled).offsets[start])
    return _shaped(trace, whole, flat, scaled), start


@functools.lru_cache(maxsize=8)
def _shaped(trace: Trace, window: tuple[int, int] | None, flat: bool, block_tokens: int = 0) -> Trace:
    """Slicing rebuilds the arrays, so each shape of a trace is made once per process, not per trial."""
    if window:
        trace = trace.slice(*window)
    if block_tokens:
        trace = whole_blocks(trace, block_tokens)
    return flatten(trace) if flat else trace


def _profile(instance: Instance) -> str:
    """The kernel profile whose cost model prices prefill time (a shipped name or a profile file)."""
    return str(instance.config.get("profile", DEFAULT_PROFILE))


def flatten(trace: Trace) -> Trace:
    """The block stream as a classic cache sees it: one access per step, no prefix rule, nothing pinned.

    Each access becomes a one-block request at time = its position, and every block is a root, so every
    cached block is an evictable leaf and a hit needs only the block itself.
    """
    n = trace.n_accesses
    return replace(
        trace,
        timestamps_s=np.arange(n, dtype=np.float64),
        input_tokens=trace.block_tokens[trace.blocks],
        output_tokens=np.zeros(n, dtype=np.int64),
        offsets=np.arange(n + 1, dtype=np.int64),
        parent=np.full(trace.n_blocks, -1, dtype=np.int64),
        depth=np.ones(trace.n_blocks, dtype=np.int64),
        name=f"{trace.name}(flat)",
    )


def load_workload(workload: str) -> Trace:
    """A workload is a Mooncake JSONL path or `gen:<kind>:<seed>` for a seeded generator."""
    if workload.startswith("gen:"):
        parts = workload.split(":")
        kinds = ", ".join(GENERATORS)
        if len(parts) != 3:
            raise WorkloadError(f"generated workloads are gen:<kind>:<seed> (kind {kinds}); got {workload!r}")
        if parts[1] not in GENERATORS:
            raise WorkloadError(f"{workload}: no generator {parts[1]!r}; the kinds are {kinds}")
        if not parts[2].isdigit():
            raise WorkloadError(f"{workload}: the seed must be a whole number from 0, got {parts[2]!r}")
        return _generated(parts[1], int(parts[2]))
    return parsed(workload, load_mooncake)


@functools.lru_cache(maxsize=4)
def _generated(kind: str, seed: int) -> Trace:
    return GENERATORS[kind](seed)


@functools.cache
def _behaviour_sample() -> tuple[tuple[Mapping[str, float], ...], ...]:
    """Seeded evictions whose blocks satisfy BLOCK_FEATURES' relations, on scales like the shipped traces'
    (times up to an hour, counts small enough to tie), so ranks and ties read like the mechanism's."""
    rng = np.random.default_rng(17)

    def log_between(low: float, high: float) -> float:
        return float(np.exp(rng.uniform(np.log(low), np.log(high))))

    decisions = []
    for _ in range(BEHAVIOUR_DECISIONS):
        now = float(rng.uniform(60.0, 3600.0))
        ages = sorted(log_between(0.01, now) for _ in range(2))
        hits = sorted(float(rng.integers(0, 6)) for _ in range(2))
        moment = {
            "now": now,
            "pop_hits_p50": hits[0],
            "pop_hits_p90": hits[1],
            "pop_age_p50": ages[0],
            "pop_age_p90": ages[1],
            "ewma_hit_age": log_between(0.01, now) if rng.random() < 0.9 else 0.0,
            "ewma_evict_age": log_between(0.01, now) if rng.random() < 0.9 else 0.0,
        }
        decisions.append(tuple(sampled_block(rng, moment, log_between) for _ in range(BEHAVIOUR_BLOCKS)))
    return tuple(decisions)


def sampled_block(
    rng: np.random.Generator, moment: Mapping[str, float], log_between: Callable[[float, float], float]
) -> dict[str, float]:
    """One evictable block at `moment`, every relation of BLOCK_FEATURES kept."""
    now = moment["now"]
    last_access = round(now - log_between(0.001, now), 3)
    inserted_at = round(last_access * float(rng.uniform(0.0, 1.0)), 3)
    hits = float(rng.geometric(0.5) - 1)
    accesses = hits + float(rng.geometric(0.6))
    evictions = float(min(accesses - hits - 1.0, rng.geometric(0.7) - 1))
    depth = float(rng.integers(1, 40))
    tokens = 512.0 if rng.random() < 0.8 else float(rng.integers(1, 513))
    age = now - last_access
    first = depth == 1.0
    turns = float(rng.integers(1, 8))
    return {
        **moment,
        "last_access": last_access,
        "inserted_at": inserted_at,
        "age": age,
        "lifetime": now - inserted_at,
        "hits": hits,
        "accesses": accesses,
        "depth": depth,
        "tokens": tokens,
        "prefix_tokens": 512.0 * (depth - 1.0) + tokens,
        "fanout": float(rng.geometric(0.6) - 1),
        "reuse_mean": log_between(0.01, now),
        "last_interval": log_between(0.01, now),
        "evictions": evictions,
        "since_evicted": log_between(0.01, now) if evictions else NEVER_S,
        "frontier": float(rng.random() < 0.3),
        "parent_age": 0.0 if first else age * float(rng.uniform(0.0, 1.0)),
        "parent_requests": accesses + float(rng.geometric(0.3) - 1),
        "turns": turns,
        "turn_gap": 0.0 if turns == 1.0 else log_between(1.0, now),
    }


@functools.lru_cache(maxsize=16)
def _compiled(source: str) -> Any:
    """Compile a candidate once per process, however many trials and instances evaluate it."""
    return to_numba(check(source, [PRIORITY]), PRIORITY.name, BLOCK_FEATURES.columns())


@functools.cache
def _belady_key() -> Any:
    program = check(_BELADY_SOURCE, [_BELADY])
    return to_numba(program, PRIORITY.name, ORACLE_COLUMNS)


@functools.lru_cache(maxsize=8)
def _reference_rates_cached(
    workload: str, capacity: int, window: tuple[int, int] | None, flat: bool, warm: bool
) -> tuple[float, float]:
    config: dict[str, Any] = {"capacity": capacity, "flat": flat, "warm": warm}
    if window:
        config["requests"] = list(window)
    instance = Instance(workload=workload, config=config)
    lru_key = _compiled(KVTarget().baselines()["lru"])
    lru = rates(replay(instance, lru_key, np.zeros(0), POLICY_STATIC_KEY))["block_hit_rate"]
    belady = rates(replay(instance, _belady_key(), np.zeros(0), POLICY_STATIC_KEY))["block_hit_rate"]
    return lru, belady


def _reference_rates(instance: Instance) -> tuple[float, float]:
    """LRU and Belady block hit rates on the same instance, for the share of the gap a policy closes."""
    if "reference" in instance.config:
        lru, belady = instance.config["reference"]
        return float(lru), float(belady)
    window = instance.config.get("requests")
    key = (int(window[0]), int(window[1])) if window else None
    capacity = int(instance.config["capacity"])
    flat, warm = bool(instance.config.get("flat")), bool(instance.config.get("warm"))
    return _reference_rates_cached(instance.workload, capacity, key, flat, warm)
