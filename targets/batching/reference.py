"""The batching target on the reference engine: each scheduler iteration is one forward pass of the model.

The batching target's scheduler decides every iteration (which prefill chunks, which decodes, who is
preempted) and this executor runs it over a paged KV pool of exactly the scheduler's block budget: the
projections and MLP over all the iteration's tokens at once, attention per prefill chunk over the request's
earlier chunks (read back from the pool) and batched over the decodes, then greedy next tokens for the rows
that reached the end of their sequence. A preempted request's blocks go back to the pool, and its later
chunks recompute its prompt and its output so far, so what it generates does not depend on how it was
batched, chunked or preempted (tests/reference_engine/test_batching_on_engine.py checks this against serving
alone).
"""

from __future__ import annotations

import torch

from targets.reference_engine.model import KVPool, Transformer
from targets.reference_engine.profiler import compute_clock

from .scheduler import Batch, Limits
from .trace import Requests


def prompt_tokens(request: int, length: int, vocab: int, seed: int) -> list[int]:
    """A request's prompt ids, a function of its index and the seed alone (the trace has no text)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + request)
    return torch.randint(vocab, (length,), generator=g).tolist()


class EngineExecutor:
    """Runs the scheduler's iterations on real kernels; returns each one's measured time in ms, on the clock
    the profiler times the CPU's kernels with (the thread's CPU time), so the two compare like for like."""

    def __init__(self, model: Transformer, requests: Requests, limits: Limits, seed: int = 0) -> None:
        self.model = model
        self.requests = requests
        self.pool = KVPool.empty(model.shape, limits.kv_blocks, limits.block_tokens)
        self.free = list(range(limits.kv_blocks - 1, -1, -1))
        self.tables: dict[int, list[int]] = {}
        self.sequences = {
            r: prompt_tokens(r, int(n), model.shape.vocab, seed) for r, n in enumerate(requests.prompt_tokens)
        }
        self.logits: dict[int, list[torch.Tensor]] = {r: [] for r in range(requests.n)}
        """Every request's logits at each token it generated, in order: what batching must not change."""
        self.clock = compute_clock("cpu")

    def __call__(self, batch: Batch) -> float:
        for r in batch.preempted.tolist():
            self.free.extend(self.tables.pop(r, []))
        bs = self.pool.block_tokens
        rows = list(zip(batch.ids.tolist(), batch.starts.tolist(), batch.tokens.tolist(), strict=True))
        for r, start, n in rows:
            table = self.tables.setdefault(r, [])
            while len(table) * bs < start + n:
                if not self.free:
                    raise RuntimeError(
                        f"iteration needs more KV blocks than the pool's {self.pool.data.shape[2]}"
                    )
                table.append(self.free.pop())
        began = self.clock()
        tokens = torch.tensor([t for r, s, n in rows for t in self.sequences[r][s : s + n]])
        chunks = tokens.split([n for _, _, n in rows])
        logits = self.model.forward(
            self.pool,
            [(chunk, torch.tensor(self.tables[r]), s) for chunk, (r, s, _) in zip(chunks, rows, strict=True)],
        )
        for (r, start, n), out in zip(rows, logits, strict=True):
            sequence = self.sequences[r]
            if start + n == len(sequence):
                self.logits[r].append(out)
                sequence.append(int(out.argmax()))
                if len(self.logits[r]) == int(self.requests.output_tokens[r]):
                    self.free.extend(self.tables.pop(r))
        return (self.clock() - began) * 1e3
