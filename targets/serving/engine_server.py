"""One instance of the reference engine served over HTTP, its clock driven by the caller (a lockstep replay).

It answers OpenAI completions (`/v1/completions`, a prompt of token ids, streamed or not) as an engine
behind a router does, and three calls of the replay's own: `/state` (what a router may read of it for a
prompt), `/advance` (the iteration in flight ends at the given time: its tokens go out, and the next
iteration runs) and `/record` (each request's scheduler state at the end). Time is virtual: a request
arrives at the time its `x-crucible-time` header says, and an iteration lasts as long as its forward pass
took on the computing thread's CPU clock, so four engines sharing two cores time their passes as if each
ran alone. Every answer that changes the engine carries `x-crucible-busy-until`, when its next iteration
ends (inf if idle), so the caller knows the next event without polling.

    python -m targets.serving.engine_server CONFIG.json PORT
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
import torch
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from targets.batching.scheduler import Limits
from targets.costmodel.shapes import MODELS
from targets.reference_engine.model import Transformer

from .engine_instance import Emitted, EngineInstance

TIME, REQUEST, BUSY_UNTIL = "x-crucible-time", "x-crucible-request", "x-crucible-busy-until"
"""The lockstep replay's headers: a request's arrival time and id; when the engine's next iteration ends."""


class EngineServer:
    """The HTTP face of one EngineInstance: each request's tokens queued for its response as they are made."""

    def __init__(self, engine: EngineInstance) -> None:
        self.engine = engine
        self.busy_until = math.inf
        self.outputs: dict[int, asyncio.Queue[Emitted]] = {}

    def app(self) -> Starlette:
        routes = [
            Route("/v1/completions", self.complete, methods=["POST"]),
            Route("/state", self.state, methods=["POST"]),
            Route("/advance", self.advance, methods=["POST"]),
            Route("/record", self.record),
            Route("/health", self.health),
        ]
        return Starlette(routes=routes)

    async def complete(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body())
            prompt, max_tokens = _tokens(body.get("prompt")), int(body.get("max_tokens") or 16)
            r, now = int(request.headers[REQUEST]), float(request.headers[TIME])
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return _error(400, f"a completion needs a prompt of token ids and the replay's headers: {exc}")
        if max_tokens < 1:
            return _error(400, "max_tokens must be at least 1")
        try:
            self.engine.arrive(r, prompt, max_tokens, now)
        except ValueError as exc:
            return _error(400, str(exc))
        self.outputs[r] = asyncio.Queue()
        if not self.engine.busy:
            failed = self._start(now)
            if failed is not None:
                return failed
        headers = {BUSY_UNTIL: repr(self.busy_until)}
        if body.get("stream"):
            return StreamingResponse(self._stream(r), media_type="text/event-stream", headers=headers)
        tokens = [e.token async for e in self._emitted(r)]
        text = "".join(f" {t}" for t in tokens)
        return JSONResponse(_completion(r, text, "length", len(prompt), len(tokens)), headers=headers)

    async def state(self, request: Request) -> Response:
        try:
            prompt = _tokens(json.loads(await request.body()).get("prompt"))
        except (ValueError, TypeError, AttributeError) as exc:
            return _error(400, f"state needs a prompt of token ids: {exc}")
        return JSONResponse(self.engine.state(prompt))

    async def advance(self, request: Request) -> Response:
        try:
            at = float(json.loads(await request.body())["t"])
        except (ValueError, TypeError, KeyError) as exc:
            return _error(400, f"advance needs the time t: {exc}")
        if not self.engine.busy or at != self.busy_until:
            return _error(409, f"no iteration ends at {at!r} (the next ends at {self.busy_until!r})")
        for emitted in self.engine.end(at):
            self.outputs[emitted.request].put_nowait(emitted)
        failed = self._start(at)
        return failed or JSONResponse({"busy_until": repr(self.busy_until)})

    async def record(self, request: Request) -> Response:
        engine = self.engine
        rows = {str(r): engine.record(r) for r in engine.sequences}
        hits = {str(r): float(engine.hit_tokens[r]) for r in engine.sequences}
        return JSONResponse({"state": rows, "hit_tokens": hits, "passes": engine.passes})

    async def health(self, request: Request) -> Response:
        return PlainTextResponse("ok")

    def _start(self, now: float) -> Response | None:
        """Run the next iteration at `now`, if there is one; an engine that cannot is a 500 naming why."""
        try:
            ms = self.engine.start(now)
        except RuntimeError as exc:
            return _error(500, str(exc))
        self.busy_until = math.inf if ms is None else now + ms / 1e3
        return None

    async def _emitted(self, r: int) -> AsyncIterator[Emitted]:
        queue = self.outputs[r]
        while True:
            emitted = await queue.get()
            yield emitted
            if emitted.done:
                del self.outputs[r]
                return

    async def _stream(self, r: int) -> AsyncIterator[str]:
        async for e in self._emitted(r):
            chunk = _completion(r, f" {e.token}", "length" if e.done else None)
            yield f"data: {json.dumps(chunk)}\n\n"
        yield "data: [DONE]\n\n"


def _tokens(prompt: Any) -> list[int]:
    if not isinstance(prompt, list) or not prompt or not all(isinstance(t, int) for t in prompt):
        raise ValueError("the prompt is not a non-empty list of token ids")
    return prompt


def _completion(r: int, text: str, finish: str | None, prompt: int = 0, output: int = 0) -> dict[str, Any]:
    return {
        "id": f"cmpl-{r}",
        "object": "text_completion",
        "model": "crucible-reference-engine",
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output},
    }


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status)


def engine_of(config: dict[str, Any]) -> EngineInstance:
    """The engine a configuration describes: limits, SLOs, model seed, the schedule and evict programs."""
    from .target import compiled_keys

    limits = Limits(
        int(config["kv_blocks"]),
        int(config["block_tokens"]),
        int(config["token_budget"]),
        int(config["max_seqs"]),
    )
    schedule, schedule_params = compiled_keys(config["schedule"]["source"])[1], config["schedule"]["params"]
    evict, evict_params = compiled_keys(config["evict"]["source"])[2], config["evict"]["params"]
    keys = (
        schedule,
        np.array(schedule_params, dtype=np.float64),
        evict,
        np.array(evict_params, dtype=np.float64),
    )
    model = Transformer(MODELS[str(config.get("model", "tiny"))], seed=int(config.get("seed", 0)))
    slo = (float(config["slo_s"][0]), float(config["slo_s"][1]))
    return EngineInstance(model, limits, slo, keys, int(config["requests"]))


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        sys.exit("usage: python -m targets.serving.engine_server CONFIG.json PORT")
    torch.set_num_threads(1)  # one thread per engine, as the profile was measured
    with open(args[0]) as f:
        engine = engine_of(json.load(f))
    uvicorn.run(EngineServer(engine).app(), host="127.0.0.1", port=int(args[1]), log_level="warning")


if __name__ == "__main__":
    main()
