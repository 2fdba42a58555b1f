"""The LLM proposer: an OpenAI-compatible chat endpoint (OpenAI, vLLM, llama.cpp, Ollama) writes candidates.

One proposal is one chat call, plus up to `repairs` repair turns in the same conversation while the reply
does not parse, does not apply to the parent, falls outside the static checker's subset (the turn quotes
the checker's message; a program still outside it after the last turn goes on to be rejected and stored
as such), or repeats a program the search has (a copy after the last turn is the loop's duplicate).
Replies are streamed, so the timeout bounds silence (the wait for the first token, or between two), not
the length of a reply a slow model keeps writing; retries of 408/409/429/5xx, lost connections and a
first token that never comes are the `openai` client's own (`timeout`, `max_retries`). What then still
fails is classified in one line: `rate-limited`, `server-error`, `timeout`, `too-long` (a conversation
over the model's context) and `bad-response` (a body that is not a chat completion) fail this proposal
only; an endpoint that cannot be reached, a rejected key, an unknown model or a refused request raise
`ProposerUnavailable`, which stops the run resumably. Where `context_tokens` is set, each turn is fitted
into the model's context (prompting.Templates.fitted). The tokens of every reply come from its `usage`
(estimated where a server sends none), priced by the configured table (USD per million prompt and
completion tokens), and travel with the proposal or with its failure, with what became of each reply.
"""

from __future__ import annotations

import ast
import random
import re
from typing import Any

import httpx
import openai

from search.proposers.base import Exchange, Proposal, ProposalFailed, ProposalRequest, ProposerUnavailable
from search.proposers.llm.config import LLMConfig, Usage
from search.proposers.llm.edits import Edit, EditError, apply_reply
from search.proposers.llm.prompting import Message, Templates, estimated_tokens
from verifiers.fingerprint import fingerprint
from verifiers.static import StaticError, check

_DETAIL_CHARS = 200
_DUPLICATE = (
    "it is the same program as one the search already has (only its docstring or comments differ); write "
    "one that ranks differently"
)
_UNREAD_SHOWN = 3
"""Features the parent does not read that a copy's repair turn suggests, drawn by the proposal's seed."""


