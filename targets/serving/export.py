"""The serving target outside Crucible: `route(s, p)` as an HTTP router in front of OpenAI-compatible servers.

The exported module is an ASGI app (Starlette, with httpx to the backends). It keeps what a router can know
for itself, the way the simulator's router features are defined: a bounded prefix tree of the blocks it
sent each backend (routed_*, tree_blocks) and its requests in flight per backend (outstanding); where a
backend serves Prometheus metrics (vLLM's and SGLang's `/metrics`) it reads running and waiting requests
and KV-cache use from them. A feature of the engine's own state it cannot see (its cache, its prefill
progress, its free blocks) is not exposed, so a program reading one is refused rather than run on a guess.
"""

from __future__ import annotations

from string import Template

from targets.export import Export

ROUTER_FEATURES = {
    "prompt_tokens": "q.tokens",
    "prompt_blocks": "len(q.blocks)",
    "instance": "i",
    "outstanding": "b.in_flight",
    "running": "b.running()",
    "queued": "b.queued()",
    "kv_used": "b.kv_used()",
    "tree_blocks": "self.tree.size(i)",
    "min_outstanding": "view.low_out",
    "max_outstanding": "view.high_out",
    "min_queued": "view.low_queued",
    "max_queued": "view.high_queued",
    "routed_blocks": "view.routed[i]",
    "routed_match": "view.routed[i] / len(q.blocks)",
    "best_routed_match": "max(view.routed) / len(q.blocks)",
}
"""Each route feature the router gives, as an expression in Router._state: from the request (q), this
backend (b, index i), the fleet (view) and the router's tree; each is what the simulator computes, given
the backends' metrics. Not given, so refused: what only the engine knows, the simulator's exact view of it
(cached_blocks, match, best_match, uncached_tokens: its cache; queued_prefill_tokens, decode_batch,
ttft_estimate_s: its prefill progress; active_blocks, free_blocks: its memory; hit_rate). A search for the
router (`--for router`) writes only the features given here."""

