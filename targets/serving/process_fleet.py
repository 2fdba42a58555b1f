"""The fleet as real processes: N reference engines behind a router process, replayed in lockstep.

Each instance is an engine process (engine_server.py: the batching scheduler over a prefix cache of real
KV blocks, every iteration a forward pass of the reference model) and the router is a process of its own
(policy_router.py: the policy under test, scoring the engines on the state they report). A request is
sent to the router as an OpenAI completion of token ids: the trace's block b is the same seeded tokens in
every prompt that has it, so equal prefixes are equal tokens and each engine finds its hits by hashing
them, as vLLM does. Time is virtual and driven from here, one event at a time as fleet.py's clock runs:
the next event is the earliest of the next arrival and the end of an engine's iteration (an end first on
a tie); an iteration lasts as long as its forward pass took on the engine's computing thread. So the
engines' passes are real and timed alone, whatever else shares the cores, and what differs from the
simulator is what a model of the fleet can get wrong: its prices, and every decision that follows them.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

from targets.batching.scheduler import Limits, Served, unfinished
from targets.batching.trace import Requests

from . import http_replay
from .engine_server import BUSY_UNTIL, REQUEST, TIME
from .fleet import SAMPLES, Prefixes, Replayed
from .policy_router import INSTANCE, ROUTERS
from .sources import Sources

START_S = 120.0
"""How long a process may take to start (torch and numba load first)."""


@dataclass(frozen=True)
class Setup:
    """What the processes are: how many engines, each one's limits, the SLOs their schedulers see, the
    model's seed, and the prefill rate the router's TTFT estimate uses."""

    instances: int
    limits: Limits
    slo_s: tuple[float, float]
    seed: int
    prefill_s_per_token: float
    vocab: int


def prompts_of(
    requests: Requests, prefixes: Prefixes, block_tokens: int, vocab: int, seed: int
) -> list[list[int]]:
    """Each request's prompt as token ids: block b of the trace is `block_tokens` tokens drawn from b and
    the seed alone, the last block of a prompt cut to its length."""
    tokens: dict[int, list[int]] = {}

    def of(block: int) -> list[int]:
        if block not in tokens:
            rng = np.random.default_rng([seed, block])
            tokens[block] = rng.integers(vocab, size=block_tokens).tolist()
        return tokens[block]

    prompts = []
    for r in range(requests.n):
        ids = prefixes.blocks[prefixes.offsets[r] : prefixes.offsets[r + 1]].tolist()
        prompt = [t for b in ids for t in of(int(b))]
        length = int(requests.prompt_tokens[r])
        if len(prompt) < length:  # a trace whose blocks do not cover the prompt: the rest its own
            rest = np.random.default_rng([seed, -1 - r]).integers(vocab, size=length - len(prompt))
            prompt += rest.tolist()
        prompts.append(prompt[:length])
    return prompts


@dataclass(frozen=True)
class Pass:
    """One iteration an engine ran: its forward pass's time in ms, each row's start and tokens."""

    ms: float
    starts: np.ndarray
    tokens: np.ndarray


def replay_on_processes(
    requests: Requests, prefixes: Prefixes, setup: Setup, sources: Sources, horizon_s: float, folder: Path
) -> tuple[Replayed, list[Pass]]:
    """The requests through N engine processes behind a router process: what they did, as a Replayed (no
    router scores, memory or time series: `best`, `held` and the series are left empty), and every pass
    the engines ran."""
    if sources.builtin and sources.builtin not in ROUTERS:
        raise http_replay.ReplayError(
            f"no built-in router {sources.builtin!r} here (have {', '.join(ROUTERS)}): it hashes the trace's "
            "block ids, which a router of token ids does not see"
        )
    limits = setup.limits
    prompts = prompts_of(requests, prefixes, limits.block_tokens, setup.vocab, setup.seed)
    ports = [http_replay.free_port() for _ in range(setup.instances + 1)]
    engines = [f"http://127.0.0.1:{p}" for p in ports[:-1]]
    router = f"http://127.0.0.1:{ports[-1]}"
    engine_config = {
        "kv_blocks": limits.kv_blocks,
        "block_tokens": limits.block_tokens,
        "token_budget": limits.token_budget,
        "max_seqs": limits.max_seqs,
        "slo_s": list(setup.slo_s),
        "seed": setup.seed,
        "requests": requests.n,
        "schedule": {"source": sources.schedule.source, "params": list(sources.schedule.params)},
        "evict": {"source": sources.evict.source, "params": list(sources.evict.params)},
    }
    policy = (
        {"builtin": sources.builtin}
        if sources.builtin
        else {"source": sources.route.source, "params": list(sources.route.params)}
    )
    router_config = {
        "engines": engines,
        "block_tokens": limits.block_tokens,
        "prefill_s_per_token": setup.prefill_s_per_token,
        "policy": policy,
        "seed": setup.seed,
    }
    (folder / "engine.json").write_text(json.dumps(engine_config))
    (folder / "router.json").write_text(json.dumps(router_config))

    def ready(response: httpx.Response) -> bool:
        return response.status_code == 200

    with ExitStack() as stack:
        for k, (url, port) in enumerate(zip(engines, ports, strict=False)):
            command = [
                sys.executable,
                "-m",
                "targets.serving.engine_server",
                str(folder / "engine.json"),
                str(port),
            ]
            log = str(folder / f"engine{k}.log")
            stack.enter_context(http_replay.process(command, url + "/health", ready, log, START_S))
        command = [
            sys.executable,
            "-m",
            "targets.serving.policy_router",
            str(folder / "router.json"),
            str(ports[-1]),
        ]
        log = str(folder / "router.log")
        stack.enter_context(http_replay.process(command, router + "/health", ready, log, START_S))
        try:
            routed, end = asyncio.run(_lockstep(requests, prompts, engines, router, horizon_s))
            records = [httpx.get(url + "/record", timeout=60).json() for url in engines]
        except httpx.HTTPError as exc:
            raise http_replay.ReplayError(
                f"the replay lost a connection ({type(exc).__name__}: {exc or 'closed'}); {_logged(folder)}"
            ) from None
    passes = [
        Pass(ms, np.array(starts), np.array(tokens)) for r in records for ms, starts, tokens in r["passes"]
    ]
    return _replayed(requests, routed, end, records), passes


async def _lockstep(
    requests: Requests, prompts: list[list[int]], engines: list[str], router: str, horizon_s: float
) -> tuple[np.ndarray, float]:
    """Drive the fleet's clock: each request sent at its arrival, each iteration ended at its end; returns
    where each request went and the time the replay stopped."""
    n = requests.n
    routed = np.full(n, -1, dtype=np.int64)
    busy = [math.inf] * len(engines)
    streams: list[asyncio.Task[int]] = []
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=512)
    timeout = httpx.Timeout(120.0, read=None)  # a stream waits as long as its request waits
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        a, now, drained = 0, 0.0, False
        while True:
            i = int(np.argmin(busy))
            t_end, t_arr = busy[i], float(requests.arrival_s[a]) if a < n else math.inf
            if t_end == math.inf and a >= n:
                drained = True
                break
            now = min(t_end, t_arr)
            if now > horizon_s:
                break
            if t_end <= t_arr:
                response = await client.post(engines[i] + "/advance", json={"t": t_end})
                _ok(response, f"engine {i} ending its iteration at {t_end:.6f} s")
                busy[i] = float(response.json()["busy_until"])
                continue
            r, a = a, a + 1
            body = {"model": "crucible", "prompt": prompts[r], "max_tokens": int(requests.output_tokens[r])}
            headers = {TIME: repr(t_arr), REQUEST: str(r)}
            sent = client.build_request(
                "POST", router + "/v1/completions", json={**body, "stream": True}, headers=headers
            )
            response = await client.send(sent, stream=True)
            if response.status_code != 200:
                await response.aread()
                _ok(response, f"request {r} at the router")
            i = int(response.headers[INSTANCE])
            routed[r], busy[i] = i, float(response.headers[BUSY_UNTIL])
            streams.append(asyncio.create_task(_drained(response)))
        if drained:  # every request answered in full: its stream ended
            got = await asyncio.gather(*streams)
            want = requests.output_tokens.astype(int).tolist()
            if got != want:
                wrong = next(r for r, (g, w) in enumerate(zip(got, want, strict=True)) if g != w)
                raise http_replay.ReplayError(
                    f"request {wrong} streamed {got[wrong]} tokens, not {want[wrong]}"
                )
        for task in streams:
            task.cancel()
    return routed, now


def _logged(folder: Path) -> str:
    """The last error line a process of the fleet logged, naming the process, or that none did."""
    for log in sorted(folder.glob("*.log")):
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
        errors = [line for line in lines if "Error" in line or "error" in line]
        if errors:
            return f"{log.stem} logged: {errors[-1][:300]}"
    return "no process logged an error"


async def _drained(response: httpx.Response) -> int:
    """The tokens a streamed completion delivered, read to its end."""
    tokens = 0
    try:
        async for line in response.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                tokens += 1
    finally:
        await response.aclose()
    return tokens


def _ok(response: httpx.Response, what: str) -> None:
    if response.status_code != 200:
        try:
            said = str(response.json().get("error", response.text))
        except ValueError:
            said = response.text
        raise http_replay.ReplayError(f"{what}: HTTP {response.status_code}: {said[:300]}")


def _replayed(requests: Requests, routed: np.ndarray, end: float, records: list[dict]) -> Replayed:
    """The engines' records of their requests, as the simulator's Replayed keeps a fleet's."""
    rows = {int(r): row for record in records for r, row in record["state"].items()}
    hits = {int(r): h for record in records for r, h in record["hit_tokens"].items()}
    S = np.array([rows[r] for r in range(requests.n) if r in rows])
    if S.shape[0] != requests.n:
        raise http_replay.ReplayError(f"the engines recorded {S.shape[0]} of {requests.n} requests")
    served = Served(S, sum(len(r["passes"]) for r in records), end, unfinished(S))
    hit_tokens = np.array([hits[r] for r in range(requests.n)])
    empty = np.zeros((len(records), SAMPLES))
    best, held = np.zeros(requests.n, dtype=np.int64), np.zeros(len(records))
    return Replayed(served, routed, best, held, hit_tokens, empty, empty.copy(), 1.0, False)
