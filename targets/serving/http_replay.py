"""A trace slice replayed over HTTP through a real router process, in front of backends that only record.

Each backend is a small OpenAI- and SGLang-compatible server on 127.0.0.1: it records which request ids it
received and holds each request until the replay releases it (its first token, for a stream, then its
end), or for as long as the request asks (`hold_s`); it reports an engine's state as vLLM's Prometheus
gauges, the caller's or else its own requests in flight. A prompt is one character per prefix block of
the trace, so equal prefixes are equal text and a router's character tree matches blocks exactly. Nothing
here knows the simulator: the caller says, before each request, what has happened by its arrival.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from targets.base import ReferenceFailed

MODEL = "crucible-replay"
FIRST_BLOCK_CHAR = 0x10000
"""Block b of the trace is the character U+10000 + b: outside the basic plane, so no surrogate, and every
block a different first character (a character tree then never matches part of a block)."""
GENERATE_PATHS = ("/generate", "/v1/completions", "/v1/chat/completions")


class ReplayError(ReferenceFailed):
    """The router or a backend did not behave as the replay needs; `str()` is one line."""


def prompt_text(blocks: Sequence[int]) -> str:
    """A request's prompt as text: one character per prefix block."""
    return "".join(chr(FIRST_BLOCK_CHAR + int(b)) for b in blocks)


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on now (the caller binds it next)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Backend:
    """What one recording backend saw: the request ids it served, in order, and those in flight now."""

    index: int
    received: list[str]
    url: str = ""
    seen: set[str] = field(default_factory=set)
    held: dict[str, tuple[asyncio.Event, asyncio.Event]] = field(default_factory=dict)
    """Each request's two releases: its first token (a stream's first chunk), and its end."""
    in_flight: int = 0
    gauges: tuple[float, float, float] | None = None
    """The engine state its /metrics reports (running, waiting, KV use) where the caller sets one; else
    its requests in flight, none waiting, no KV use."""

    def app(self) -> Starlette:
        async def generate(request: Request) -> Response:
            try:
                body = json.loads(await request.body())
            except ValueError:
                return JSONResponse({"error": "the body is not JSON"}, status_code=400)
            if not isinstance(body, dict):
                return JSONResponse({"error": "the body is not a JSON object"}, status_code=400)
            rid = str(body.get("rid") or body.get("user") or "")
            first, done = asyncio.Event(), asyncio.Event()
            self.held[rid] = (first, done)
            self.received.append(rid)
            self.seen.add(rid)
            self.in_flight += 1
            if body.get("hold") != "release":
                asyncio.get_running_loop().call_later(float(body.get("hold_s") or 0), done.set)
                first = done
            if body.get("stream"):
                return StreamingResponse(self._stream(first, done), media_type="text/event-stream")
            try:
                await done.wait()
            finally:
                self.in_flight -= 1
            return JSONResponse(_completion(self.url))

        async def metrics(request: Request) -> Response:
            running, waiting, kv = self.gauges or (self.in_flight, 0, 0.0)
            return PlainTextResponse(
                f'vllm:num_requests_running{{model_name="{MODEL}"}} {float(running)!r}\n'
                f'vllm:num_requests_waiting{{model_name="{MODEL}"}} {float(waiting)!r}\n'
                f'vllm:kv_cache_usage_perc{{model_name="{MODEL}"}} {float(kv)!r}\n'
            )

        async def info(request: Request) -> Response:
            return JSONResponse({"model_path": MODEL, "served_model_name": MODEL, "is_generation": True})

        async def models(request: Request) -> Response:
            return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

        async def healthy(request: Request) -> Response:
            return PlainTextResponse("ok")

        async def recorded(request: Request) -> Response:
            return JSONResponse({"index": self.index, "received": self.received})

        routes = [Route(p, generate, methods=["POST"]) for p in GENERATE_PATHS]
        routes += [
            Route(p, info) for p in ("/server_info", "/get_server_info", "/model_info", "/get_model_info")
        ]
        routes += [Route(p, healthy) for p in ("/health", "/health_generate")]
        routes += [Route("/v1/models", models), Route("/metrics", metrics), Route("/recorded", recorded)]
        return Starlette(routes=routes)

    async def _stream(self, first: asyncio.Event, done: asyncio.Event) -> Any:
        """The first token's chunk once `first` is set, the end once `done` is."""
        try:
            await first.wait()
            yield f"data: {json.dumps(_completion(self.url))}\n\n"
            await done.wait()
            yield "data: [DONE]\n\n"
        finally:
            self.in_flight -= 1


def _completion(url: str) -> dict[str, Any]:
    return {
        "id": "replay",
        "object": "text_completion",
        "model": MODEL,
        "choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        "meta_info": {"backend": url},
    }


