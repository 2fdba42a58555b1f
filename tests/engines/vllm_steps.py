"""Drives vLLM's real V1 Scheduler step by step on CPU; run by vLLM's own Python.

Reads a JSON job on stdin: requests (id, arrival s, prompt and output tokens, and the prompt's token ids
where given, else one token repeated), the limits (KV blocks, block tokens, token budget, max sequences),
the duration of a step, whether admission needs room for the whole prompt (vLLM's
scheduler_reserve_full_isl, on by default) or only for its first chunk, and the scheduler: "fcfs" (vLLM's
own) or an exported module's path (its Scheduler class, priority policy).
Each step schedules, then answers as a model runner would: one sampled token for every request whose
scheduled tokens reach its end. Time advances by the step's duration, on a clock the exported class
reads in place of time.time(). The model is a config.json written here (no weights, no tokenizer).
Prints one JSON line: every step's scheduled (id, tokens) and preempted ids.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import torch
from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request

MODEL = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 65536,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
}


def scheduler_class(spec: str) -> type[Scheduler]:
    if spec == "fcfs":
        return Scheduler
    loaded = importlib.util.spec_from_file_location(Path(spec).stem, spec)
    module = importlib.util.module_from_spec(loaded)
    sys.modules[loaded.name] = module
    loaded.loader.exec_module(module)
    return module.Scheduler


def build(job: dict, folder: Path) -> Scheduler:
    (folder / "config.json").write_text(json.dumps(MODEL))
    limits = job["limits"]
    longest = max(r["prompt"] + r["output"] for r in job["requests"])
    model = ModelConfig(model=str(folder), skip_tokenizer_init=True, max_model_len=longest, dtype="float32")
    policy = "fcfs" if job["scheduler"] == "fcfs" else "priority"
    scheduling = SchedulerConfig(
        max_num_seqs=limits["max_seqs"],
        max_num_batched_tokens=limits["token_budget"],
        max_model_len=longest,
        enable_chunked_prefill=True,
        policy=policy,
        is_encoder_decoder=False,
        scheduler_reserve_full_isl=job["reserve_full_prompt"],
    )
    cache = CacheConfig(block_size=limits["block_tokens"], enable_prefix_caching=False)
    cache.num_gpu_blocks = limits["kv_blocks"] + 1  # vLLM's block pool keeps one block back (its null block)
    config = VllmConfig(
        model_config=model, scheduler_config=scheduling, cache_config=cache, device_config=DeviceConfig("cpu")
    )
    spec = FullAttentionSpec(
        block_size=limits["block_tokens"], num_kv_heads=1, head_size=1, dtype=torch.float32
    )
    kv = KVCacheConfig(
        num_blocks=cache.num_gpu_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
    )
    from vllm.v1.structured_output import StructuredOutputManager

    cls = scheduler_class(job["scheduler"])
    return cls(
        vllm_config=config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(config),
        block_size=limits["block_tokens"],
    )


def main() -> None:
    job = json.load(sys.stdin)
    with tempfile.TemporaryDirectory() as folder:
        scheduler = build(job, Path(folder))
    now = 0.0
    if hasattr(scheduler, "clock"):
        scheduler.clock = lambda: now
    pending = sorted(job["requests"], key=lambda r: r["arrival"])
    steps, arrived = [], 0
    while (arrived < len(pending) or scheduler.has_unfinished_requests()) and len(steps) < job["max_steps"]:
        while arrived < len(pending) and pending[arrived]["arrival"] <= now:
            r = pending[arrived]
            params = SamplingParams(max_tokens=r["output"], ignore_eos=True)
            prompt = r.get("tokens") or [7] * r["prompt"]
            scheduler.add_request(Request(r["id"], prompt, params, None, arrival_time=r["arrival"]))
            arrived += 1
        if not scheduler.has_unfinished_requests():
            now = pending[arrived]["arrival"]
            continue
        out = scheduler.schedule()
        preempted = sorted(out.preempted_req_ids or ())
        order = [r.request_id for r in scheduler.running if r.request_id in out.num_scheduled_tokens]
        steps.append({"rows": [[i, out.num_scheduled_tokens[i]] for i in order], "preempted": preempted})
        if out.total_num_scheduled_tokens == 0:
            continue
        now += job["step_s"]
        ids = list(out.num_scheduled_tokens)
        done = {r.request_id for r in scheduler.running if r.num_computed_tokens >= r.num_tokens}
        sampled = [[1] if i in done else [] for i in ids]
        result = ModelRunnerOutput(req_ids=ids, sampled_token_ids=sampled)
        scheduler.update_from_output(out, result)
    print(json.dumps({"steps": steps, "unfinished": scheduler.get_num_unfinished_requests()}))


if __name__ == "__main__":
    main()
