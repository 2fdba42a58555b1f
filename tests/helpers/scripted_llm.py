"""An OpenAI-compatible chat endpoint on 127.0.0.1 that answers from a script, for tests of the LLM proposer.

The code under test talks to it with the real `openai` client over real HTTP. Each request takes the next
step of the script (a reply, or a function of the request that returns one), then the fallback once the
script is spent; the server keeps every request it received and the usage of every reply it delivered.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a chat message, an error status, a raw body, or a hang past the timeout."""

    content: str | None = None
    status: int = 200
    body: bytes | None = None
    """Sent as is instead of a chat completion (a malformed JSON body)."""
    hang_s: float = 0.0
    """Wait this long, then close the connection without an answer."""
    delay_s: float = 0.0
    gap_s: float = 0.0
    """Streamed, wait this long before each chunk (a slow model writing)."""
    prompt_tokens: int = 100
    completion_tokens: int = 20
    usage: bool = True
    """Streamed, report the usage when asked (llama.cpp's Python server never does)."""
    headers: dict[str, str] = field(default_factory=dict)


Step = Reply | Callable[[dict[str, Any]], Reply]


@dataclass(frozen=True)
class Received:
    body: dict[str, Any]
    retry_count: int
    authorization: str

    @property
    def prompt(self) -> str:
        return "\n".join(m["content"] for m in self.body["messages"])


def error(status: int, message: str = "scripted failure", code: str = "") -> Reply:
    """An error in OpenAI's shape; the client is told to retry after 10 ms rather than back off."""
    body = json.dumps({"error": {"message": message, "type": "scripted", "code": code or None}}).encode()
    return Reply(status=status, body=body, headers={"retry-after-ms": "10"})


def program(k: int, doc: str = "Recency plus a tuned hit bonus") -> str:
    """A valid kv candidate, distinct for every k."""
    return (
        f'"""{doc} ({k})."""\n'
        'PARAMS = {"w": (0.0, 8.0)}\n\n\n'
        "def priority(b, p):\n"
        f"    return b.last_access + p.w * log1p(b.hits) + {k} * 0.001 * b.depth\n"
    )


def parent_source(request: dict[str, Any]) -> str:
    """The parent program the prompt shows (under the shipped user template's heading)."""
    text = "\n".join(m["content"] for m in request["messages"] if m["role"] == "user")
    found = re.search(r"# Parent program.*?```python\n(.*?)\n```", text, re.DOTALL)
    assert found, "the prompt shows the parent program"
    return found.group(1)


class ScriptedLLM:
    """A threaded HTTP server speaking POST /v1/chat/completions; use as a context manager."""

    def __init__(
        self,
        script: list[Step],
        fallback: Callable[[dict[str, Any]], Reply],
        port: int = 0,
        key: str | None = None,
        models: tuple[str, ...] = (),
    ) -> None:
        self.script = list(script)
        self.key = key
        self.models = models
        """What GET /v1/models lists (none: an empty list, as a server that serves any name may give)."""
        """When set, any other bearer token is answered 401, as OpenAI does."""
        self.fallback = fallback
        self.received: list[Received] = []
        self.delivered: list[tuple[str, int, int]] = []
        """(model, prompt tokens, completion tokens) of every completion the server sent."""
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> ScriptedLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop answering and close the port (safe to call twice, and from a handler's thread)."""
        self.server.shutdown()
        self.server.server_close()

    def _next(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            step = self.script.pop(0) if self.script else self.fallback
        return step if isinstance(step, Reply) else step(body)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        llm = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return

            def do_GET(self) -> None:
                if self._rejected():
                    return
                listed = [
                    {"id": m, "object": "model", "created": 0, "owned_by": "scripted"} for m in llm.models
                ]
                self._send(200, json.dumps({"object": "list", "data": listed}).encode(), {})

            def _rejected(self) -> bool:
                if llm.key is None or self.headers.get("authorization") == f"Bearer {llm.key}":
                    return False
                reply = error(401, "Incorrect API key provided", code="invalid_api_key")
                self._send(reply.status, reply.body or b"", {})
                return True

            def _send(self, status: int, data: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                if self._rejected():
                    return
                retry = int(self.headers.get("x-stainless-retry-count", "0"))
                with llm.lock:
                    llm.received.append(Received(body, retry, self.headers.get("authorization", "")))
                    llm.in_flight += 1
                    llm.max_in_flight = max(llm.max_in_flight, llm.in_flight)
                try:
                    self._answer(body)
                finally:
                    with llm.lock:
                        llm.in_flight -= 1

            def _answer(self, body: dict[str, Any]) -> None:
                reply = llm._next(body)
                if reply.hang_s:
                    time.sleep(reply.hang_s)
                    self.close_connection = True
                    return
                time.sleep(reply.delay_s)
                data = reply.body
                if data is None and body.get("stream"):
                    self._stream(body, reply)
                    return
                if data is None:
                    data = json.dumps(
                        {
                            "id": "chatcmpl-scripted",
                            "object": "chat.completion",
                            "created": 0,
                            "model": body["model"],
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant", "content": reply.content},
                                    "finish_reason": "stop",
                                }
                            ],
                            "usage": {
                                "prompt_tokens": reply.prompt_tokens,
                                "completion_tokens": reply.completion_tokens,
                                "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                            },
                        }
                    ).encode()
                    with llm.lock:
                        llm.delivered.append((body["model"], reply.prompt_tokens, reply.completion_tokens))
                self._send(reply.status, data, reply.headers)

            def _stream(self, body: dict[str, Any], reply: Reply) -> None:
                """The reply as server-sent events, a few characters a chunk, as OpenAI streams one; its
                usage in a last chunk where the request asks for it (stream_options.include_usage)."""
                content = reply.content or ""
                pieces = [content[i : i + 16] for i in range(0, len(content), 16)] or [""]
                chunks = [
                    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": p}}]} for p in pieces
                ]
                chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                if reply.usage and (body.get("stream_options") or {}).get("include_usage"):
                    usage = {
                        "prompt_tokens": reply.prompt_tokens,
                        "completion_tokens": reply.completion_tokens,
                        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                    }
                    chunks.append({"choices": [], "usage": usage})
                self.send_response(reply.status)
                self.send_header("content-type", "text/event-stream")
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                for chunk in chunks:
                    time.sleep(reply.gap_s)
                    event = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0}
                    line = json.dumps({**event, "model": body["model"], **chunk})
                    self.wfile.write(f"data: {line}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True
                with llm.lock:
                    llm.delivered.append((body["model"], reply.prompt_tokens, reply.completion_tokens))

        return Handler