_TEMPLATE = '''"""$name: a Crucible route function as an HTTP router in front of OpenAI-compatible servers.

Exported by `crucible export` from $origin. Each request to /v1/completions, /v1/chat/completions or
/generate is scored on every healthy backend by route(s, p) over what this router sees, and proxied to the
highest score (ties: the first backend), the response passed through as it streams. A backend that
refuses a connection, or fails before the first byte of its answer, is marked down and the request goes
to the next best; a health check every HEALTH_S seconds (its /health) brings it back. A request whose body
is not a JSON object with a prompt is answered 400.

What the route function reads:
- routed_blocks, routed_match, best_routed_match, tree_blocks: a prefix tree of the blocks this router
  sent each backend (a text prompt is cut into blocks of BLOCK_TOKENS x CHARS_PER_TOKEN characters, a
  prompt of token ids into blocks of BLOCK_TOKENS), bounded at TREE_NODES nodes, least recently used
  leaves dropped first.
- outstanding (and its fleet minimum and maximum): this router's requests in flight to the backend.
- running, queued, kv_used: the backend's Prometheus metrics (vLLM's num_requests_running,
  num_requests_waiting, kv_cache_usage_perc; SGLang's num_running_reqs, num_queue_reqs, token_usage),
  read with each health check; without them, running is outstanding, queued 0 and kv_used 0.

Run it in front of the backends (their order numbers the instances):
    CRUCIBLE_BACKENDS=http://127.0.0.1:30001,http://127.0.0.1:30002 uvicorn $name:app --port 8000
Environment: CRUCIBLE_BACKENDS (required), CRUCIBLE_BLOCK_TOKENS, CRUCIBLE_CHARS_PER_TOKEN,
CRUCIBLE_TREE_NODES, CRUCIBLE_HEALTH_S. GET /router/status shows each backend's state.
"""

import asyncio
import contextlib
import itertools
import json
import math
import os
from collections import OrderedDict
from types import SimpleNamespace

import httpx
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

$prelude

NAME = "$name"
PARAMS = $params
BLOCK_TOKENS = int(os.environ.get("CRUCIBLE_BLOCK_TOKENS", "$block_tokens"))
CHARS_PER_TOKEN = float(os.environ.get("CRUCIBLE_CHARS_PER_TOKEN", "4"))
TREE_NODES = int(os.environ.get("CRUCIBLE_TREE_NODES", "1000000"))
HEALTH_S = float(os.environ.get("CRUCIBLE_HEALTH_S", "2"))
PATHS = ("/v1/completions", "/v1/chat/completions", "/generate")
_METRICS = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    "kv": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
}


$function

class PrefixTree:
    """The blocks sent to each backend, as a tree of block keys; bounded, least recently used leaf first."""

    def __init__(self, limit):
        self.root = {"kids": {}, "sent": set(), "parent": None, "key": None}
        self.limit = limit
        self.leaves = OrderedDict()  # id(node) -> node, least recently used first
        self.sizes = {}
        self.nodes = 0

    def matched(self, blocks, n):
        """Per backend, how many leading blocks of `blocks` were sent to it."""
        depth, alive, node = [0] * n, set(range(n)), self.root
        for k, key in enumerate(blocks):
            node = node["kids"].get(key)
            if node is None:
                break
            alive &= node["sent"]
            if not alive:
                break
            for i in alive:
                depth[i] = k + 1
        return depth

    def insert(self, blocks, i):
        node = self.root
        for key in blocks:
            child = node["kids"].get(key)
            if child is None:
                child = {"kids": {}, "sent": set(), "parent": node, "key": key}
                node["kids"][key] = child
                self.leaves.pop(id(node), None)
                self.nodes += 1
            if i not in child["sent"]:
                child["sent"].add(i)
                self.sizes[i] = self.sizes.get(i, 0) + 1
            node = child
        if not node["kids"] and node is not self.root:
            self.leaves[id(node)] = node
            self.leaves.move_to_end(id(node))
        while self.nodes > self.limit and self.leaves:
            self._drop(self.leaves.popitem(last=False)[1])

    def size(self, i):
        return self.sizes.get(i, 0)

    def _drop(self, leaf):
        for i in leaf["sent"]:
            self.sizes[i] -= 1
        parent = leaf["parent"]
        del parent["kids"][leaf["key"]]
        self.nodes -= 1
        if not parent["kids"] and parent is not self.root:
            self.leaves[id(parent)] = parent
            self.leaves.move_to_end(id(parent), last=False)


class Query:
    """A request's prompt as this router measures it: its tokens and its blocks' keys."""

    def __init__(self, prompt):
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            size, self.tokens = BLOCK_TOKENS, max(len(prompt), 1)
            cut = [tuple(prompt[k : k + size]) for k in range(0, len(prompt), size)]
        else:
            size = max(int(BLOCK_TOKENS * CHARS_PER_TOKEN), 1)
            self.tokens = max(math.ceil(len(prompt) / CHARS_PER_TOKEN), 1)
            cut = [prompt[k : k + size] for k in range(0, len(prompt), size)]
        keys, chain = [], 0
        for block in cut:
            chain = hash((chain, block))
            keys.append(chain)
        self.blocks = keys or [0]


class Backend:
    """One server: whether it answers, this router's requests to it in flight, and its metrics."""

    def __init__(self, url):
        self.url = url.rstrip("/")
        self.healthy = True
        self.in_flight = 0
        self.prefilling = set()  # this router's requests to it whose first byte has not come back
        self.metrics = {}

    def running(self):
        return self.metrics.get("running", self.in_flight)

    def queued(self):
        return self.metrics.get("waiting", 0.0)

    def kv_used(self):
        return min(max(self.metrics.get("kv", 0.0), 0.0), 1.0)


class Router:
    def __init__(self, urls):
        if not urls:
            raise RuntimeError("CRUCIBLE_BACKENDS names no backend (comma-separated URLs)")
        self.backends = [Backend(u) for u in urls]
        self.tree = PrefixTree(TREE_NODES)
        self.params = SimpleNamespace(**{k: float(v) for k, v in PARAMS.items()})
        self.numbers = itertools.count()

    def choose(self, q, tried):
        """The healthy backend the route function scores highest for q (ties: the first), or None."""
        view = self._view(q)
        best, choice = -math.inf, None
        for i, b in enumerate(self.backends):
            if not b.healthy or i in tried:
                continue
            score = route(self._state(i, q, view), self.params)
            if choice is None or score > best:
                best, choice = score, i
        return choice, view

    def _view(self, q):
        live = [b for b in self.backends if b.healthy] or self.backends
        return SimpleNamespace(
            routed=self.tree.matched(q.blocks, len(self.backends)),
            low_out=min(b.in_flight for b in live),
            high_out=max(b.in_flight for b in live),
            low_queued=min(b.queued() for b in live),
            high_queued=max(b.queued() for b in live),
        )

    def _state(self, i, q, view):
        b = self.backends[i]
        return SimpleNamespace(
$features        )

    async def check(self, client):
        """Each backend's health, and its metrics where it serves them."""
        for b in self.backends:
            try:
                b.healthy = (await client.get(b.url + "/health", timeout=2)).status_code == 200
            except httpx.HTTPError:
                b.healthy = False
                continue
            with contextlib.suppress(httpx.HTTPError):
                response = await client.get(b.url + "/metrics", timeout=2)
                if response.status_code == 200:
                    b.metrics = _metrics(response.text)


def _metrics(text):
    """running, waiting and kv from a Prometheus text page, summed over its series (e.g. per model)."""
    found = {}
    for line in text.splitlines():
        head, _, value = line.strip().rpartition(" ")
        metric = head.split("{")[0].strip()
        for name, series in _METRICS.items():
            if metric in series:
                with contextlib.suppress(ValueError):
                    found[name] = found.get(name, 0.0) + float(value)
    return found


def _prompt(body):
    """The prompt of an OpenAI completion, chat completion or SGLang generate request, or None."""
    if isinstance(body.get("prompt"), (str, list)):
        prompt = body["prompt"]
        batch = isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list))
        return prompt[0] if batch else prompt
    if isinstance(body.get("messages"), list):
        parts = []
        for m in body["messages"]:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list):
                content = "".join(c.get("text", "") for c in content if isinstance(c, dict))
            parts.append(f"{m.get('role', '') if isinstance(m, dict) else ''}: {content or ''}\\n")
        return "".join(parts)
    if isinstance(body.get("text"), str):
        return body["text"]
    if isinstance(body.get("input_ids"), list):
        return body["input_ids"]
    return None


ROUTER = Router([u for u in os.environ.get("CRUCIBLE_BACKENDS", "").split(",") if u.strip()])
CLIENT = httpx.AsyncClient(
    timeout=httpx.Timeout(None, connect=5.0), limits=httpx.Limits(max_connections=None)
)


async def proxy(request):
    raw = await request.body()
    try:
        body = json.loads(raw)
    except ValueError:
        return JSONResponse({"error": "the body is not JSON"}, status_code=400)
    if not isinstance(body, dict):
        return JSONResponse({"error": "the body is not a JSON object"}, status_code=400)
    prompt = _prompt(body)
    if prompt is None or isinstance(prompt, list) and not all(isinstance(t, int) for t in prompt):
        said = "no prompt: expected prompt, messages, text or input_ids"
        return JSONResponse({"error": said}, status_code=400)
    q = Query(prompt)
    headers = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "content-type")}
    tried = set()
    while True:
        i, view = ROUTER.choose(q, tried)
        if i is None:
            return JSONResponse({"error": "no backend answered"}, status_code=503)
        b, number = ROUTER.backends[i], next(ROUTER.numbers)
        b.in_flight += 1
        b.prefilling.add(number)
        ROUTER.tree.insert(q.blocks, i)
        upstream = None
        try:
            forwarded = CLIENT.build_request("POST", b.url + request.url.path, content=raw, headers=headers)
            upstream = await CLIENT.send(forwarded, stream=True)
            chunks = upstream.aiter_raw()
            first = await anext(chunks, b"")
        except httpx.HTTPError:
            if upstream is not None:
                await upstream.aclose()
            b.healthy = False
            b.in_flight -= 1
            b.prefilling.discard(number)
            tried.add(i)
            continue
        b.prefilling.discard(number)
        return StreamingResponse(
            _rest(b, upstream, first, chunks),
            status_code=upstream.status_code,
            media_type=upstream.headers.get("content-type"),
        )


async def _rest(b, upstream, first, chunks):
    try:
        yield first
        async for chunk in chunks:
            yield chunk
    finally:
        b.in_flight -= 1
        await upstream.aclose()


async def models(request):
    for b in ROUTER.backends:
        if b.healthy:
            with contextlib.suppress(httpx.HTTPError):
                response = await CLIENT.get(b.url + "/v1/models", timeout=5)
                return Response(response.content, response.status_code, media_type="application/json")
    return JSONResponse({"error": "no backend answered"}, status_code=503)


async def health(request):
    healthy = any(b.healthy for b in ROUTER.backends)
    return JSONResponse({"healthy": healthy}, status_code=200 if healthy else 503)


async def status(request):
    return JSONResponse(
        {
            "router": NAME,
            "backends": [
                {
                    "url": b.url,
                    "healthy": b.healthy,
                    "in_flight": b.in_flight,
                    "prefilling": len(b.prefilling),
                    "tree_blocks": ROUTER.tree.size(i),
                    "metrics": b.metrics,
                }
                for i, b in enumerate(ROUTER.backends)
            ],
        }
    )


@contextlib.asynccontextmanager
async def lifespan(app):
    async def checks():
        while True:
            await ROUTER.check(CLIENT)
            await asyncio.sleep(HEALTH_S)

    task = asyncio.create_task(checks())
    try:
        yield
    finally:
        task.cancel()
        await CLIENT.aclose()


app = Starlette(
    routes=[
        *(Route(p, proxy, methods=["POST"]) for p in PATHS),
        Route("/v1/models", models),
        Route("/health", health),
        Route("/router/status", status),
    ],
    lifespan=lifespan,
)
'''


def router_export(block_tokens: int) -> Export:
    """The route function as a router module, cutting prompts into blocks of `block_tokens` by default."""
    template = Template(_TEMPLATE).safe_substitute(block_tokens=str(int(block_tokens)))
    return Export(
        engine="router",
        title="Crucible's exported router",
        signature="route",
        features=ROUTER_FEATURES,
        template=template,
        load="pip install 'crucible[router]' or starlette httpx uvicorn; then "
        "CRUCIBLE_BACKENDS=URL,URL uvicorn $name:app --app-dir DIR --port 8000",
    )