class LLMProposer:
    """Asks a chat model for a rewrite of, or SEARCH/REPLACE blocks against, the parent."""

    name = "llm"

    def __init__(self, config: LLMConfig, key: str, templates: Templates | None = None) -> None:
        self.config = config
        self.concurrency = config.concurrency
        self.templates = templates or Templates.load(config.prompts)
        self.client = openai.OpenAI(
            api_key=key, base_url=config.base_url, timeout=config.timeout_s, max_retries=config.retries
        )

    def propose(self, request: ProposalRequest) -> Proposal:
        rng = random.Random(request.seed)
        models = self.config.models
        model = rng.choices([m.name for m in models], weights=[m.weight for m in models])[0]
        functions = [s.name for s in request.target.signatures]
        used = Usage()
        replies: list[str] = []

        def exchange() -> Exchange:
            return Exchange(used.prompt, used.completion, tuple(replies), used.estimated)

        def failed(message: str) -> ProposalFailed:
            spent = {"tokens": used.tokens, "cost_usd": self.config.cost(model, used)}
            return ProposalFailed(message, proposer=self.name, model=model, exchange=exchange(), **spent)

        def ask(turn: list[Message], during: str = "") -> str:
            nonlocal used
            try:
                reply, usage = self._complete(model, turn, request.seed)
            except ProposalFailed as exc:
                used += exc.usage if isinstance(exc, _Spent) else Usage()
                replies.append(str(exc).split(":")[0])
                raise failed(f"{exc}{during}") from None
            except ProposerUnavailable as exc:  # keep what the first turn cost when a repair turn is cut off
                cost = self.config.cost(model, used)
                raise ProposerUnavailable(
                    str(exc), proposer=self.name, model=model, tokens=used.tokens, cost_usd=cost,
                    exchange=exchange(),
                ) from None  # fmt: skip
            used += usage
            return reply

        room = self.config.context_tokens - self.config.reply_tokens if self.config.context_tokens else None
        history: list[tuple[Message, Message]] = []
        reply = ask(self.templates.fitted(request, history, room))
        while True:
            try:
                edit = apply_reply(reply, request.parent.source, functions)
                check(edit.source, request.target.signatures)
                if fingerprint(edit.source) not in request.taken:
                    replies.append("ok")
                    break
                kind, message, usable = "duplicate", _duplicate(request, rng), edit
            except EditError as exc:
                kind, message, usable = exc.kind, str(exc), None
            except StaticError as exc:
                kind, message, usable = "static-check", str(exc), edit
            replies.append(kind)
            repaired = replies[:-1]
            if len(repaired) == self.config.repairs:
                if usable is not None:  # the loop rejects it with the checker's message, and stores it
                    edit = usable
                    break
                raise failed(f"{kind}: {message}{_after(repaired)}") from None
            history.append(
                ({"role": "assistant", "content": reply}, self.templates.repair_message(request, message))
            )
            reply = ask(self.templates.fitted(request, history, room), f" (in the repair turn after {kind})")
        return Proposal(
            source=edit.source,
            proposer=self.name,
            model=model,
            note=_note(edit, ", ".join(replies[:-1])),
            tokens=used.tokens,
            cost_usd=self.config.cost(model, used),
            exchange=exchange(),
        )

    def check(self) -> None:
        """Fail fast, before any work, when the endpoint cannot be reached, rejects the key, or lists its
        models and the run's are not among them."""
        try:
            served = [m.id for m in self.client.models.list()]
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise ProposerUnavailable(self._rejected(exc)) from None
        except openai.APITimeoutError:
            return  # slow to list models is not unreachable; the calls have their own timeout
        except openai.APIConnectionError as exc:
            raise ProposerUnavailable(
                f"cannot reach the LLM endpoint {self.config.endpoint}: {_cause(exc)}"
            ) from None
        except (openai.APIError, ValueError, AttributeError, TypeError):
            return  # a server without a model list may still serve chat completions
        unknown = [m.name for m in self.config.models if served and m.name not in served]
        if unknown:  # a typo a server that accepts any name would never report
            listed = ", ".join(served[:8]) + (f" and {len(served) - 8} more" if len(served) > 8 else "")
            raise ProposerUnavailable(
                f"{self.config.endpoint} serves no model {unknown[0]!r} (it serves {listed}); check --model"
            )

    def _rejected(self, exc: openai.APIStatusError) -> str:
        return (
            f"{self.config.endpoint} rejected the API key ({exc.status_code}: {_detail(exc)}); "
            f"set {self.config.api_key_env} to a valid key"
        )

    def _complete(self, model: str, messages: list[dict[str, str]], seed: int) -> tuple[str, Usage]:
        """The reply's text and its usage, streamed (_read); failures classified."""
        options: dict[str, Any] = {}
        if self.config.temperature is not None:
            options["temperature"] = self.config.temperature
        if self.config.max_tokens is not None:
            options["max_tokens"] = self.config.max_tokens
        endpoint, retries = self.config.endpoint, _plural(self.config.retries, "retry", "retries")
        try:
            stream = self.client.chat.completions.create(
                model=model,
                messages=messages,  # type: ignore[arg-type]
                seed=seed,
                stream=True,
                stream_options={"include_usage": True},
                **options,
            )
            return _read(stream, model, self.config.timeout_s, estimated_tokens(messages))
        except _NoEvent as exc:
            raise _Spent(str(exc), self._refused(model, messages)) from None
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise ProposerUnavailable(self._rejected(exc)) from None
        except openai.NotFoundError as exc:
            raise ProposerUnavailable(
                f"{endpoint} answered 404 for model {model!r} ({_detail(exc)}); check --model and --base-url"
            ) from None
        except openai.RateLimitError as exc:
            if _code(exc) == "insufficient_quota":
                raise ProposerUnavailable(
                    f"{endpoint}: the account is out of quota ({_detail(exc)})"
                ) from None
            raise ProposalFailed(f"rate-limited: {model} answered 429 after {retries}") from None
        except openai.APITimeoutError:
            raise ProposalFailed(
                f"timeout: no reply from {model} within {self.config.timeout_s:g} s, {retries}"
            ) from None
        except openai.APIConnectionError as exc:
            raise ProposerUnavailable(f"cannot reach the LLM endpoint {endpoint}: {_cause(exc)}") from None
        except openai.APIStatusError as exc:
            if _over_context(exc):
                raise ProposalFailed(f"too-long: {model} refused the request: {_detail(exc)}") from None
            if exc.status_code >= 500 or exc.status_code in (408, 409):
                status = exc.status_code
                raise ProposalFailed(
                    f"server-error: {model} answered {status} after {retries}: {_detail(exc)}"
                ) from None
            raise ProposerUnavailable(
                f"{endpoint} refused the request for {model!r} ({exc.status_code}: {_detail(exc)})"
            ) from None
        except (openai.APIResponseValidationError, ValueError) as exc:
            raise ProposalFailed(
                f"bad-response: {model}'s reply is not a chat completion: {_one_line(exc)}"
            ) from None

    def _refused(self, model: str, messages: list[dict[str, str]]) -> Usage:
        """After a stream that held no event: llama.cpp's Python server answers a streamed request over the
        context with an empty stream, so the request is sent once more unstreamed for one token, which it
        refuses with the reason (`too-long` where that is the context). What an accepted one cost."""
        try:
            reply = self.client.chat.completions.create(
                model=model,
                messages=messages,  # type: ignore[arg-type]
                max_tokens=1,
            )
        except openai.APIStatusError as exc:
            if _over_context(exc):
                raise ProposalFailed(f"too-long: {model} refused the request: {_detail(exc)}") from None
            return Usage()
        except (openai.APIError, ValueError):
            return Usage()
        return _usage(reply.usage) if getattr(reply, "usage", None) else Usage()


