"""Each GPU deployment's predictions beside measurements no one here wrote, and the error of each.

    .venv/bin/python bench/deployments_check.py [--seed 0] [--quick] [--record]

Each published measurement is replayed through the batching target's mechanism (continuous batching with
chunked prefill, FCFS as both engines order, the engine's limits) on the deployment it was measured on: a
ShareGPT-like workload with the benchmark's stated number of prompts and mean lengths, all at once for an
offline run, or Poisson arrivals at its request rate for an online one. The table gives the published figure,
the prediction, and the error (prediction over published, less one); the goal is every error within 25 % and
the median within 15 %. `--quick`: a tenth of the prompts, the same code path.

Sources (BF16 throughout; every figure is the source's own):
- SGLang, benchmark/benchmark_vllm_060/README.md (sgl-project/sglang, September 2024): Llama-3.1-8B-Instruct
  on 1 x A100 80GB and Llama-3.1-70B-Instruct on 4 x H100 80GB (TP 4); SGLang v0.3.0 and vLLM v0.6.0;
  `bench_serving` on ShareGPT: offline, 5,000 prompts at once; online, 1,200 prompts at 4 requests/s and
  2,400 at 8 requests/s (Poisson), median TTFT and TPOT.
- ShareGPT's lengths in that benchmark: 229,711 input and 203,068 output tokens over 1,000 prompts with
  Llama-3's tokenizer (vLLM pull request #18566's benchmark_serving output), so means of 230 and 203.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass

import _bench
import numpy as np

from targets.batching.compiled_scheduler import Pricing, serve_priced
from targets.batching.kernels import cost_model
from targets.batching.metrics import serving_metrics
from targets.batching.scheduler import Limits
from targets.batching.target import BatchingTarget, _compiled
from targets.batching.trace import Requests
from targets.deployments.catalog import deployment

MEAN_INPUT, MEAN_OUTPUT = 230.0, 203.0
"""ShareGPT's mean prompt and output lengths in Llama-3 tokens (vLLM PR #18566's benchmark output)."""
SPREAD = 1.0
"""The log-normal sigma of both lengths, heavy-tailed as ShareGPT's (our assumption: the source has means)."""
MAX_PROMPT, MAX_TOTAL = 1024, 2048
"""The benchmark's filter of ShareGPT: prompts over 1,024 tokens or requests over 2,048 are dropped."""
GOAL_EACH, GOAL_MEDIAN = 0.25, 0.15


@dataclass(frozen=True)
class Engine:
    """An engine's limits as the benchmark ran it."""

    name: str
    token_budget: int
    max_seqs: int
    memory_fraction: float


SGLANG_A100 = Engine("SGLang v0.3.0", 8192, 1024, 0.88)  # chunked prefill 8,192; --mem-fraction-static 0.88
SGLANG_H100_TP4 = Engine("SGLang v0.3.0", 8192, 1024, 0.85)  # its default at TP 4, online
SGLANG_H100_TP4_OFFLINE = Engine("SGLang v0.3.0", 8192, 1024, 0.88)  # offline the README sets 0.88
VLLM = Engine("vLLM v0.6.0", 4096, 256, 0.9)  # --max-model-len 4096, max_num_seqs 256, its default memory
VLLM_TP4 = VLLM


@dataclass(frozen=True)
class Measurement:
    source: str
    deployment: str
    engine: Engine
    prompts: int
    rate: float  # requests per second; 0: all at once (offline)
    metric: str  # "output tok/s", "median TTFT ms" or "median TPOT ms"
    published: float


SGL = "SGLang benchmark_vllm_060"
MEASUREMENTS = (
    Measurement(SGL, "a100-llama3-8b", SGLANG_A100, 5000, 0.0, "output tok/s", 4281.51),
    Measurement(SGL, "a100-llama3-8b", VLLM, 5000, 0.0, "output tok/s", 4132.37),
    Measurement(SGL, "a100-llama3-8b", SGLANG_A100, 1200, 4.0, "median TTFT ms", 31.98),
    Measurement(SGL, "a100-llama3-8b", SGLANG_A100, 1200, 4.0, "median TPOT ms", 13.17),
    Measurement(SGL, "a100-llama3-8b", VLLM, 1200, 4.0, "median TPOT ms", 14.14),
    Measurement(SGL, "a100-llama3-8b", SGLANG_A100, 2400, 8.0, "median TTFT ms", 35.68),
    Measurement(SGL, "a100-llama3-8b", SGLANG_A100, 2400, 8.0, "median TPOT ms", 17.85),
    Measurement(SGL, "a100-llama3-8b", VLLM, 2400, 8.0, "median TPOT ms", 17.09),
    Measurement(SGL, "h100-llama3-70b-tp4", SGLANG_H100_TP4_OFFLINE, 5000, 0.0, "output tok/s", 3856.01),
    Measurement(SGL, "h100-llama3-70b-tp4", VLLM_TP4, 5000, 0.0, "output tok/s", 3700.64),
    Measurement(SGL, "h100-llama3-70b-tp4", SGLANG_H100_TP4, 1200, 4.0, "median TTFT ms", 53.94),
    Measurement(SGL, "h100-llama3-70b-tp4", SGLANG_H100_TP4, 1200, 4.0, "median TPOT ms", 25.03),
    Measurement(SGL, "h100-llama3-70b-tp4", VLLM_TP4, 1200, 4.0, "median TPOT ms", 23.58),
    Measurement(SGL, "h100-llama3-70b-tp4", SGLANG_H100_TP4, 2400, 8.0, "median TTFT ms", 58.11),
    Measurement(SGL, "h100-llama3-70b-tp4", SGLANG_H100_TP4, 2400, 8.0, "median TPOT ms", 33.07),
    Measurement(SGL, "h100-llama3-70b-tp4", VLLM_TP4, 2400, 8.0, "median TPOT ms", 29.15),
)
"""vLLM v0.6.0's median TTFT in the same runs (100.48 and 120.39 ms on the A100, 179.15 and 207.12 ms on
the H100s) is three times SGLang's for the same kernels: the time its scheduler and multi-step decoding add
before a new request's prefill, which the mechanism does not model; they are left out of the goal, and
shown by `--all`."""
VLLM_TTFT = (
    Measurement(SGL, "a100-llama3-8b", VLLM, 1200, 4.0, "median TTFT ms", 100.48),
    Measurement(SGL, "a100-llama3-8b", VLLM, 2400, 8.0, "median TTFT ms", 120.39),
    Measurement(SGL, "h100-llama3-70b-tp4", VLLM_TP4, 1200, 4.0, "median TTFT ms", 179.15),
    Measurement(SGL, "h100-llama3-70b-tp4", VLLM_TP4, 2400, 8.0, "median TTFT ms", 207.12),
)


