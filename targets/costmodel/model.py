"""Kernel-time cost model: per-operator fits of measured times, composed into prefill, decode, collectives.

Each operator's time is a non-negative sum of its work terms (a constant launch cost, elements moved,
multiply-accumulates), fitted to measurements by non-negative least squares on relative error. This is the
additive form of a roofline: linear in its coefficients, so the fit is exact and has no knobs; monotone in
every term, so it never predicts less time for more work, and it extrapolates to shapes between and beyond
the measured grid, which a piecewise table in two or three dimensions cannot do. Each fit is scored on
measurements it did not see (held back at random), and those errors are stored with the profile.

Reading a profile needs numpy only; measuring one needs torch (`targets.reference_engine.profiler`).
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from targets.base import WorkloadError
from targets.trace_files import checked_file

from .shapes import ModelShape

Terms = Callable[[Mapping[str, np.ndarray]], list[np.ndarray]]


def _gemm(s: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    m, k, n = s["m"], s["k"], s["n"]
    # One row is a matrix-vector product; from two rows on, BLAS packs the k x n operand first.
    packed = np.where(m > 1, k * n, 0.0)
    return [np.ones_like(m), m * k + m * n + k * n, m * k * n, packed]


PREFILL_TILE = 128
"""Queries per tile of the engine's prefill attention; each tile sees the cached keys and the new ones
up to its own end."""


def _attn_prefill(s: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    width, q, ctx = s["heads"] * s["head_dim"], s["q"], s["ctx"]
    tiles = np.ceil(q / PREFILL_TILE)
    last = q - (tiles - 1) * PREFILL_TILE  # rows of the last, possibly partial, tile
    # sum over tiles of rows x (ctx + tile end): full tiles end at T, 2T, ..., the last at q
    seen = (tiles - 1) * PREFILL_TILE * ctx + PREFILL_TILE**2 * (tiles - 1) * tiles / 2 + last * (ctx + q)
    # the new keys and values are written into the paged pool, then all ctx + q are read back from it
    return [np.ones_like(width), tiles, width * seen, width * (ctx + q), width * q]


def _attn_decode(s: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    width = s["heads"] * s["head_dim"]
    return [np.ones_like(width), s["batch"], width * s["keys"]]


def _elementwise(s: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    return [np.ones_like(s["m"]), s["m"] * s["width"]]


def _forward(s: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    return [s["ops_ms"], np.ones_like(s["tokens"]), s["tokens"], s["sequences"]]


def _message(s: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    return [np.ones_like(s["bytes"]), s["bytes"]]


OPERATORS: dict[str, tuple[tuple[str, ...], tuple[str, ...], Terms]] = {
    "gemm": (("m", "k", "n"), ("launch", "elements", "macs", "packed"), _gemm),
    "attn_prefill": (
        ("heads", "head_dim", "q", "ctx"),
        ("launch", "tiles", "macs", "kv_read", "kv_written"),
        _attn_prefill,
    ),
    "attn_decode": (
        ("batch", "heads", "head_dim", "keys"),
        ("launch", "sequences", "kv_elements"),
        _attn_decode,
    ),
    "norm": (("m", "width"), ("launch", "elements"), _elementwise),
    "act": (("m", "width"), ("launch", "elements"), _elementwise),
    "forward": (
        ("ops_ms", "tokens", "sequences"),
        ("operators", "launch", "tokens", "sequences"),
        _forward,
    ),
}
"""Compute operators: the shape keys a sample carries, the names of its work terms, and the terms.

