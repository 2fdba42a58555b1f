"""Sequences simulated per second: the offline batch loop on the 100,000-sequence batch against the online
batching simulator (compiled_scheduler.serve_priced) on the head of the same batch, all at time zero.

    .venv/bin/python bench/batching_offline_speed.py [--sequences 100000] [--online 3000] [--quick]
        [--record]

Both run vLLM's arrival order on h100-llama3-8b with vLLM's offline defaults (16,384 tokens, 1,024
sequences, whole-prompt admission, no prefixes). The online simulator scores every live sequence at every
iteration, so on a batch all present at zero its cost grows with the square of the batch: it runs a head
of the batch (`--online`), and the figure compared is sequences per second of wall time. Each side is
timed after a warm-up run, so compiling is not counted. `--quick`: 2,000 and 300 sequences.
"""

from __future__ import annotations

import argparse
import os
import time

import _bench
import numpy as np

from targets.base import Instance
from targets.batching.compiled_scheduler import Pricing, serve_priced
from targets.batching.kernels import cost_model
from targets.batching.scheduler import Limits
from targets.batching.target import BatchingTarget
from targets.batching.target import _compiled as online_key
from targets.batching.trace import Requests
from targets.batching_offline.batch import load_batch
from targets.batching_offline.target import BatchingOfflineTarget, _metrics, machine_of
from targets.batching_offline.target import _compiled as offline_key

ON = "h100-llama3-8b"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sequences", type=int, default=100_000)
    parser.add_argument("--online", type=int, default=3000)
    args, session = _bench.start(parser)
    if session.quick:
        args.sequences, args.online = 2000, 300
    target = BatchingOfflineTarget()
    workload = f"gen:{args.sequences}:0"
    config = {"deployment": ON}
    instance = Instance(workload, config, "bench", "eval")
    key = offline_key(target.baselines()["vllm_fcfs"])
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    _metrics(instance, key, np.zeros(0), None, None)  # warm-up: compiled or loaded
    start = time.perf_counter()
    offline = _metrics(instance, key, np.zeros(0), None, None)
    offline_s = time.perf_counter() - start

    head = load_batch(workload).head(args.online)
    machine = machine_of(head, config, None, None)
    limits = Limits(machine.kv_blocks, machine.block_tokens, machine.token_budget, machine.max_seqs, True)
    requests = Requests(np.zeros(head.n), head.prompt, head.output, head.name)
    pricing = Pricing.of(cost_model(on=ON), limits.token_budget, limits.max_seqs)
    fcfs = online_key(BatchingTarget().baselines()["fcfs"])
    serve_priced(requests.slice(0, min(50, head.n)), limits, fcfs, np.zeros(0), pricing, (1e9, 1e9))
    start = time.perf_counter()
    online = serve_priced(requests, limits, fcfs, np.zeros(0), pricing, (1e9, 1e9))
    online_s = time.perf_counter() - start
    print(f"load average after: {os.getloadavg()[0]:.2f}")

    rows = [
        _row("offline loop", args.sequences, offline["iterations"], offline_s),
        _row("online simulator", head.n, online.iterations, online_s),
    ]
    ratio = rows[0]["sequences_per_s"] / rows[1]["sequences_per_s"]
    print(f"offline / online: {ratio:.1f}x sequences per second")
    session.save({"batch": workload, "deployment": ON, "speed": rows, "ratio": ratio})


def _row(name: str, sequences: int, iterations: float, seconds: float) -> dict[str, float | int | str]:
    rate = sequences / seconds
    print(
        f"{name:<18}{sequences:>9} sequences {int(iterations):>8} iterations {seconds:>8.2f} s {rate:>9.0f}/s"
    )
    return {"simulator": name, "sequences": sequences, "iterations": int(iterations), "seconds": seconds,
            "sequences_per_s": rate}  # fmt: skip


if __name__ == "__main__":
    main()
