"""Request arrival traces: the Azure LLM inference CSV format, validated, sliced, and scaled to a machine."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

import numpy as np

from targets.base import WorkloadError

HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_MAX_TOKENS = 10_000_000  # far above any context window; guards the int64 arrays and the KV arithmetic


@dataclass(frozen=True, eq=False)
class Requests:
    """Requests in arrival order as flat arrays: what the scheduler replays."""

    arrival_s: np.ndarray  # float64[n], seconds from the first arrival, non-decreasing
    prompt_tokens: np.ndarray  # int64[n], >= 1
    output_tokens: np.ndarray  # int64[n], >= 1 (the first is produced by the prefill)
    name: str = ""

    @property
    def n(self) -> int:
        return int(self.arrival_s.size)

    def slice(self, start: int, stop: int) -> Requests:
        """Requests [start, stop), with time restarting at the first of them."""
        if not 0 <= start < stop <= self.n:
            raise WorkloadError(f"slice {start}:{stop} is empty or outside the trace's 0:{self.n} requests")
        t = self.arrival_s[start:stop]
        return Requests(
            t - t[0],
            self.prompt_tokens[start:stop].copy(),
            self.output_tokens[start:stop].copy(),
            f"{self.name}[{start}:{stop}]",
        )

    def scaled(self, load: float = 1.0, token_divisor: int = 1, max_output: int = 0) -> Requests:
        """Arrivals `load` times as dense; token counts divided (rounded up) and outputs capped if asked.

        Dividing tokens shrinks every request's work alike, so a trace fits a slower machine or a smaller
        engine with its shape (the spread of prompt and output lengths) kept.
        """
        if not (math.isfinite(load) and load > 0):
            raise WorkloadError(f"load must be a positive number, got {load!r}")
        if token_divisor < 1 or max_output < 0:
            raise WorkloadError("the token divisor must be at least 1 and the output cap non-negative")
        prompt = -(-self.prompt_tokens // token_divisor)
        output = -(-self.output_tokens // token_divisor)
        if max_output:
            output = np.minimum(output, max_output)
        return replace(self, arrival_s=self.arrival_s / load, prompt_tokens=prompt, output_tokens=output)


def load_azure(path: str | Path) -> Requests:
    """Read an Azure LLM inference trace (TIMESTAMP,ContextTokens,GeneratedTokens); defects are one line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise WorkloadError(f"{path}: cannot read the trace ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise WorkloadError(f"{path}: not valid UTF-8 (byte {e.start + 1})") from None
    lines = text.splitlines()
    if not lines or tuple(c.strip() for c in lines[0].split(",")) != HEADER:
        raise WorkloadError(f"{path} line 1: expected the header {','.join(HEADER)}")
    stamps, prompts, outputs = [], [], []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.split(",")
        if len(fields) != 3:
            raise WorkloadError(f"{path} line {number}: expected 3 comma-separated fields, got {len(fields)}")
        stamps.append(_timestamp(path, number, fields[0].strip()))
        prompts.append(_tokens(path, number, "ContextTokens", fields[1]))
        outputs.append(_tokens(path, number, "GeneratedTokens", fields[2]))
    if not stamps:
        raise WorkloadError(f"{path}: the trace has no requests")
    t = np.array(stamps, dtype=np.float64)
    order = np.argsort(t, kind="stable")  # a trace out of order is replayed in arrival order
    t = t[order] - t[order[0]]
    return Requests(
        t,
        np.array(prompts, dtype=np.int64)[order],
        np.array(outputs, dtype=np.int64)[order],
        Path(path).name,
    )


def _timestamp(path: str | Path, line: int, text: str) -> float:
    """Seconds since the epoch of an ISO timestamp; Azure's seven fractional digits are cut to six."""
    head, dot, fraction = text.partition(".")
    try:
        return datetime.fromisoformat(f"{head}{dot}{fraction[:6]}" if dot else head).timestamp()
    except ValueError:
        raise WorkloadError(
            f"{path} line {line}: TIMESTAMP must look like 2023-11-16 18:15:46.6805900, got {text[:40]!r}"
        ) from None


def _tokens(path: str | Path, line: int, column: str, text: str) -> int:
    text = text.strip()
    if not text.isdigit() or not 1 <= int(text) <= _MAX_TOKENS:
        raise WorkloadError(
            f"{path} line {line}: {column} must be a whole number from 1 to {_MAX_TOKENS}, got {text[:40]!r}"
        )
    return int(text)