gemm: an (m x k) by (k x n) product. attn_prefill: q new tokens attending causally over ctx cached and
the q new keys. attn_decode: one new token per sequence of a batch, over `keys` keys in all (the sum of
the batch's contexts, each including its new token). norm: add a residual and RMS-normalize m x width.
act: the gated activation of m x width. The engine's ops (targets/reference_engine/ops.py) are exactly these.
forward: one whole forward pass over a batch of `sequences` rows and `tokens` tokens whose operators, priced
by the fits above, take ops_ms: those operators as they run inside the pass (a factor on ops_ms) and the
pass's own work outside any of them (per pass, per token, per sequence), fitted to timed whole passes."""
PASS = "forward"
"""The operator fitted over whole forward passes rather than one kernel; measured after the others."""
BF16_BYTES = 2
"""Bytes of one activation value where a GPU deployment all-reduces them (BF16, as the engines serve)."""

COLLECTIVES = ("all_reduce", "all_gather", "all_to_all", "send_recv")
"""Collectives, each fitted per group size over the message size in bytes (launch + bytes)."""
HELD_OUT_SHARE = 0.25
"""Share of each operator's measurements held back from its fit and used only to score it."""
_COLLECTIVE_SPEC = (("bytes",), ("launch", "bytes"), _message)


class ProfileError(ValueError):
    """A profile is missing, malformed, or lacks an operator the question needs; the message says which."""


@dataclass(frozen=True)
class Sample:
    """One measured operator time (the median of repeats) at one shape."""

    shape: Mapping[str, float]
    ms: float
    held_out: bool = False


@dataclass(frozen=True)
class Fit:
    """One operator's fitted coefficients over its work terms, and the measurements they come from."""

    terms: tuple[str, ...]
    coef: tuple[float, ...]
    samples: tuple[Sample, ...]
    keys: tuple[str, ...]
    features: Terms = field(repr=False, compare=False)

    def predict(self, **shape: Any) -> np.ndarray:
        """Milliseconds at one shape or at arrays of shapes (broadcast like numpy)."""
        arrays = {k: np.asarray(shape[k], dtype=np.float64) for k in self.keys}
        columns = np.broadcast_arrays(*self.features(arrays))
        return sum((c * w for c, w in zip(columns, self.coef, strict=True)), np.zeros(columns[0].shape))

    def errors(self, held_out: bool = True) -> tuple[float, float, int]:
        """Median and worst relative error over the held-back (or the fitted) samples, and their count."""
        chosen = [s for s in self.samples if s.held_out == held_out]
        if not chosen:
            return float("nan"), float("nan"), 0
        rel = [abs(float(self.predict(**s.shape)) - s.ms) / s.ms for s in chosen]
        return float(np.median(rel)), float(max(rel)), len(chosen)

    def to_json(self) -> dict[str, Any]:
        median, worst, n = self.errors()
        fit_median, fit_worst, n_fit = self.errors(held_out=False)
        return {
            "terms": list(self.terms),
            "coef_ms": list(self.coef),
            "held_out_error": {"median": median, "worst": worst, "samples": n},
            "fitted_error": {"median": fit_median, "worst": fit_worst, "samples": n_fit},
            "samples": [{"shape": dict(s.shape), "ms": s.ms, "held_out": s.held_out} for s in self.samples],
        }


def fit(op: str, samples: Sequence[Sample]) -> Fit:
    """Fit an operator (a compute operator or a collective) on its samples that are not held back."""
    keys, terms, features = OPERATORS.get(op, _COLLECTIVE_SPEC)
    train = [s for s in samples if not s.held_out]
    if not train:
        raise ProfileError(f"{op}: no measurements to fit")
    shapes = {k: np.array([s.shape[k] for s in train], dtype=np.float64) for k in keys}
    X = np.stack(np.broadcast_arrays(*features(shapes)), axis=1)
    y = np.array([s.ms for s in train])
    return Fit(terms, tuple(_nnls_relative(X, y)), tuple(samples), keys, features)


def hold_back(samples: Sequence[Sample], seed: int) -> list[Sample]:
    """Mark a seeded quarter of the samples (at least one) as held back from the fit."""
    rng = np.random.default_rng(seed)
    k = max(1, round(HELD_OUT_SHARE * len(samples)))
    chosen = set(rng.choice(len(samples), size=k, replace=False).tolist())
    return [Sample(s.shape, s.ms, i in chosen) for i, s in enumerate(samples)]


def _nnls_relative(X: np.ndarray, y: np.ndarray) -> list[float]:
    """Non-negative least squares on relative error, exactly: the best of all non-negative subset fits.

    Operators have at most five terms, so trying every subset of active terms is cheap and needs no solver.
    """
    A = X / y[:, None]
    ones = np.ones_like(y)
    scale = np.maximum(np.abs(A).max(axis=0), 1e-300)  # columns span 1 to 1e12: solve in unit scale
    best: tuple[float, list[float]] = (np.inf, [0.0] * X.shape[1])
    for size in range(1, X.shape[1] + 1):
        for subset in itertools.combinations(range(X.shape[1]), size):
            cols = list(subset)
            w, *_ = np.linalg.lstsq(A[:, cols] / scale[cols], ones, rcond=None)
            if np.any(w < 0):
                continue
            residual = float(np.sum((A[:, cols] / scale[cols] @ w - ones) ** 2))
            if residual < best[0]:
                coef = [0.0] * X.shape[1]
                for c, v in zip(cols, w / scale[cols], strict=True):
                    coef[c] = float(v)
                best = (residual, coef)
    return best[1]


@dataclass(frozen=True)
class Profile:
    """Measured operator times on one device with their fits, and where the measurements came from."""

    name: str
    device: str
    source: str
    model: ModelShape
    operators: Mapping[str, Fit]
    collectives: Mapping[str, Mapping[int, Fit]]
    notes: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)

    def operator(self, op: str) -> Fit:
        if op not in self.operators:
            raise ProfileError(f"profile {self.name!r} has no measurements of {op}")
        return self.operators[op]

    def error_table(self) -> list[tuple[str, float, float, int]]:
        """(operator, median, worst relative error on held-back samples, count) for every fit."""
        rows = [(op, *f.errors()) for op, f in self.operators.items()]
        rows += [(f"{op}/{g}", *f.errors()) for op, by in self.collectives.items() for g, f in by.items()]
        return rows

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "device": self.device,
            "source": self.source,
            "notes": self.notes,
            "meta": dict(self.meta),
            "model": self.model.to_json(),
            "operators": {op: f.to_json() for op, f in self.operators.items()},
            "collectives": {
                op: {str(g): f.to_json() for g, f in by.items()} for op, by in self.collectives.items()
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Profile:
        def refit(op: str, entry: Mapping[str, Any]) -> Fit:
            keys, terms, features = OPERATORS.get(op, _COLLECTIVE_SPEC)
            if tuple(entry["terms"]) != terms:
                raise ProfileError(
                    f"{op} was fitted over the terms {', '.join(entry['terms'])}, this version's are "
                    f"{', '.join(terms)}: measure the profile again (crucible profile)"
                )
            samples = tuple(
                Sample(dict(s["shape"]), float(s["ms"]), bool(s["held_out"])) for s in entry["samples"]
            )
            return Fit(terms, tuple(float(c) for c in entry["coef_ms"]), samples, keys, features)

        return cls(
            name=data["name"],
            device=data["device"],
            source=data["source"],
            notes=data.get("notes", ""),
            meta=dict(data.get("meta", {})),
            model=ModelShape.from_json(data["model"]),
            operators={op: refit(op, e) for op, e in data["operators"].items()},
            collectives={
                op: {int(g): refit(op, e) for g, e in by.items()} for op, by in data["collectives"].items()
            },
        )

    def save(self, path: str | os.PathLike[str]) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n")


SHIPPED = (
    "cpu-2core",
    "h100-vidur",
    "cpu-2core-busy",
    "cpu-2core-passes",
    "h100-vidur-llama2",
    "a100-vidur-llama3",
)
"""Profiles shipped in targets/costmodel/profiles/: this kind of 2-core CPU, measured by `crucible profile`
on an idle machine before whole passes were timed; the H100 from Vidur's measured operator and NCCL
timings; the 2-core CPU measured with timed passes while other jobs ran; the same idle, with timed
passes (the profile the batching validation prices with by default); and the GPU deployments' operator
profiles, Vidur's H100 Llama-2-7B and -70B and A100 Llama-3-8B and -70B operators, one fit per GPU
(targets/costmodel/vidur.py, targets/deployments/)."""
DEFAULT_PROFILE = "cpu-2core"


def pass_speed(profile: Profile, passes: Sequence[Sample]) -> float:
    """The median ratio of whole forward passes timed now (profiler.time_passes) to the profile's pricing
    of them: how much slower this machine, in this process, runs the passes than when it was profiled."""
    if PASS not in profile.operators or not passes:
        raise ProfileError(f"profile {profile.name}: no timed forward passes to compare with")
    fitted = profile.operators[PASS]
    return float(np.median([s.ms / float(fitted.predict(**s.shape)) for s in passes]))


def slowed(profile: Profile, factor: float) -> Profile:
    """The profile with every whole forward pass `factor` times as long (its operators alone unchanged)."""
    fitted = profile.operator(PASS)
    meta = {**profile.meta, "passes_slowed_by": factor}
    operators = {**profile.operators, PASS: replace(fitted, coef=tuple(c * factor for c in fitted.coef))}
    return replace(profile, operators=operators, meta=meta)


def load_profile(name_or_path: str) -> Profile:
    """A shipped profile by name, or a profile file written by `crucible profile`."""
    if name_or_path in SHIPPED:
        text = (resources.files("targets.costmodel") / "profiles" / f"{name_or_path}.json").read_text()
        where = name_or_path
    else:
        where = name_or_path
        known = ", ".join(SHIPPED)
        try:
            checked_file(Path(name_or_path), "profile file")
            text = Path(name_or_path).read_text(encoding="utf-8")
        except WorkloadError as exc:
            raise ProfileError(f"{exc}; shipped profiles: {known}") from None
        except OSError as exc:
            raise ProfileError(
                f"{where}: cannot read the profile ({exc.strerror}); shipped: {known}"
            ) from None
        except UnicodeDecodeError:
            raise ProfileError(f"{where}: not a profile file (not UTF-8 text); shipped: {known}") from None
    try:
        return Profile.from_json(json.loads(text))
    except ProfileError as exc:
        raise ProfileError(f"{where}: {exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ProfileError(f"{where}: not a profile file ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class CostModel:
    """The times the simulators read: prefill, a decode iteration, a collective; composed per layer.

    On a GPU deployment (targets/deployments/) `model` is one GPU's share of a tensor-parallel group, each
    layer's two all-reduces count in linear_ms, and no iteration is faster than streaming the GPU's weights
    and the keys and values it reads from HBM (`streaming`); on a CPU profile both are off."""

    profile: Profile
    model: ModelShape
    tensor_parallel: int = 1
    streaming: tuple[float, float] = (0.0, 0.0)
    """The bytes-bound floor of an iteration: ms to read the weights, and ms per cached key (keys and
    values of one token in every layer) the iteration reads."""

    @classmethod
    def load(cls, profile: str = DEFAULT_PROFILE, model: ModelShape | None = None) -> CostModel:
        p = load_profile(profile)
        return cls(p, model or p.model)

    def _layer_linear(self, m: np.ndarray) -> np.ndarray:
        """Everything of one layer but attention, for m tokens: two norms, four projections, activation."""
        h, f, width = self.model.hidden, self.model.ffn, self.model.heads * self.model.head_dim
        gemm, norm, act = (self.profile.operator(op) for op in ("gemm", "norm", "act"))
        return (
            2 * norm.predict(m=m, width=h)
            + gemm.predict(m=m, k=h, n=width + 2 * self.model.kv_width)
            + gemm.predict(m=m, k=width, n=h)
            + gemm.predict(m=m, k=h, n=2 * f)
            + act.predict(m=m, width=f)
            + gemm.predict(m=m, k=f, n=h)
        )

    def _head(self, m: np.ndarray) -> np.ndarray:
        """The final norm and the LM head over the m positions whose logits are needed."""
        norm, gemm = self.profile.operator("norm"), self.profile.operator("gemm")
        return norm.predict(m=m, width=self.model.hidden) + gemm.predict(
            m=m, k=self.model.hidden, n=self.model.vocab
        )

    def prefill_ms(self, new_tokens: Any, cached_tokens: Any = 0) -> np.ndarray:
        """Time to prefill `new_tokens` tokens over a cached context of `cached_tokens` (arrays broadcast)."""
        n = np.asarray(new_tokens, dtype=np.float64)
        c = np.asarray(cached_tokens, dtype=np.float64)
        attn = self.profile.operator("attn_prefill").predict(
            heads=self.model.heads, head_dim=self.model.head_dim, q=n, ctx=c
        )
        one = np.ones_like(n)
        return self.model.layers * (self._layer_linear(n) + attn) + self._head(one)

    def prefill_saved_ms(self, prompt_tokens: Any, hit_tokens: Any) -> np.ndarray:
        """Prefill time a cached prefix saves; a fully cached prompt still computes its last token."""
        n = np.asarray(prompt_tokens, dtype=np.float64)
        c = np.minimum(np.asarray(hit_tokens, dtype=np.float64), n - 1)
        saved = self.prefill_ms(n, 0) - self.prefill_ms(n - c, c)
        return np.where(c > 0, saved, 0.0)

    def decode_ms(self, contexts: Sequence[int]) -> float:
        """One decode iteration: a new token for each sequence, each over its cached context plus itself."""
        return self.iteration_ms([], [], contexts)

    def collective_ms(self, op: str, nbytes: float, group: int) -> float:
        """Time of one collective over `group` ranks for a message of `nbytes` bytes per rank."""
        if op not in COLLECTIVES:
            raise ProfileError(f"unknown collective {op!r}; known: {', '.join(COLLECTIVES)}")
        by_group = self.profile.collectives.get(op, {})
        if group not in by_group:
            have = ", ".join(str(g) for g in sorted(by_group)) or "none"
            raise ProfileError(f"profile {self.profile.name!r} has no {op} over {group} ranks (have: {have})")
        return float(by_group[group].predict(bytes=nbytes))

    def operators_ms(
        self, new_tokens: Sequence[int], cached_tokens: Sequence[int], decode_contexts: Sequence[int]
    ) -> float:
        """The operators of one continuous batch's forward pass, each priced as profiled alone: the
        projections and MLP over all its tokens, attention per prefill chunk and batched over the decodes,
        the head over each sequence's last token. What a whole pass is fitted over (the forward operator)."""
        sequences = len(new_tokens) + len(decode_contexts)
        if sequences == 0:
            return 0.0
        tokens = float(np.sum(new_tokens)) + len(decode_contexts)
        attn = self.profile.operator("attn_prefill").predict(
            heads=self.model.heads,
            head_dim=self.model.head_dim,
            q=np.asarray(new_tokens),
            ctx=np.asarray(cached_tokens),
        )
        decode = self._attn_decode(self.profile.operator("attn_decode"), decode_contexts)
        return float(
            self.model.layers * (self._layer_linear(np.float64(tokens)) + float(np.sum(attn)))
            + decode
            + self._head(np.float64(sequences))
        )

    def _pass(self) -> tuple[float, float, float, float]:
        """The forward fit's (operators factor, ms per pass, per token, per sequence); a profile without
        timed whole passes (Vidur's has none) prices a pass as the sum of its operators."""
        if PASS not in self.profile.operators:
            return 1.0, 0.0, 0.0, 0.0
        scale, launch, token, sequence = self.profile.operators[PASS].coef
        return scale, launch, token, sequence

    def in_pass(self, op: str) -> Fit:
        """An operator's fit as it runs inside a forward pass: its coefficients times the pass's factor."""
        fitted, scale = self.profile.operator(op), self._pass()[0]
        return replace(fitted, coef=tuple(c * scale for c in fitted.coef))

    def linear_ms(self, tokens: Any) -> np.ndarray:
        """A pass's work that grows with its `tokens` tokens (arrays broadcast): every layer's norms,
        projections and MLP, the all-reduces after attention and after the MLP under tensor parallelism,
        and the pass's own per-token work."""
        scale, _, token, _ = self._pass()
        t = np.asarray(tokens, dtype=np.float64)
        ms = scale * self.model.layers * self._layer_linear(t) + token * t
        if self.tensor_parallel > 1:
            reduce = self.profile.collectives["all_reduce"][self.tensor_parallel]
            values = np.maximum(t, 1.0) * self.model.hidden * BF16_BYTES
            ms = ms + np.where(t > 0, 2 * self.model.layers * reduce.predict(bytes=values), 0.0)
        return ms

    def floor_ms(self, keys: Any) -> np.ndarray:
        """The least an iteration reading `keys` cached keys takes: its bytes at the GPU's bandwidth."""
        weights, per_key = self.streaming
        return weights + per_key * np.asarray(keys, dtype=np.float64)

    def head_ms(self, rows: Any) -> np.ndarray:
        """A pass's work per pass and per sequence, for `rows` sequences (arrays broadcast): the final norm
        and LM head over each sequence's last position, and the pass's own work outside any operator."""
        scale, launch, _, sequence = self._pass()
        r = np.asarray(rows, dtype=np.float64)
        return scale * self._head(r) + launch + sequence * r

    def attn_prefill_ms(self, new_tokens: Any, cached_tokens: Any) -> np.ndarray:
        """Every layer's attention for chunks of `new_tokens` over `cached_tokens` each, inside a pass."""
        return self.model.layers * self.in_pass("attn_prefill").predict(
            heads=self.model.heads, head_dim=self.model.head_dim, q=new_tokens, ctx=cached_tokens
        )

    def attn_decode_ms(self, contexts: Sequence[int]) -> float:
        """Every layer's attention of one decode iteration inside a pass: a new token per context."""
        return self._attn_decode(self.in_pass("attn_decode"), contexts)

    def _attn_decode(self, fitted: Fit, contexts: Sequence[int]) -> float:
        if not len(contexts):
            return 0.0
        keys = float(np.sum(contexts)) + len(contexts)
        attn = fitted.predict(
            batch=len(contexts), heads=self.model.heads, head_dim=self.model.head_dim, keys=keys
        )
        return float(self.model.layers * attn)

    def iteration_ms(
        self, new_tokens: Sequence[int], cached_tokens: Sequence[int], decode_contexts: Sequence[int]
    ) -> float:
        """One forward pass of a continuous batch, prefill chunks and decodes mixed (vLLM V1, Sarathi-Serve).

        The pass's operators (operators_ms) as they run inside it, plus its own work outside them, as the
        forward fit has it; the sum of linear_ms, the attentions and head_ms, the parts the simulators
        tabulate.
        """
        sequences = len(new_tokens) + len(decode_contexts)
        if sequences == 0:
            return 0.0
        tokens = float(np.sum(new_tokens)) + len(decode_contexts)
        prefill = float(np.sum(self.attn_prefill_ms(np.asarray(new_tokens), np.asarray(cached_tokens))))
        ms = float(
            self.linear_ms(tokens) + prefill + self.attn_decode_ms(decode_contexts) + self.head_ms(sequences)
        )
        if self.streaming[0] <= 0:
            return ms
        read = (new_tokens, cached_tokens, decode_contexts)
        keys = float(sum(np.sum(x) for x in read)) + len(decode_contexts)
        return max(ms, float(self.floor_ms(keys)))
