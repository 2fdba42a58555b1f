"""The kv-tiered target: a prefix KV cache over GPU, host memory and disk, scored on prefill time saved.

Three decision functions, one per choice the tiers add: `priority(b, p)` orders GPU blocks for eviction (as
the kv target's key does), `keep(b, p)` says whether a block leaving a tier is written to the one below
(above 0) or dropped, and `below(b, p)` orders the blocks of host memory and disk for eviction. The
mechanism (cache.py) keeps pinning, prefix contiguity and legality, and loads a prefix found below back or
computes it again, whichever the deployment's cost model (deployment.py) says is faster.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from targets.base import (
    MOST,
    Command,
    FeatureRegistry,
    Instance,
    Objective,
    Option,
    OptionError,
    TargetBase,
)
from targets.deployments.catalog import DEPLOYMENTS, deployment
from targets.kv.block_tree import POLICY_KEY, POLICY_S3FIFO, POLICY_STATIC_KEY
from targets.kv.prefix_cache import TIME_VARYING, key_reads
from targets.kv.target import (
    WINDOW_OPTIONS,
    blocks_option,
    load_workload,
    never_full,
    replayed_trace,
    sampled_block,
    shipped_workload_path,
    windowed_instances,
)
from verifiers.compiler import to_numba
from verifiers.program import Program, Signature
from verifiers.properties import Property
from verifiers.static import check

from .cache import (
    BELOW_READS_PARENT,
    DISK,
    GPU,
    HOST,
    PRIORITY_READS_PARENT,
    STATIC_BELOW,
    TIER_COUNTERS,
    replay_tiered_arrays,
)
from .costs import COMMANDS, DEFAULT_DEPLOYMENT, request_costs
from .features import ORACLE_NEXT, TIERED_COLUMNS, TIERED_FEATURES
from .properties import PROPERTIES

PRIORITY = Signature(
    name="priority",
    features=TIERED_FEATURES.names,
    doc="Score an evictable GPU block; the lowest score is evicted first (to host memory or dropped).",
)
KEEP = Signature(
    name="keep",
    features=TIERED_FEATURES.names,
    doc="Score a block leaving GPU memory (tier 0) or host memory (tier 1); above 0 it is written to the "
    "tier below, else dropped.",
)
BELOW = Signature(
    name="below",
    features=TIERED_FEATURES.names,
    doc="Score an evictable block in host memory (tier 1) or on disk (tier 2); the lowest score leaves "
    "first.",
)
SIGNATURES = (PRIORITY, KEEP, BELOW)
ORACLE_SIGNATURES = tuple(Signature(s.name, (*TIERED_FEATURES.names, ORACLE_NEXT)) for s in SIGNATURES)
"""The three decisions with the oracle's next use beside the features: for Belady and the headroom benches."""
_BELADY_SOURCE = '''"""Belady over the tiers: evict what returns furthest ahead, keep below what returns."""


def priority(b, p):
    return -b.next_use


def keep(b, p):
    return 1.0 if b.next_use < 1.0e11 else -1.0


def below(b, p):
    return -b.next_use
'''
TIER_TIME_VARYING = TIME_VARYING | {"in_tier_s"}
"""Features that change while a block sits untouched in its tier: a key reading one is scored anew at
every eviction round, as the single-tier cache scores its time-varying keys."""
WRITE_POLICIES = ("back", "through")
SHIPPED_CAPACITY, SHIPPED_HOST = 1000, 8000
"""The shipped head's configuration: GPU memory for 1,000 blocks of 512 tokens (64 MiB each for
Llama-3-8B: about what an 80 GB H100 leaves beside the weights), host memory for 8,000."""