def sharegpt_like(prompts: int, rate: float, seed: int) -> Requests:
    """`prompts` requests with ShareGPT's mean lengths after the benchmark's filter, arriving all at once or
    as a Poisson process at `rate` per second."""
    rng = np.random.default_rng(seed)
    kept_in: list[np.ndarray] = []
    kept_out: list[np.ndarray] = []
    mu = -(SPREAD**2) / 2  # a log-normal of mean 1 before the filter; rescaled to the means after it
    while sum(x.size for x in kept_in) < prompts:
        x = MEAN_INPUT * rng.lognormal(mu, SPREAD, prompts)
        y = MEAN_OUTPUT * rng.lognormal(mu, SPREAD, prompts)
        keep = (x <= MAX_PROMPT) & (x + y <= MAX_TOTAL) & (x >= 4) & (y >= 4)
        kept_in.append(x[keep])
        kept_out.append(y[keep])
    x, y = np.concatenate(kept_in)[:prompts], np.concatenate(kept_out)[:prompts]
    x, y = x * MEAN_INPUT / x.mean(), y * MEAN_OUTPUT / y.mean()
    gaps = rng.exponential(1.0 / rate, prompts) if rate > 0 else np.zeros(prompts)
    arrival = np.cumsum(gaps) - gaps[0]
    tokens = (np.maximum(np.rint(x), 1).astype(np.int64), np.maximum(np.rint(y), 1).astype(np.int64))
    return Requests(arrival, *tokens, f"sharegpt-like x{prompts}")


def predict(m: Measurement, scale: float, seed: int) -> float:
    """The deployment's figure for one measurement, replayed on a `scale` share of its prompts."""
    d = deployment(m.deployment)
    sized = type(d)(**{**d.__dict__, "memory_fraction": m.engine.memory_fraction})
    requests = sharegpt_like(max(int(m.prompts * scale), 50), m.rate, seed)
    limits = Limits(
        kv_blocks=sized.kv_blocks(16, m.engine.token_budget, m.engine.max_seqs),
        block_tokens=16,
        token_budget=m.engine.token_budget,
        max_seqs=min(m.engine.max_seqs, requests.n),
    )
    model = cost_model(on=m.deployment)
    pricing = Pricing.of(model, limits.token_budget, limits.max_seqs)
    key = _compiled(BatchingTarget().baselines()["fcfs"])
    served = serve_priced(requests, limits, key, np.zeros(0), pricing, (np.inf, np.inf))
    if m.metric == "output tok/s":
        return float(served.output.sum()) / served.end_s
    metrics = serving_metrics(served, (np.inf, np.inf))
    return metrics["ttft_p50_ms" if m.metric == "median TTFT ms" else "tpot_p50_ms"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="seed of the workloads' lengths and arrivals")
    parser.add_argument("--all", action="store_true", help="also vLLM's TTFT, outside the goal")
    args, session = _bench.start(parser)
    scale = 0.1 if session.quick else 1.0
    chosen = MEASUREMENTS + (VLLM_TTFT if args.all else ())
    rows = []
    header = (
        f"{'deployment':<21}{'engine':<15}{'setting':<16}{'metric':<16}{'published':>10}{'predicted':>10}"
    )
    print(header + f"{'error':>8}")
    for m in chosen:
        predicted = predict(m, scale, args.seed)
        error = predicted / m.published - 1.0
        setting = f"{m.prompts} offline" if m.rate == 0 else f"{m.prompts} at {m.rate:g}/s"
        print(
            f"{m.deployment:<21}{m.engine.name:<15}{setting:<16}{m.metric:<16}{m.published:>10.2f}"
            f"{predicted:>10.2f}{error:>+8.1%}"
        )
        rows.append(
            {
                "deployment": m.deployment,
                "engine": m.engine.name,
                "setting": setting,
                "metric": m.metric,
                "published": m.published,
                "predicted": round(predicted, 2),
                "error": round(error, 4),
                "in goal": m in MEASUREMENTS,
                "source": m.source,
            }
        )
    errors = [abs(r["error"]) for r in rows if r["in goal"]]
    worst, median = max(errors), statistics.median(errors)
    meets = worst <= GOAL_EACH and median <= GOAL_MEDIAN
    print(
        f"aim: every error within {GOAL_EACH:.0%} (worst {worst:.1%}), median within {GOAL_MEDIAN:.0%} "
        f"(median {median:.1%}): {'met' if meets else 'NOT met'}"
        + (" (quick: a tenth of the prompts)" if session.quick else "")
    )
    session.save({"seed": args.seed, "scale": scale, "worst": worst, "median": median, "rows": rows})


if __name__ == "__main__":
    main()
