"""The batching-offline target: a batch known up front, finished as soon as possible; the policy one key."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from targets.base import MOST, FeatureRegistry, Instance, Objective, Option, TargetBase, WorkloadError
from targets.batching.compiled_scheduler import Pricing
from targets.batching.kernels import cost_model
from targets.deployments.catalog import DEFAULT, SERVING, deployment
from targets.export import Export
from verifiers.compiler import param_vector, to_numba
from verifiers.program import Program, Signature
from verifiers.properties import Property, common
from verifiers.static import check

from .batch import GENERATED, Batch, load_batch
from .bound import LARGEST_PASS, Engine, lower_bound_s
from .export import vllm_offline_export
from .features import SEQUENCE_FEATURES
from .offline_loop import BatchStuck, Machine, Ran, run_batch

PRIORITY = Signature(
    name="priority",
    features=SEQUENCE_FEATURES.names,
    state_arg="r",
    doc="Score a sequence when it joins the queue; the highest is admitted first and preempted last.",
)
TOKEN_BUDGET, MAX_SEQS = "token_budget", "max_seqs"
"""PARAMS names the mechanism reads: a candidate may tune the tokens per iteration and the batch cap."""
SHIPPED_WORKLOAD = f"{GENERATED}:100000:0"
BLOCK_TOKENS = 16
"""vLLM's KV block size."""
LARGE_GPU = 70 * 2**30


def vllm_offline_defaults(on: str) -> tuple[int, int]:
    """vLLM's offline `LLM` class defaults (max_num_batched_tokens, max_num_seqs) for a deployment's GPU:
    16,384 and 1,024 from 70 GiB of memory unless the GPU is an A100, else 8,192 and 256 (vLLM 0.34,
    vllm/engine/arg_utils.py, EngineArgs._set_default_max_num_seqs_and_batched_tokens_args)."""
    gpu = deployment(on).gpu
    large = gpu.memory_bytes >= LARGE_GPU and "a100" not in gpu.name.lower()
    return (16384, 1024) if large else (8192, 256)


OPTIONS = (
    Option(
        "deployment",
        "str",
        DEFAULT,
        "the model and GPUs that price each iteration (`crucible deployments` lists them)",
        choices=SERVING,
    ),
    Option(
        "token_budget",
        "int",
        None,
        "tokens per iteration unless a candidate tunes PARAMS['token_budget'] (default: vLLM's offline "
        "max_num_batched_tokens for the deployment's GPU, 16384 on an H100, 8192 on an A100)",
        low=1,
        high=LARGEST_PASS,
        tune=(512, 32768),
    ),
    Option(
        "max_seqs",
        "int",
        None,
        "sequences in one batch at most unless a candidate tunes PARAMS['max_seqs'] (default: vLLM's "
        "offline max_num_seqs, 1024 on an H100, 256 on an A100)",
        low=1,
        high=LARGEST_PASS,
        tune=(16, 2048),
    ),
    Option(
        "capacity",
        "int",
        None,
        "KV cache capacity in blocks (default: the blocks that fit beside the weights and the activations "
        "of the token budget and batch cap run)",
        low=1,
        high=MOST,
    ),
    Option("block_tokens", "int", BLOCK_TOKENS, "tokens per KV block (vLLM's is 16)", low=1, high=4096),
    Option(
        "admit_whole_prompt",
        "bool",
        True,
        "admit a waiting sequence only if its whole prompt's blocks are free, as vLLM does by default "
        "(scheduler_reserve_full_isl); off, its first chunk's blocks suffice",
    ),
    Option(
        "prefix_caching",
        "bool",
        True,
        "keep computed prefix blocks for later sequences, as vLLM does by default (enable_prefix_caching)",
    ),
    Option(
        "train_share",
        "float",
        0.2,
        "share of the batch, from its start, that PARAMS are tuned on",
        low=0.01,
        high=1.0,
    ),
)


