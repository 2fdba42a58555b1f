"""The LLM proposer: an OpenAI-compatible chat endpoint writes candidates; its settings, declared as data."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from search.proposers.base import Proposer
from search.proposers.llm.config import DEFAULT_KEY_ENV, LLMConfig, ModelChoice, Price
from targets.base import Option, setting

SETTINGS: tuple[Option, ...] = (
    setting(
        "models",
        "list",
        [],
        "a model to ask, NAME or NAME:WEIGHT; repeat to mix models by weight",
        flag_name="--model",
        metavar="NAME[:WEIGHT]",
    ),
    setting(
        "base_url",
        "str",
        None,
        "OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 (default: OpenAI)",
        resumable=True,
    ),
    setting("api_key_env", "str", DEFAULT_KEY_ENV, "variable holding the API key", metavar="VAR"),
    setting("llm_timeout", "float", 120.0, "seconds per call", metavar="S", low=0, open_low=True),
    setting("llm_retries", "int", 2, "client retries of 429, 5xx, timeouts", low=0),
    setting(
        "llm_repairs",
        "int",
        2,
        "repair turns per proposal while a reply does not parse, apply or pass the static checker",
        low=0,
        high=10,
    ),
    setting("llm_concurrency", "int", 4, "calls in flight at most", low=1),
    setting("temperature", "float", None, "sampling temperature (default: the server's)", low=0),
    setting(
        "llm_max_tokens",
        "int",
        None,
        "the most tokens a reply may have, sent as max_tokens (default: the server's)",
        low=1,
        high=1_000_000,
    ),
    setting(
        "llm_context",
        "int",
        None,
        "the model's context in tokens: a prompt that would not fit with a reply of --llm-max-tokens "
        "shows fewer inspirations (default: the prompt is sent whole)",
        metavar="TOKENS",
        low=512,
        high=100_000_000,
    ),
    setting(
        "prices",
        "list",
        [],
        "USD per million prompt and completion tokens of a model; repeatable",
        flag_name="--price",
        metavar="MODEL=PROMPT,COMPLETION",
    ),
    setting("prompts", "str", None, "folder of prompt templates replacing the shipped ones", metavar="DIR"),
)
SHARE = setting("llm_share", "float", 0.25, "share of LLM proposals under --proposer mix", low=0, high=1)


def llm_config(values: Mapping[str, Any]) -> LLMConfig:
    """The LLM's configuration from its settings' values; ValueError names the first bad one."""
    return LLMConfig(
        models=tuple(ModelChoice.parse(spec) for spec in values.get("models") or ()),
        base_url=values.get("base_url"),
        api_key_env=values.get("api_key_env") or DEFAULT_KEY_ENV,
        timeout_s=values.get("llm_timeout", 120.0),
        retries=values.get("llm_retries", 2),
        repairs=values.get("llm_repairs", 2),
        concurrency=values.get("llm_concurrency", 4),
        temperature=values.get("temperature"),
        max_tokens=values.get("llm_max_tokens"),
        context_tokens=values.get("llm_context"),
        prices=dict(Price.parse(spec) for spec in values.get("prices") or ()),
        prompts=values.get("prompts"),
        share=values.get("llm_share", SHARE.default),
    )


class LLMKind:
    """An OpenAI-compatible endpoint (OpenAI, vLLM, llama.cpp, Ollama) writes every candidate."""

    name = "llm"
    doc = "an OpenAI-compatible chat endpoint writes every candidate"
    settings = SETTINGS

    def configure(self, values: Mapping[str, Any]) -> dict[str, Any]:
        llm_config(values)  # every mistake is a ValueError here, before anything is stored
        return dict(values)

    def unpriced(self, values: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(llm_config(values).unpriced())

    def models(self, values: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(m.name for m in llm_config(values).models)

    def create(self, values: Mapping[str, Any], environ: Mapping[str, str]) -> Proposer:
        return checked_llm(values, environ)


def checked_llm(values: Mapping[str, Any], environ: Mapping[str, str]) -> Any:
    """The LLM proposer with its key, its templates and its endpoint checked."""
    from search.proposers.llm.config import api_key
    from search.proposers.llm.proposer import LLMProposer  # openai loads only for a run

    config = llm_config(values)
    proposer = LLMProposer(config, api_key(config, environ))
    proposer.check()
    return proposer


KIND = LLMKind()
