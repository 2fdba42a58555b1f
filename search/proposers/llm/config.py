"""Where and how the LLM proposer asks: models and their weights, the endpoint, prices; no client here."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
OPENAI_URL = "https://api.openai.com/v1"
DEFAULT_REPLY_TOKENS = 1024


@dataclass(frozen=True)
class ModelChoice:
    """A model to ask and its weight in the draw among models."""

    name: str
    weight: float = 1.0

    @classmethod
    def parse(cls, spec: str) -> ModelChoice:
        """`NAME` or `NAME:WEIGHT`; a suffix that is no number stays in the name (Ollama's `qwen2.5:7b`)."""
        name, _, suffix = spec.rpartition(":")
        try:
            weight = float(suffix)
        except ValueError:
            name, weight = spec, 1.0
        if not name or not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"--model {spec!r}: write NAME or NAME:WEIGHT with a positive weight")
        return cls(name, weight)


@dataclass(frozen=True)
class Price:
    """USD per million prompt tokens and per million completion tokens."""

    prompt: float
    completion: float

    def cost(self, usage: Usage) -> float:
        return (usage.prompt * self.prompt + usage.completion * self.completion) / 1e6

    @staticmethod
    def parse(spec: str) -> tuple[str, Price]:
        """`MODEL=PROMPT,COMPLETION` in USD per million tokens, e.g. `gpt-4.1-mini=0.40,1.60`."""
        model, _, rates = spec.rpartition("=")
        try:
            prompt, completion = (float(x) for x in rates.split(","))
        except ValueError:
            prompt = completion = math.nan
        if not model or not all(math.isfinite(x) and x >= 0 for x in (prompt, completion)):
            raise ValueError(f"--price {spec!r}: write MODEL=PROMPT,COMPLETION in USD per million tokens")
        return model, Price(prompt, completion)


@dataclass(frozen=True)
class Usage:
    """Tokens one or more calls consumed, as the endpoint reported them (or estimated, where it did not)."""

    prompt: int = 0
    completion: int = 0
    estimated: bool = False
    """Some of it is estimated: a server reported no usage (see proposer._read)."""

    @property
    def tokens(self) -> int:
        return self.prompt + self.completion

    def __add__(self, other: Usage) -> Usage:
        estimated = self.estimated or other.estimated
        return Usage(self.prompt + other.prompt, self.completion + other.completion, estimated)


@dataclass(frozen=True)
class LLMConfig:
    """Where and how to ask; stored in the run's config (the key's variable name, never the key)."""

    models: tuple[ModelChoice, ...]
    base_url: str | None = None
    """None means OpenAI itself."""
    api_key_env: str = DEFAULT_KEY_ENV
    timeout_s: float = 120.0
    retries: int = 2
    repairs: int = 2
    """Repair turns a proposal may take while its reply does not parse, apply or pass the static checker."""
    concurrency: int = 4
    temperature: float | None = None
    max_tokens: int | None = None
    """The most tokens a reply may have (`max_tokens`), or the server's default."""
    context_tokens: int | None = None
    """The model's context: each turn is fitted into it with room for a reply (None: sent whole)."""
    prices: dict[str, Price] = field(default_factory=dict)
    prompts: str | None = None
    """A folder of prompt templates that replace the shipped ones by file name."""
    share: float = 0.25
    """Share of proposals the LLM writes under `--proposer mix`; the offline proposer writes the rest."""

    def __post_init__(self) -> None:
        if not self.models:
            raise ValueError("the llm proposer needs at least one --model")
        if not (self.timeout_s > 0 and self.retries >= 0 and self.concurrency >= 1 and self.repairs >= 0):
            raise ValueError(
                "--llm-timeout must be positive, --llm-retries and --llm-repairs >= 0, --llm-concurrency >= 1"
            )
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"--llm-max-tokens must be at least 1, got {self.max_tokens}")
        if self.context_tokens is not None and self.context_tokens <= self.reply_tokens:
            raise ValueError(
                f"--llm-context {self.context_tokens} leaves no room for a prompt beside a reply of "
                f"{self.reply_tokens} tokens (--llm-max-tokens)"
            )
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"--llm-share must lie in [0, 1], got {self.share}")

    @property
    def reply_tokens(self) -> int:
        """The room a fitted turn keeps for the reply: --llm-max-tokens, else a default that a program
        and a few lines of prose fit in."""
        return self.max_tokens or DEFAULT_REPLY_TOKENS

    @property
    def endpoint(self) -> str:
        return self.base_url or OPENAI_URL

    def unpriced(self) -> list[str]:
        """Models without a price: their calls count tokens but cost nothing."""
        return [m.name for m in self.models if m.name not in self.prices]

    def cost(self, model: str, usage: Usage) -> float:
        price = self.prices.get(model)
        return price.cost(usage) if price else 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LLMConfig:
        return cls(
            **{
                **data,
                "models": tuple(ModelChoice(**m) for m in data["models"]),
                "prices": {name: Price(**p) for name, p in data.get("prices", {}).items()},
            }
        )


def api_key(config: LLMConfig, environ: Mapping[str, str]) -> str:
    """The key from the configured variable; local servers get a placeholder when none is set."""
    key = environ.get(config.api_key_env, "")
    if key:
        return key
    if config.base_url is None or config.api_key_env != DEFAULT_KEY_ENV:
        raise ValueError(f"set {config.api_key_env} to the API key of {config.endpoint}")
    return "none"  # vLLM, llama.cpp and Ollama accept any key unless started with one