class _NoEvent(ProposalFailed):
    """A streamed reply that held no event at all."""


class _Spent(ProposalFailed):
    """A failure after a call that still cost something."""

    def __init__(self, message: str, usage: Usage) -> None:
        super().__init__(message)
        self.usage = usage


_OVER_CONTEXT = re.compile(r"context (length|size|window)|too long|too many tokens|n_ctx", re.IGNORECASE)


def _over_context(exc: openai.APIStatusError) -> bool:
    """A request longer than the model's context (OpenAI's and vLLM's 400, llama.cpp's): that proposal's
    conversation is too long, not the endpoint unusable."""
    if exc.status_code not in (400, 413, 422):
        return False
    return _code(exc) == "context_length_exceeded" or bool(_OVER_CONTEXT.search(_detail(exc)))


def _read(stream: Any, model: str, timeout_s: float, prompt_estimate: int) -> tuple[str, Usage]:
    """The streamed reply's text and usage. Streamed, a slow model that keeps writing never times out (the
    timeout bounds silence: the wait for the first token, or between two), and a call given up closes its
    stream, which tells the server to stop generating. Where the server reports no usage (llama.cpp's
    Python server), the usage is estimated: the prompt from its characters, the reply a token a chunk."""
    text, chunks, usage = [], 0, None
    try:
        with stream:
            for chunk in stream:
                chunks += 1
                usage = getattr(chunk, "usage", None) or usage
                for choice in getattr(chunk, "choices", None) or ():
                    piece = getattr(getattr(choice, "delta", None), "content", None)
                    if isinstance(piece, str):
                        text.append(piece)
    except httpx.TimeoutException:
        raise ProposalFailed(f"timeout: {model} fell silent for {timeout_s:g} s mid-reply") from None
    except (httpx.TransportError, openai.APIError) as exc:
        raise ProposalFailed(f"server-error: {model}'s reply broke off: {_one_line(exc)}") from None
    if chunks == 0:
        raise _NoEvent(f"bad-response: {model}'s reply is not a chat completion: no event in the stream")
    counted = _usage(usage) if usage is not None else Usage(prompt_estimate, len(text), estimated=True)
    return "".join(text), counted


def _usage(usage: Any) -> Usage:
    prompt = getattr(usage, "prompt_tokens", 0)
    completion = getattr(usage, "completion_tokens", 0)
    return Usage(prompt if isinstance(prompt, int) else 0, completion if isinstance(completion, int) else 0)


def _duplicate(request: ProposalRequest, rng: random.Random) -> str:
    """The repair turn's words for a copy: with, for a small model that copies its parent again and again,
    a few features the parent does not read to start from."""
    unread = sorted(
        {
            f"{s.state_arg}.{name}"
            for s in request.target.signatures
            for name in s.features
            if not re.search(rf"\.{name}\b", request.parent.source)
        }
    )
    if not unread:
        return _DUPLICATE
    shown = rng.sample(unread, min(_UNREAD_SHOWN, len(unread)))
    return f"{_DUPLICATE}, for example by also reading {', '.join(shown)}, which the parent does not read"


def _note(edit: Edit, repaired: str) -> str:
    how = f"diff of {_plural(edit.blocks, 'block', 'blocks')}" if edit.kind == "diff" else "rewrite"
    if edit.mends:
        how += f" ({', '.join(edit.mends)})"
    if repaired:
        how += f", repaired after {repaired}"
    try:
        doc = (ast.get_docstring(ast.parse(edit.source)) or "").strip().splitlines()
    except SyntaxError:
        doc = []
    return f"{how}: {doc[0]}" if doc else how


def _after(repaired: list[str]) -> str:
    """What a failure says of the repair turns before it."""
    if not repaired:
        return ""
    turns = "a repair turn" if len(repaired) == 1 else f"{len(repaired)} repair turns"
    return f" (after {turns} for {', '.join(repaired)})"


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:_DETAIL_CHARS]


def _detail(exc: openai.APIStatusError) -> str:
    """The server's error message when the body carries one, else the client's."""
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        message = error.get("message") if isinstance(error, dict) else error
        if message:
            return " ".join(str(message).split())[:_DETAIL_CHARS]
    return _one_line(exc)


def _code(exc: openai.APIStatusError) -> str:
    body = exc.body
    error = body.get("error", body) if isinstance(body, dict) else None
    return str(error.get("code") or "") if isinstance(error, dict) else ""


def _cause(exc: BaseException) -> str:
    """The innermost reason of a connection error (e.g. '[Errno 111] Connection refused')."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return _one_line(exc)