OPTIONS = (
    Option("capacity", "int", SHIPPED_CAPACITY, "GPU tier capacity in blocks", low=1, high=MOST),
    Option(
        "host_capacity",
        "int",
        SHIPPED_HOST,
        "host-memory tier capacity in blocks (0: none)",
        low=0,
        high=MOST,
    ),
    Option("disk_capacity", "int", 0, "disk tier capacity in blocks (0: none)", low=0, high=MOST),
    Option(
        "write",
        "str",
        "back",
        "when a block is written to host memory: 'back' as it leaves GPU memory, if keep(b, p) > 0 "
        "(HiCache's write_back), or 'through' as it enters GPU memory, every block (HiCache's write_through, "
        "LMCache's default)",
        choices=WRITE_POLICIES,
    ),
    Option(
        "deployment",
        "str",
        DEFAULT_DEPLOYMENT,
        "the model and GPUs that price prefill and loads (`crucible deployments` lists them)",
        choices=tuple(DEPLOYMENTS),
    ),
    *WINDOW_OPTIONS,
)
_CARRIED = ("capacity", "host_capacity", "disk_capacity", "write", "deployment")
"""Options every job's instance carries: they change what a job measures."""
BEHAVIOUR_DECISIONS = 24
BEHAVIOUR_BLOCKS = 16
"""Each function's behaviour sample: 24 decisions, each ranking 16 blocks where the function meets them."""
OBJECTIVE = Objective("prefill_ms_saved", "maximize")


class TieredKVTarget(TargetBase):
    """A prefix KV cache in GPU memory over host memory and disk; the objective is prefill time saved."""

    name = "kv-tiered"
    description = (
        "Manage a prefix (radix) KV cache of fixed-size token blocks kept in three tiers, as SGLang's "
        "HiCache, vLLM's KV offloading and LMCache keep it: GPU memory, host memory below it and optionally "
        "a disk. "
        "A request reuses the contiguous prefix of its blocks found in any tier; blocks found below are "
        "loaded back over PCIe (or from disk) or computed again, whichever is faster for the deployment. "
        "When GPU memory needs room, its evictable blocks (unpinned leaves) are scored with priority(b, p) "
        "and the lowest go first; a block leaving GPU memory without a copy below is written to host "
        "memory if keep(b, p) > 0, else dropped; when host memory or disk needs room, its evictable blocks "
        "are scored with below(b, p) and the lowest go first (a host block to disk if keep(b, p) > 0). "
        "Maximize the prefill time saved, net of the loads."
    )
    signatures = SIGNATURES
    objective = OBJECTIVE
    report_metrics = (
        "prefill_ms_saved", "ttft_ms_mean", "ttft_ms_saved_mean", "hit_rate", "gpu_hit_rate", "host_hit_rate",
        "disk_hit_rate",
    )  # fmt: skip
    integer_metrics = ()
    options = OPTIONS

    def tuned_baselines(self) -> tuple[str, ...]:
        """LFU-DA, whose one constant (its clock) is tuned on the train instances like a candidate's."""
        return ("lfu_da",)

    def objective_for(self, options: Mapping[str, Any]) -> Objective:
        """The objective of a run with these options: prefill time saved, whatever they are."""
        return OBJECTIVE

    def default_config(self) -> dict[str, Any]:
        return {
            "workload": str(shipped_workload_path()),
            "capacity": SHIPPED_CAPACITY,
            "host_capacity": SHIPPED_HOST,
        }

    def registry(self, signature: str) -> FeatureRegistry:
        if signature not in {s.name for s in SIGNATURES}:
            raise KeyError(signature)
        return TIERED_FEATURES

    def instances(self, workload: str, config: Mapping[str, Any]) -> list[Instance]:
        values = {o.name: config.get(o.name, o.default) for o in OPTIONS}
        capacity = blocks_option(values, "capacity")
        host, disk = blocks_option(values, "host_capacity", 0), blocks_option(values, "disk_capacity", 0)
        for option in OPTIONS:
            if option.choices and option.name in values:
                option.check(values[option.name])
        if disk and not host:
            raise OptionError("option disk_capacity needs a host-memory tier above it (host_capacity > 0)")
        carried = {k: values[k] for k in _CARRIED}
        tiers = f"{capacity}+{host}" + (f"+{disk}" if disk else "")
        priced = "" if values["deployment"] == DEFAULT_DEPLOYMENT else f"{values['deployment']}:"
        name = f"{Path(workload).name}@{priced}{tiers}{never_full(workload, capacity)}"
        return windowed_instances(workload, config, name, carried)

    def behaviour_sample(self, signature: str) -> tuple[tuple[Mapping[str, float], ...], ...]:
        """Decisions to rank: blocks as each function meets them (GPU blocks for priority, blocks leaving GPU
        or host memory for keep, host and disk blocks for below), within the features' domains (seeded)."""
        tiers = {"priority": (GPU,), "keep": (GPU, HOST), "below": (HOST, DISK)}
        if signature not in tiers:
            raise KeyError(signature)
        return _behaviour_sample(tiers[signature])

    def behaviour_cuts(self, signature: str) -> tuple[float, ...]:
        """keep's score is compared with 0 (kept above it); the eviction keys only with one another."""
        return (0.0,) if signature == KEEP.name else ()

    def mechanism_params(self) -> tuple[str, ...]:
        """The mechanism reads no PARAMS: the keys' orders and keep's sign are the whole behaviour."""
        return ()

    def requests(self, workload: str) -> int:
        """How many requests the workload holds, in time order (what a holdout of its tail splits)."""
        return load_workload(workload).n_requests

    def commands(self) -> tuple[Command, ...]:
        return COMMANDS

    def properties(self) -> tuple[Property, ...]:
        return PROPERTIES

    def builtin_baselines(self) -> tuple[str, ...]:
        return ("lru-write-through", "s3fifo", "belady")

    def oracles(self) -> tuple[str, ...]:
        return ("belady",)

    def evaluate(self, program: Program, instance: Instance, params: Mapping[str, float]) -> dict[str, float]:
        keys = _compiled(program.source)
        values = np.array([float(params[name]) for name in program.param_names()], dtype=np.float64)
        gpu = POLICY_KEY if _time_varying(program, PRIORITY.name) else POLICY_STATIC_KEY
        return tiered_metrics(instance, (_modes(program), *keys), values, gpu)

    def evaluate_builtin(self, name: str, instance: Instance) -> dict[str, float]:
        if name == "belady":
            return tiered_metrics(instance, (STATIC_BELOW, *_belady_keys()), np.zeros(0), POLICY_STATIC_KEY)
        lru = (STATIC_BELOW, *_compiled(self.baselines()["lru"]))
        if name == "s3fifo":
            return tiered_metrics(instance, lru, np.zeros(0), POLICY_S3FIFO)
        if name == "lru-write-through":
            return tiered_metrics(instance, lru, np.zeros(0), POLICY_STATIC_KEY, write="through")
        raise KeyError(f"unknown built-in baseline {name!r} (have {', '.join(self.builtin_baselines())})")


