"""The router process of the real-process fleet: a policy under test, scoring engines on their real state.

For each completion it asks every engine for its state as the request would meet it (`/state`: the
prefix of the prompt its cache holds, its requests, its KV use), adds what only a router knows (which
blocks it sent where, the fleet's extremes, the TTFT estimate at the deployment's prefill rate), scores
every engine with the policy's route function (the first highest wins) or applies a built-in router, and
passes the request to the winner, its response streamed back with `x-crucible-instance` naming the
engine. The features are those of features.ROUTE_FEATURES, in its column order, as fleet.py's router
fills them: here they come from the engines, not from a model of them.

    python -m targets.serving.policy_router CONFIG.json PORT
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from .engine_instance import block_ids
from .engine_server import BUSY_UNTIL, REQUEST, TIME
from .features import ROUTE_FEATURES

INSTANCE = "x-crucible-instance"
ROUTERS = ("round_robin", "random", "power_of_two")
"""The built-in routers this process applies (prefix_hash hashes the trace's block ids, which a router of
token ids does not see). random and power_of_two draw from a generator of their own seed: the same kind of
choice as the simulator's, not the same draws."""
_COLUMNS = ROUTE_FEATURES.columns()


class PolicyRouter:
    """Routes to `engines` (their base URLs) by `route` with PARAMS `params`, or by the built-in `builtin`."""

    def __init__(
        self,
        engines: Sequence[str],
        block_tokens: int,
        prefill_s_per_token: float,
        route: Any = None,
        params: np.ndarray | None = None,
        builtin: str = "",
        seed: int = 0,
    ) -> None:
        self.engines, self.block_tokens, self.rate = list(engines), block_tokens, prefill_s_per_token
        self.route, self.params, self.builtin = route, params, builtin
        self.sent: list[set[bytes]] = [set() for _ in engines]
        self.turn = 0
        self.rng = np.random.default_rng(seed)
        self.client = httpx.AsyncClient(
            timeout=None, limits=httpx.Limits(max_connections=None, max_keepalive_connections=512)
        )

    def app(self) -> Starlette:
        routes = [
            Route("/v1/completions", self.complete, methods=["POST"]),
            Route("/health", self.health),
        ]
        return Starlette(routes=routes)

    async def health(self, request: Request) -> Response:
        return PlainTextResponse("ok")

    async def complete(self, request: Request) -> Response:
        raw = await request.body()
        try:
            prompt = json.loads(raw)["prompt"]
            if not isinstance(prompt, list) or not prompt:
                raise ValueError("the prompt is not a non-empty list of token ids")
        except (ValueError, KeyError, TypeError) as exc:
            return JSONResponse(
                {"error": f"a completion needs a prompt of token ids: {exc}"}, status_code=400
            )
        ids = block_ids(prompt, self.block_tokens)
        try:
            i = await self._choose(prompt, ids)
        except httpx.HTTPError as exc:
            return JSONResponse({"error": f"an engine did not answer its state: {exc}"}, status_code=502)
        self.sent[i].update(ids)
        forwarded = {k: v for k, v in request.headers.items() if k in (TIME, REQUEST)}
        upstream = self.client.build_request(
            "POST", self.engines[i] + "/v1/completions", content=raw, headers=forwarded
        )
        response = await self.client.send(upstream, stream=True)
        headers = {INSTANCE: str(i), BUSY_UNTIL: response.headers.get(BUSY_UNTIL, "inf")}
        return StreamingResponse(
            response.aiter_raw(),
            status_code=response.status_code,
            headers=headers,
            media_type=response.headers.get("content-type"),
            background=BackgroundTask(response.aclose),
        )

    async def _choose(self, prompt: list[int], ids: list[bytes]) -> int:
        n = len(self.engines)
        if self.builtin == "round_robin":
            self.turn += 1
            return (self.turn - 1) % n
        if self.builtin == "random":
            return int(self.rng.integers(n))
        states = await asyncio.gather(*(self._state(url, prompt) for url in self.engines))
        if self.builtin == "power_of_two":
            i, j = (int(x) for x in self.rng.choice(n, size=2, replace=False)) if n > 1 else (0, 0)
            return i if states[i]["outstanding"] <= states[j]["outstanding"] else j
        X = self.features(prompt, ids, states)
        scores = [float(self.route(X, i, self.params)) for i in range(n)]
        return int(np.argmax(scores))  # the first highest

    async def _state(self, url: str, prompt: list[int]) -> dict[str, float]:
        response = await self.client.post(url + "/state", json={"prompt": prompt})
        response.raise_for_status()
        return dict(response.json())

    def features(self, prompt: list[int], ids: list[bytes], states: list[dict[str, float]]) -> np.ndarray:
        """Every engine's row of route features for this request (ROUTE_FEATURES' columns)."""
        n, c = len(self.engines), _COLUMNS
        X = np.zeros((n, len(c)))
        blocks = max(len(ids), 1)
        for i, st in enumerate(states):
            cached = st["cached_blocks"]
            seen = 0
            while seen < len(ids) and ids[seen] in self.sent[i]:
                seen += 1
            pool = st["active_blocks"] + st["free_blocks"]
            uncached = len(prompt) - cached * self.block_tokens
            row = {
                "prompt_tokens": len(prompt),
                "prompt_blocks": blocks,
                "cached_blocks": cached,
                "uncached_tokens": uncached,
                "match": cached / blocks,
                "instance": i,
                "kv_used": st["active_blocks"] / pool,
                "tree_blocks": len(self.sent[i]),
                "ttft_estimate_s": (st["queued_prefill_tokens"] + uncached) * self.rate,
                "routed_blocks": seen,
                "routed_match": seen / blocks,
            }
            for name in ("outstanding", "running", "queued", "queued_prefill_tokens", "decode_batch"):
                row[name] = st[name]
            for name in ("active_blocks", "free_blocks", "hit_rate"):
                row[name] = st[name]
            for name, value in row.items():
                X[i, c[name]] = value
        X[:, c["best_match"]] = X[:, c["match"]].max()
        X[:, c["best_routed_match"]] = X[:, c["routed_match"]].max()
        X[:, c["min_outstanding"]] = X[:, c["outstanding"]].min()
        X[:, c["max_outstanding"]] = X[:, c["outstanding"]].max()
        X[:, c["min_queued"]] = X[:, c["queued"]].min()
        X[:, c["max_queued"]] = X[:, c["queued"]].max()
        return X


def router_of(config: dict[str, Any]) -> PolicyRouter:
    """The router a configuration describes: engines, block size, prefill rate, and a policy."""
    policy = config["policy"]
    route, params = None, None
    if "source" in policy:
        from .target import compiled_keys

        route, params = compiled_keys(policy["source"])[0], np.array(policy["params"], dtype=np.float64)
    elif policy.get("builtin") not in ROUTERS:
        raise ValueError(f"no built-in router {policy.get('builtin')!r} here (have {', '.join(ROUTERS)})")
    return PolicyRouter(
        config["engines"],
        int(config["block_tokens"]),
        float(config["prefill_s_per_token"]),
        route,
        params,
        str(policy.get("builtin", "")),
        int(config.get("seed", 0)),
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        sys.exit("usage: python -m targets.serving.policy_router CONFIG.json PORT")
    with open(args[0]) as f:
        router = router_of(json.load(f))
    uvicorn.run(router.app(), host="127.0.0.1", port=int(args[1]), log_level="warning")


if __name__ == "__main__":
    main()
