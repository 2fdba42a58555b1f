"""Prompts built from the target and the search state, through template files a user can override.

Nothing here is written for one target: the description, the decision signatures, every feature of their
registries (name, unit, domain, doc) and the allowed subset come from the target and the static checker,
so a new target gets its prompt for free. The words around them live in `templates/` and are
`string.Template` files (`$name` placeholders, `$$` for a dollar sign); a folder given with `--prompts`
replaces any of them by file name.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from string import Template

from search.proposers.base import Entry, ProposalRequest, TargetBrief
from verifiers.static import CALLS, MAX_RANGE

NAMES = ("system.md", "user.md", "repair.md")
CONTEXT = frozenset(
    {
        "target",
        "description",
        "objective",
        "signatures",
        "functions",
        "calls",
        "max_range",
        "parent",
        "parent_metrics",
        "inspirations",
        "failures",
    }
)
"""The placeholders every template may use; the repair template may also use `$error`."""
CHARS_PER_TOKEN = 3.0
"""Characters per token when a turn is fitted into a context. Prompts are code and tables of features:
Qwen2.5's tokenizer reads each shipped target's prompt at 3.4 to 3.9 characters a token (measured by the
llm_local tests against the real tokenizer), so 3.0 errs on the side of fitting."""
MESSAGE_TOKENS = 8
"""A chat template's tokens around each message (ChatML: `<|im_start|>role\n` ... `<|im_end|>\n`)."""

Message = dict[str, str]


@dataclass(frozen=True)
class Templates:
    """The three prompt texts: the system message, the request, and the one repair turn."""

    system: str
    user: str
    repair: str

    @classmethod
    def load(cls, folder: str | None = None) -> Templates:
        """The shipped templates, each replaced by a file of the same name in `folder` if there is one."""
        if folder and not Path(folder).is_dir():
            raise ValueError(f"prompt folder {folder} does not exist")
        shipped = resources.files("search.proposers.llm") / "templates"
        texts = {}
        for name in NAMES:
            path = Path(folder) / name if folder else None
            source = path if path is not None and path.is_file() else shipped / name
            where = str(path) if source is path else name
            try:
                text = source.read_text()
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"cannot read prompt template {where}: {exc}") from None
            _validate(name, where, text)
            texts[name.removesuffix(".md")] = text
        return cls(**texts)

    def messages(self, request: ProposalRequest) -> list[dict[str, str]]:
        """The chat messages that ask for one proposal."""
        values = variables(request)
        return [
            {"role": "system", "content": Template(self.system).substitute(values)},
            {"role": "user", "content": Template(self.user).substitute(values)},
        ]

    def fitted(
        self, request: ProposalRequest, history: Sequence[tuple[Message, Message]], room: int | None
    ) -> list[Message]:
        """The next call's conversation: the prompt, then each reply so far with its repair turn. Where it
        would not fit in `room` tokens, the older replies are left out first, then the inspirations, the
        last first; the registry and the parent always stay (a conversation too long even then is sent,
        and the server's refusal fails that proposal only)."""
        shown = request.inspirations
        for replies in range(len(history), 0, -1):
            turn = self._turn(request, history[-replies:])
            if room is None or estimated_tokens(turn) <= room:
                return turn
        for keep in range(len(shown), -1, -1):
            turn = self._turn(replace(request, inspirations=shown[:keep]), history[-1:])
            if room is None or estimated_tokens(turn) <= room:
                break
        return turn

    def _turn(self, request: ProposalRequest, history: Sequence[tuple[Message, Message]]) -> list[Message]:
        return [*self.messages(request), *(m for pair in history for m in pair)]

    def repair_message(self, request: ProposalRequest, error: str) -> dict[str, str]:
        """The follow-up turn after a reply that did not parse or apply."""
        content = Template(self.repair).substitute({**variables(request), "error": error})
        return {"role": "user", "content": content}


def estimated_tokens(messages: Sequence[Message]) -> int:
    """A conversation's length in tokens, from its characters (CHARS_PER_TOKEN), erring long."""
    return sum(math.ceil(len(m["content"]) / CHARS_PER_TOKEN) + MESSAGE_TOKENS for m in messages)