def tiered_metrics(
    instance: Instance, keys: tuple[Any, ...], params: np.ndarray, gpu_policy: int, write: str | None = None
) -> dict[str, float]:
    """Replay an instance through the tiers; prefill time saved net of loads, TTFT and hit rates by tier."""
    config = instance.config
    counters, ttft, prefill = replay_tiered(
        instance,
        keys,
        params,
        gpu_policy,
        np.array([config["capacity"], config["host_capacity"], config["disk_capacity"]], dtype=np.int64),
        (write or config["write"]) == "through",
    )
    counts = dict(zip(TIER_COUNTERS, (float(c) for c in counters), strict=True))
    accesses = max(counts["accesses"], 1.0)
    saved = prefill - ttft
    return {
        "prefill_ms_saved": float(saved.sum()),
        "prefill_ms_total": float(prefill.sum()),
        "prefill_share_saved": float(saved.sum() / max(prefill.sum(), 1e-12)),
        "ttft_ms_mean": float(ttft.mean()),
        "ttft_ms_p90": float(np.percentile(ttft, 90)),
        "ttft_ms_saved_mean": float(saved.mean()),
        "hit_rate": (counts["hits"] + counts["host_hits"] + counts["disk_hits"]) / accesses,
        "gpu_hit_rate": counts["hits"] / accesses,
        "host_hit_rate": counts["host_hits"] / accesses,
        "disk_hit_rate": counts["disk_hits"] / accesses,
        **counts,
    }