class BatchingOfflineTarget(TargetBase):
    """A batch of sequences all present at time zero; the objective is the time to finish them all."""

    name = "batching-offline"
    description = (
        "Order an offline batch, as vLLM's LLM class runs one: every sequence is known and present at time "
        "zero, and the goal is to finish them all as soon as possible. The engine batches continuously: each "
        "iteration is one forward pass over at most a token budget of tokens, one for each decoding sequence "
        "and prefill chunks for the others, and keys and values live in a paged pool of fixed-size blocks "
        "that doubles as a prefix cache. A sequence is scored with priority(r, p) when it joins the waiting "
        "queue (at the start, and again after a preemption): running sequences are served highest first, "
        "one that needs a block when none is free evicts unused cached prefixes and then preempts the "
        "lowest-scored running sequence, which later recomputes everything; then waiting sequences are "
        "admitted highest first while they fit. A candidate may declare PARAMS['token_budget'] and "
        "PARAMS['max_seqs']. Minimize the makespan: the time until the last sequence finishes."
    )
    signatures = (PRIORITY,)
    objective = Objective("makespan_s", "minimize")
    report_metrics = (
        "makespan_s", "output_tok_s", "vs_bound", "peak_kv", "preemptions", "recomputed_tokens",
        "prefix_reuse", "iterations",
    )  # fmt: skip
    integer_metrics = ("preemptions", "recomputed_tokens", "iterations")
    options = OPTIONS

    def default_config(self) -> dict[str, Any]:
        return {"workload": SHIPPED_WORKLOAD, "deployment": DEFAULT}

    def registry(self, signature: str) -> FeatureRegistry:
        if signature != PRIORITY.name:
            raise KeyError(signature)
        return SEQUENCE_FEATURES

    def instances(self, workload: str, config: Mapping[str, Any]) -> list[Instance]:
        config = configured(config)
        batch = load_batch(workload)  # a bad workload fails here
        machine_of(batch, config, None, None)  # as do sizes no sequence fits
        cut = max(1, int(batch.n * float(config.get("train_share", 0.2))))
        name = f"{batch.name}@{config['deployment']}"
        return [
            Instance(workload, {**config, "sequences": cut}, f"{name}[:{cut}]", "train"),
            Instance(workload, config, name, "eval"),
        ]

    def mechanism_params(self) -> tuple[str, ...]:
        """The loop reads the budget and the batch cap from PARAMS: keys that order alike differ by them."""
        return (TOKEN_BUDGET, MAX_SEQS)

    def knobs(self) -> tuple[str, ...]:
        """The budget and the cap are the batch's levers beside its order (vLLM's max_num_batched_tokens and
        max_num_seqs): a search tunes them with the key."""
        return (TOKEN_BUDGET, MAX_SEQS)

    def properties(self) -> tuple[Property, ...]:
        return common("priority", -1.0e300, 1.0e300, subject="The priority", inputs="sequence")

    def tuned_baselines(self) -> tuple[str, ...]:
        return ("fcfs_tuned",)

    def builtin_baselines(self) -> tuple[str, ...]:
        return ("lower_bound",)

    def oracles(self) -> tuple[str, ...]:
        return ("lower_bound",)  # a bound on every schedule, not a schedule

    def exports(self) -> dict[str, Export]:
        """Where an offline program runs outside Crucible: vLLM's V1 scheduler, as request priority."""
        return {"vllm": vllm_offline_export()}

    def evaluate(self, program: Program, instance: Instance, params: Mapping[str, float]) -> dict[str, float]:
        values = {**program.defaults(), **params}
        key = _compiled(program.source)
        return _metrics(
            instance, key, param_vector(program, params), values.get(TOKEN_BUDGET), values.get(MAX_SEQS)
        )

    def evaluate_builtin(self, name: str, instance: Instance) -> dict[str, float]:
        if name != "lower_bound":
            raise KeyError(f"unknown built-in baseline {name!r} (have {', '.join(self.builtin_baselines())})")
        batch = instance_batch(instance)
        bound = _bound(batch, *_engine_of(instance.config))
        return {"makespan_s": bound, "output_tok_s": float(batch.output.sum()) / bound, "vs_bound": 1.0}


def configured(config: Mapping[str, Any]) -> dict[str, Any]:
    """The options with the deployment's vLLM defaults filled in where unset."""
    filled = {o.name: o.default for o in OPTIONS if o.default is not None} | dict(config)
    budget, seqs = vllm_offline_defaults(str(filled["deployment"]))
    if filled.get("token_budget") is None:
        filled["token_budget"] = budget
    if filled.get("max_seqs") is None:
        filled["max_seqs"] = seqs
    return filled


def instance_batch(instance: Instance) -> Batch:
    cut = instance.config.get("sequences")
    return _batch(instance.workload, int(cut) if cut else None)


@functools.lru_cache(maxsize=8)
def _batch(workload: str, cut: int | None) -> Batch:
    """One object per shape of a batch, so its features and bound are computed once per process."""
    batch = load_batch(workload)
    return batch.head(cut) if cut else batch