class RecordingBackends:
    """N recording backends served on one event loop in a thread, each on its own port of 127.0.0.1."""

    def __init__(self, n: int) -> None:
        self.backends = [Backend(i, []) for i in range(n)]
        self.ports = [free_port() for _ in range(n)]
        self._servers: list[uvicorn.Server] = []
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.ports]

    def __enter__(self) -> RecordingBackends:
        for backend, url in zip(self.backends, self.urls, strict=True):
            backend.url = url
        configs = [
            uvicorn.Config(b.app(), host="127.0.0.1", port=p, log_level="error", lifespan="off")
            for b, p in zip(self.backends, self.ports, strict=True)
        ]
        self._servers = [uvicorn.Server(c) for c in configs]

        def serve() -> None:
            async def all_of() -> None:
                self._loop = asyncio.get_running_loop()
                await asyncio.gather(*(s.serve() for s in self._servers))

            asyncio.run(all_of())

        self._thread = threading.Thread(target=serve, name="recording-backends", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not all(s.started for s in self._servers):
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise ReplayError("the recording backends did not start (a port taken?)")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self._servers:
            server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def release(self, rid: str, first_token: bool = False) -> None:
        """Let the backend holding request `rid` (sent with `"hold": "release"`) answer it now: all of it,
        or of a stream only its first chunk."""
        assert self._loop is not None
        for b in self.backends:
            if rid in b.held:
                first, done = b.held[rid]
                self._loop.call_soon_threadsafe((first if first_token else done).set)
                if not first_token:
                    self._loop.call_soon_threadsafe(first.set)

    def has(self, rid: str) -> bool:
        """Whether some backend has received the request id."""
        return any(rid in b.seen for b in self.backends)

    def routed(self) -> dict[str, int]:
        """Each request id the backends received, with the backend that received it (the last, if twice)."""
        return {rid: b.index for b in self.backends for rid in b.received}


@contextmanager
def process(
    command: Sequence[str],
    ready_url: str,
    ready: Any,
    log_path: str,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
) -> Iterator[None]:
    """A server process running `command` until the block ends, its output in `log_path`; ready once
    `ready(response)` holds for a GET of `ready_url`. It and its children are stopped at the end."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            list(command),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise ReplayError(
                    f"{command[0]} exited with {proc.returncode} before it was ready: {_tail(log_path)}"
                )
            try:
                if ready(httpx.get(ready_url, timeout=2)):
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise ReplayError(f"{command[0]} was not ready after {timeout_s:g} s: {_tail(log_path)}")
            time.sleep(0.2)
        yield
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _tail(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][:300] if lines else "(no output)"


@dataclass(frozen=True)
class Due:
    """What the fleet model says has happened by a request's arrival: the requests that have their first
    token, those finished, and per backend (by index) the engine's gauges: running, waiting, KV use."""

    first: Sequence[int]
    done: Sequence[int]
    gauges: Mapping[int, tuple[float, float, float]]


@dataclass(frozen=True)
class Expected:
    """What a router should see of one backend before the next request: its requests in flight, of those
    the ones with no first token yet, and the gauges the backend reports."""

    in_flight: int
    prefilling: int
    gauges: tuple[float, float, float]


def lockstep(
    url: str,
    prompts: Sequence[str | list[int]],
    path: str,
    backends: RecordingBackends,
    due: Callable[[int, dict[int, int]], Due],
    settled: Callable[[dict[str, Expected]], bool],
    stream: bool = False,
) -> dict[int, int]:
    """Each prompt POSTed in turn, held by its backend until released; returns each request's backend.

    Before request r is sent, `due(r, backend of each request so far)` says which requests get their first
    token (a stream's first chunk) and which are answered in full, and what each backend's /metrics
    reports; then the router is polled until `settled` holds of what it should see per backend URL.
    Request r thus meets the router in the state the caller's model of the fleet says it is in at r's
    arrival, with no dependence on wall-clock timing."""
    routed: dict[int, int] = {}

    async def send(client: httpx.AsyncClient, r: int) -> None:
        body = {
            "prompt": prompts[r],
            "text": prompts[r],
            "model": MODEL,
            "rid": str(r),
            "max_tokens": 1,
            "hold": "release",
            "stream": stream,
        }
        response = await client.post(url + path, json=body)
        if response.status_code != 200:
            said = response.text[:200]
            raise ReplayError(f"request {r}: the router answered {response.status_code}: {said}")

    async def all_of() -> None:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
        async with httpx.AsyncClient(timeout=None, limits=limits) as client:
            pending: dict[int, asyncio.Task[None]] = {}
            started: set[int] = set()
            for r in range(len(prompts)):
                now = due(r, routed)
                for q in now.first:
                    if q in pending and q not in started:
                        started.add(q)
                        backends.release(str(q), first_token=True)
                for q in now.done:
                    if q in pending:
                        backends.release(str(q))
                        await pending.pop(q)
                counts = {k: [0, 0] for k in range(len(backends.urls))}
                for q in pending:
                    counts[routed[q]][0] += 1
                    counts[routed[q]][1] += q not in started
                expected = {}
                for k, backend in enumerate(backends.backends):
                    backend.gauges = now.gauges.get(k)
                    shown = backend.gauges or (float(counts[k][0]), 0.0, 0.0)
                    expected[backends.urls[k]] = Expected(counts[k][0], counts[k][1], shown)
                await _until(lambda e=expected: settled(e), f"the router's state before request {r}")
                pending[r] = asyncio.create_task(send(client, r))
                await _until(
                    lambda r=r: backends.has(str(r)) or pending[r].done(), f"request {r} at a backend"
                )
                if pending[r].done():
                    await pending[r]  # raises the router's answer
                routed[r] = backends.routed()[str(r)]
            for q in list(pending):
                backends.release(str(q))
            await asyncio.gather(*pending.values())

    asyncio.run(all_of())
    return routed


async def _until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise ReplayError(f"waited {timeout_s:g} s for {what}")
        await asyncio.sleep(0.0005)


def main(argv: Sequence[str] | None = None) -> None:
    """Recording backends in the foreground, one per port given, until killed (a backend that can die)."""
    import argparse

    parser = argparse.ArgumentParser(description="Serve recording backends on 127.0.0.1 until killed.")
    parser.add_argument("ports", nargs="+", type=int)
    ports = parser.parse_args(argv).ports
    backends = RecordingBackends(len(ports))
    backends.ports = ports
    with backends:
        threading.Event().wait()


if __name__ == "__main__":
    main()