def replay_tiered(
    instance: Instance,
    keys: tuple[Any, ...],
    params: np.ndarray,
    gpu_policy: int,
    capacities: np.ndarray,
    write_through: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The compiled tiered mechanism over an instance: its counters, and each counted request's time to
    first token and prefill time with nothing reused (ms)."""
    trace, counted = replayed_trace(instance)
    costs = request_costs(deployment(str(instance.config.get("deployment", DEFAULT_DEPLOYMENT))), trace)
    arrays = (trace.timestamps_s, trace.offsets, trace.blocks, trace.parent, trace.depth, trace.block_tokens)
    counters, ttft = replay_tiered_arrays(
        keys, params, gpu_policy, capacities, write_through, *arrays, costs, counted
    )
    full = costs[0][trace.offsets[:-1] + np.arange(trace.n_requests)]  # each request with nothing reused
    return counters, ttft[counted:], full[counted:]


def _time_varying(program: Program, name: str) -> bool:
    """Whether a key reads a feature that changes while its block sits untouched (scored at each round)."""
    return bool(key_reads(program, name) & TIER_TIME_VARYING)


def _modes(program: Program) -> int:
    """How the replay scores the keys (cache.py's mode bits): from the features each reads."""
    parent = {"parent_age", "parent_requests"}
    static = 0 if _time_varying(program, BELOW.name) else STATIC_BELOW
    below = BELOW_READS_PARENT if key_reads(program, BELOW.name) & parent else 0
    return static | below | (PRIORITY_READS_PARENT if key_reads(program, PRIORITY.name) & parent else 0)


@functools.lru_cache(maxsize=16)
def _compiled(source: str) -> tuple[Any, Any, Any]:
    """A candidate's three keys, compiled once per process however many trials and instances run them."""
    program = check(source, SIGNATURES)
    return tuple(to_numba(program, s.name, TIERED_COLUMNS) for s in SIGNATURES)  # type: ignore[return-value]


@functools.cache
def _belady_keys() -> tuple[Any, Any, Any]:
    program = check(_BELADY_SOURCE, ORACLE_SIGNATURES)
    return tuple(to_numba(program, s.name, TIERED_COLUMNS) for s in ORACLE_SIGNATURES)  # type: ignore[return-value]


@functools.cache
def _behaviour_sample(tiers: tuple[int, ...]) -> tuple[tuple[Mapping[str, float], ...], ...]:
    """Seeded decisions over blocks in `tiers` whose features keep TIERED_FEATURES' relations, their costs
    those of the default deployment."""
    rng = np.random.default_rng(29)
    priced = deployment(DEFAULT_DEPLOYMENT)

    def log_between(low: float, high: float) -> float:
        return float(np.exp(rng.uniform(np.log(low), np.log(high))))

    decisions = []
    for _ in range(BEHAVIOUR_DECISIONS):
        moment = {"now": float(rng.uniform(60.0, 3600.0))}
        rows = []
        for _ in range(BEHAVIOUR_BLOCKS):
            row = sampled_block(rng, moment, log_between)
            tier = float(tiers[int(rng.integers(0, len(tiers)))])
            host, disk = priced.load_ms(np.array([row["tokens"]]))
            before = np.array([row["prefix_tokens"] - row["tokens"]])
            row |= {
                "tier": tier,
                "backed": float(tier == GPU and rng.random() < 0.5),
                "in_tier_s": row["lifetime"] * float(rng.uniform(0.0, 1.0)),
                "load_ms": float((disk if tier == DISK else host)[0]),
                "recompute_ms": float(priced.compute_ms(np.array([row["tokens"]]), before)[0]),
            }
            rows.append(row)
        decisions.append(tuple(rows))
    return tuple(decisions)