def machine_of(batch: Batch, config: Mapping[str, Any], budget: float | None, seqs: float | None) -> Machine:
    """The engine an instance runs: a candidate's tuned budget and cap where it declares them (rounded and
    held within the options' bounds), and the KV blocks that fit with them unless capacity is set."""
    config = configured(config)
    tokens = _whole(config["token_budget"] if budget is None else budget, LARGEST_PASS)
    cap = _whole(config["max_seqs"] if seqs is None else seqs, LARGEST_PASS)
    block = int(config["block_tokens"])
    capacity = config.get("capacity") or deployment(str(config["deployment"])).kv_blocks(block, tokens, cap)
    units = batch.unit_tokens if config.get("prefix_caching", True) else 0
    if units % block:
        raise WorkloadError(f"the batch's prefix blocks of {units} tokens are not whole KV blocks of {block}")
    longest = int((batch.prompt + batch.output).max())
    if capacity < 1 or -(-longest // block) > capacity:
        raise WorkloadError(
            f"a sequence of {longest} tokens needs more than the pool's {capacity} blocks of {block} tokens "
            f"on {config['deployment']}"
        )
    return Machine(int(capacity), block, tokens, min(cap, batch.n), bool(config["admit_whole_prompt"]), units)


def _whole(value: Any, most: int) -> int:
    number = float(value)
    return int(min(max(round(number), 1), most)) if np.isfinite(number) else most


def _metrics(
    instance: Instance, key: Any, params: np.ndarray, budget: float | None, seqs: float | None
) -> dict[str, float]:
    batch = instance_batch(instance)
    on = str(instance.config["deployment"])
    machine = machine_of(batch, instance.config, budget, seqs)
    bound = _bound(batch, *_engine_of(instance.config))
    try:
        ran = run_batch(
            key, params, _features(batch), batch.prompt, batch.output, batch.offsets, batch.units, machine,
            _pricing(on, machine.token_budget, machine.max_seqs), horizon_s=HORIZON * bound,
        )  # fmt: skip
    except BatchStuck as exc:
        raise WorkloadError(str(exc)) from None
    return batch_metrics(batch, machine, ran, bound)


HORIZON = 20.0
"""A run stops at this many times the lower bound: a schedule that thrashes so long has failed."""


def batch_metrics(batch: Batch, machine: Machine, ran: Ran, bound: float) -> dict[str, float]:
    """The run summarised; an unfinished batch's makespan is the horizon it ran to."""
    makespan = max(ran.end_s, 1e-9)
    return {
        "makespan_s": makespan,
        "output_tok_s": float(batch.output.sum()) / makespan,
        "vs_bound": makespan / bound,
        "lower_bound_s": bound,
        "peak_kv": ran.peak_blocks / machine.kv_blocks,
        "preemptions": float(ran.preemptions),
        "recomputed_tokens": float(ran.recomputed_tokens),
        "prefix_reuse": ran.hit_tokens / float(batch.prompt.sum()),
        "iterations": float(ran.iterations),
        "unfinished": float(ran.unfinished),
        "token_budget": float(machine.token_budget),
        "max_seqs": float(machine.max_seqs),
        "kv_blocks": float(machine.kv_blocks),
    }


@functools.lru_cache(maxsize=8)
def _pricing(on: str, budget: int, seqs: int) -> Pricing:
    return Pricing.of(cost_model(on=on), budget, seqs)


@functools.lru_cache(maxsize=8)
def _features(batch: Batch) -> np.ndarray:
    """The batch's feature rows (the loop works on a copy)."""
    return batch.features()


def _engine_of(config: Mapping[str, Any]) -> tuple[str, int, int]:
    """What the bound depends on in a configuration: the deployment, the block size, a fixed pool (or 0)."""
    config = configured(config)
    return str(config["deployment"]), int(config["block_tokens"]), int(config.get("capacity") or 0)


@functools.lru_cache(maxsize=8)
def _bound(batch: Batch, on: str, block_tokens: int, capacity: int) -> float:
    """The batch's lower bound over every budget and cap a candidate may set (the pool follows from them
    unless `capacity` fixes it)."""
    if capacity:
        engine = Engine(block_tokens, lambda budget, cap: capacity)
    else:
        engine = Engine(block_tokens, functools.partial(deployment(on).kv_blocks, block_tokens))
    return lower_bound_s(batch, _pricing(on, LARGEST_PASS, LARGEST_PASS), engine)


@functools.lru_cache(maxsize=16)
def _compiled(source: str) -> Callable[..., float]:
    """Compile a candidate once per process, however many trials and instances evaluate it."""
    return to_numba(check(source, [PRIORITY]), PRIORITY.name, SEQUENCE_FEATURES.columns())