def _validate(name: str, where: str, text: str) -> None:
    template = Template(text)
    if not template.is_valid():
        raise ValueError(f"prompt template {where} has a '$' that starts no placeholder (write $$ for '$')")
    allowed = CONTEXT | {"error"} if name == "repair.md" else CONTEXT
    unknown = sorted(set(template.get_identifiers()) - allowed)
    if unknown:
        known = ", ".join(f"${n}" for n in sorted(allowed))
        raise ValueError(f"prompt template {where} uses unknown ${unknown[0]} (known: {known})")


def variables(request: ProposalRequest) -> dict[str, str]:
    """Every placeholder's text for one request."""
    brief = request.target
    parent = request.parent
    return {
        "target": brief.name,
        "description": brief.description,
        "objective": f"{brief.direction} {brief.objective}",
        "signatures": signatures(brief),
        "functions": ", ".join(f"{s.name}({s.state_arg}, {s.params_arg})" for s in brief.signatures),
        "calls": ", ".join(_call(name, low, high) for name, (low, high) in CALLS.items()),
        "max_range": str(MAX_RANGE),
        "parent": parent.source.strip("\n"),
        "parent_metrics": _metrics(brief, parent),
        "inspirations": _inspirations(brief, request.inspirations),
        "failures": "\n".join(f"- {line}" for line in request.failures) or "None yet.",
    }


CLOCK_NOTE = (
    "a clock feature is a moment that only grows: a threshold on it splits the trace in time, "
    "and later traffic takes one side only"
)
"""Why the prompt marks clock features (targets.base.Feature.clock)."""


def signatures(brief: TargetBrief) -> str:
    """Each decision function with its doc and every feature it may read: name, unit, domain and meaning.
    A function that reads the same features as one before it says so rather than list them again."""
    parts, listed = [], {}
    for sig in brief.signatures:
        registry = brief.registries[sig.name]
        rows = [
            f"    {sig.state_arg}.{f.name} ({f.shown_unit}, in [{f.low:g}, {f.high:g}]): {f.doc}"
            for f in registry.features
            if f.name in sig.features
        ]
        head = f"def {sig.name}({sig.state_arg}, {sig.params_arg}):  # {sig.doc}\n"
        if (same := listed.get((sig.state_arg, *rows))) is not None:
            parts.append(
                f"{head}  reads the same features of `{sig.state_arg}` as {same}, and `{sig.params_arg}`."
            )
            continue
        listed[(sig.state_arg, *rows)] = f"{sig.name}()"
        parts.append(
            head
            + f"  reads these features of `{sig.state_arg}` (unit, domain: meaning; {CLOCK_NOTE}):\n"
            + "\n".join(rows)
            + f"\n  and `{sig.params_arg}.<name>` for each PARAMS entry."
        )
    return "\n\n".join(parts)


def _call(name: str, low: int, high: int | None) -> str:
    args = {1: "x", 2: "a, b", 3: "x, low, high"}.get(low, "x")
    return f"{name}({args}, ...)" if high is None else f"{name}({args})"


def _score(brief: TargetBrief, entry: Entry) -> float:
    """The objective as measured; the database keeps larger-is-better scores, negating minimized ones."""
    return entry.score if brief.direction == "maximize" else -entry.score


def _metrics(brief: TargetBrief, entry: Entry) -> str:
    line = f"Candidate {entry.name}: {brief.objective} = {_score(brief, entry):.6g}"
    others = {k: v for k, v in entry.metrics.items() if k != brief.objective}
    if others:
        line += "; " + ", ".join(f"{k} = {v:.6g}" for k, v in sorted(others.items()))
    if entry.params:
        line += "\nTuned PARAMS: " + ", ".join(f"{k} = {v:.6g}" for k, v in sorted(entry.params.items()))
    return line


def _inspirations(brief: TargetBrief, entries: tuple[Entry, ...]) -> str:
    if not entries:
        return "None yet."
    return "\n\n".join(
        f"Candidate {e.name} ({brief.objective} = {_score(brief, e):.6g}):\n"
        f"```python\n{e.source.strip(chr(10))}\n```"
        for e in entries
    )
