"""A serving instance as a real engine decides as the simulated instance does, and its cache is correct."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from targets.batching.compiled_scheduler import Pricing  # noqa: E402
from targets.batching.kernels import cost_model  # noqa: E402
from targets.batching.scheduler import Limits, Served  # noqa: E402
from targets.batching.trace import Requests  # noqa: E402
from targets.costmodel.shapes import ModelShape  # noqa: E402
from targets.deployments.catalog import CPU  # noqa: E402
from targets.reference_engine.model import Transformer  # noqa: E402
from targets.serving.engine_instance import EngineInstance, block_ids  # noqa: E402
from targets.serving.fleet import Fleet, replay  # noqa: E402
from targets.serving.process_fleet import prompts_of  # noqa: E402
from targets.serving.sources import Keyed, Sources  # noqa: E402
from targets.serving.target import DEFAULT_SOURCE, _policies, compiled_keys  # noqa: E402
from targets.serving.workload import requests_of  # noqa: E402

pytestmark = pytest.mark.torch

SMALL = ModelShape("test", layers=2, hidden=64, heads=2, head_dim=32, ffn=96, vocab=101)
SLO = (2.0, 0.1)


def _engine(limits: Limits, n: int) -> EngineInstance:
    _, schedule, evict = compiled_keys(DEFAULT_SOURCE)
    keys = (schedule, np.zeros(0), evict, np.zeros(0))
    return EngineInstance(Transformer(SMALL, seed=1), limits, SLO, keys, n)


def _serve_all_at_once(
    engine: EngineInstance, prompts: list[list[int]], outputs: list[int]
) -> list[list[int]]:
    """Every request arrives at 0, as the fleet's clock sends them: the first starts an iteration alone, the
    others wait for its end; then iterations run back to back. Returns each request's generated tokens."""
    generated: list[list[int]] = [[] for _ in prompts]
    now = 0.0
    for r, (prompt, output) in enumerate(zip(prompts, outputs, strict=True)):
        engine.arrive(r, prompt, output, 0.0)
        if not engine.busy:
            engine.start(0.0)
    while engine.busy:
        ms = engine.passes[-1][0]
        now += max(ms, 1e-3) / 1e3
        for emitted in engine.end(now):
            generated[emitted.request].append(emitted.token)
        engine.start(now)
    return generated


def test_block_identity_is_the_whole_prefix_not_the_block_alone() -> None:
    a, b = block_ids([1, 2, 3, 4, 5, 6], 2), block_ids([9, 9, 3, 4, 5], 2)
    assert a[0] != b[0] and a[1] != b[1], "the same tokens after another prefix are another block"
    assert block_ids([1, 2, 3, 4, 7], 2)[:2] == a[:2], "a shared prefix is the same blocks"
    assert len(b) == 3, "a partial last block is a block too"


def test_a_hit_skips_the_cached_prefix_and_generates_what_a_cold_prefill_does() -> None:
    limits = Limits(kv_blocks=64, block_tokens=4, token_budget=64, max_seqs=8)
    rng = np.random.default_rng(0)
    shared = rng.integers(SMALL.vocab, size=24).tolist()
    second = shared + rng.integers(SMALL.vocab, size=9).tolist()
    warm = _engine(limits, 2)
    _serve_all_at_once(warm, [[*shared, 5, 6, 7]], [3])
    warm.arrive(1, second, 6, 1.0)
    warm.start(1.0)
    out = []
    t = 1.0
    while warm.busy:
        t += 0.01
        out += [e.token for e in warm.end(t)]
        warm.start(t)
    assert warm.hit_tokens[1] == 24, "the six shared blocks were read, not computed"
    cold = _engine(limits, 1)
    assert _serve_all_at_once(cold, [second], [6]) == [out], "the cache changes no token generated"


def test_the_engine_decides_as_the_simulated_instance_decides() -> None:
    """Same requests, one instance, a pool small enough to evict and preempt: the engine's hits and
    preemptions are the simulator's, whatever each pass took (the order of events does not depend on it)."""
    trace, prefixes, block = requests_of("gen:agentic:0", (0, 24))
    scaled = trace.scaled(1.0, 64, 6)
    requests = Requests(np.zeros(scaled.n), scaled.prompt_tokens, scaled.output_tokens)
    longest = int((requests.prompt_tokens + requests.output_tokens).max())
    limits = Limits(kv_blocks=-(-longest // 8) + 8, block_tokens=block // 64, token_budget=96, max_seqs=6)
    default = Keyed(DEFAULT_SOURCE, ())
    pricing = Pricing.of(cost_model("cpu-2core-passes", CPU), limits.token_budget, limits.max_seqs)
    simulated = replay(
        requests,
        prefixes,
        Fleet(1, limits, 1e-4),
        _policies(Sources(default, default, default)),
        pricing,
        SLO,
        1e9,
    )
    engine = _engine(limits, requests.n)
    prompts = prompts_of(requests, prefixes, limits.block_tokens, SMALL.vocab, seed=0)
    generated = _serve_all_at_once(engine, prompts, requests.output_tokens.tolist())
    assert [len(g) for g in generated] == requests.output_tokens.tolist()
    assert simulated.served.preemptions.sum() > 0, "the pool is small enough to preempt"
    assert Served(engine.S, 0, 0.0, 0).preemptions.tolist() == simulated.served.preemptions.tolist()
    assert engine.hit_tokens.tolist() == simulated.hit_tokens.tolist()
    assert simulated.hit_tokens.sum() > 0
