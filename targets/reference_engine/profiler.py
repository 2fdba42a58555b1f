"""`crucible profile`: time the engine's operators and torch.distributed collectives, fit, write a profile.

Every time is the median of repeats after warm-ups. A quarter of each operator's shapes (seeded) is held
back from its fit, so the stored error is the error on shapes the fit never saw. Needs torch.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.distributed as dist

from targets.costmodel.model import (
    COLLECTIVES,
    OPERATORS,
    PASS,
    CostModel,
    Fit,
    Profile,
    ProfileError,
    Sample,
    fit,
    hold_back,
)
from targets.costmodel.shapes import ModelShape

from . import ops

TOKENS = (1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096)
PREFILL_Q = (8, 32, 64, 128, 256, 512, 1024, 2048)
PREFILL_CTX = (0, 8, 64, 256, 1024, 3072)
ROTATION_CAP_BYTES = 256 * 2**20
"""At most this much memory for the copies of a GEMM's weights (a 7B model's footprint is far larger)."""
POOL_BLOCKS = 4096
"""Blocks in the pool attention reads and writes: a cache's size, so its blocks are not all in the CPU's
caches as a pool of just the sequences' blocks would be."""
DECODE_BATCH = (1, 4, 16, 32)
DECODE_CTX = (16, 256, 1024, 2048)
PASS_DECODES = (0, 1, 2, 4, 8, 16, 32)
PASS_CHUNKS = ((), (16,), (128,), (64, 64))
PASS_LONG = ((512,), (2048,))
PASS_CONTEXT = ((32, 0), (256, 256))
"""Batch compositions of the timed whole forward passes: every number of decodes with no prefill chunk, one
short or long chunk, or two, and a few decodes beside a chunk of a whole token budget (PASS_LONG); decodes
over 32 cached tokens beside chunks from scratch, or over 256 beside chunks over 256 (PASS_CONTEXT: a
decode's context, a chunk's cached tokens)."""
MESSAGE_BYTES = tuple(2**e for e in range(10, 25))


@dataclass(frozen=True)
class Settings:
    """How to measure: device, threads, warm-ups, repeats, and the group sizes of collectives."""

    device: str = "cpu"
    threads: int = 1
    warmup: int = 3
    repeats: int = 7
    min_seconds: float = 0.05
    groups: tuple[int, ...] = (2,)
    seed: int = 0
    dtype: str = "float32"
    """The values' type: float32 as the CPU engine computes, bfloat16 as a GPU deployment serves."""
    max_tokens: int = 0
    """The largest token count, query chunk and cached context measured (0: the whole grid)."""


def compute_clock(device: str) -> Callable[[], float]:
    """The clock that times computation in seconds: on a CPU, the CPU time of the thread that computes (one
    thread per process, as sandbox jobs run), which equals its wall time on an idle machine and leaves out
    time the OS gives other processes on a shared one; on a GPU, wall time (with a sync)."""
    return time.perf_counter if device == "cuda" else time.thread_time


def time_ms(
    fn: Callable[[], object], settings: Settings, clock: Callable[[], float] = time.perf_counter
) -> float:
    """The median time of fn in ms on `clock`: warm-ups first, then at least `repeats` runs and
    `min_seconds` of wall time."""
    sync = torch.cuda.synchronize if settings.device == "cuda" else (lambda: None)
    for _ in range(settings.warmup):
        fn()
    sync()
    times: list[float] = []
    deadline = time.perf_counter() + settings.min_seconds
    while len(times) < settings.repeats or (time.perf_counter() < deadline and len(times) < 50):
        start = clock()
        fn()
        sync()
        times.append((clock() - start) * 1e3)
    return statistics.median(times)


def _compute_cases(model: ModelShape, max_tokens: int = 0) -> Iterator[tuple[str, dict[str, float]]]:
    """The operator shapes a model needs: every projection (the QKV one as wide as its query and key-value
    heads), norm and activation, and attention grids; none beyond `max_tokens` tokens where it is set
    (each grid's least value kept)."""
    h, f, w, v = model.hidden, model.ffn, model.heads * model.head_dim, model.vocab

    def upto(grid: tuple[int, ...]) -> tuple[int, ...]:
        return (tuple(x for x in grid if x <= max_tokens) or grid[:1]) if max_tokens else grid

    for k, n in ((h, w + 2 * model.kv_width), (w, h), (h, 2 * f), (f, h), (h, v)):
        for m in upto(TOKENS):
            yield "gemm", {"m": m, "k": k, "n": n}
    for m in upto(TOKENS):
        yield "norm", {"m": m, "width": h}
        yield "act", {"m": m, "width": f}
    for q in upto(PREFILL_Q):
        for c in upto(PREFILL_CTX):
            yield "attn_prefill", {"heads": model.heads, "head_dim": model.head_dim, "q": q, "ctx": c}
    for b in DECODE_BATCH:
        for c in upto(DECODE_CTX):
            yield (
                "attn_decode",
                {"batch": b, "heads": model.heads, "head_dim": model.head_dim, "keys": b * (c + 1), "ctx": c},
            )


def weight_bytes(model: ModelShape) -> int:
    """Bytes of every weight a forward pass reads (fp32): what passes through the caches between two
    uses of one layer's projection."""
    h, f, w = model.hidden, model.ffn, model.heads * model.head_dim
    return 4 * (model.layers * (h * 3 * w + w * h + h * 2 * f + f * h) + 2 * h * model.vocab)


def _runner(
    op: str, s: dict[str, float], settings: Settings, block: int, model: ModelShape
) -> Callable[[], object]:
    """Inputs allocated once, and a closure that runs the operator on them."""
    g = torch.Generator().manual_seed(0)
    device, dtype, footprint = settings.device, getattr(torch, settings.dtype), weight_bytes(model)
    size = torch.finfo(dtype).bits // 8

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    if op == "gemm":
        # A forward pass reads every weight once, so a projection's weights come from beyond the nearest
        # caches; timing one matrix over and over would keep it there. Copies to cycle through, covering
        # the model's footprint (capped), give each run the weights as a forward pass finds them.
        k, n = int(s["k"]), int(s["n"])
        copies = max(1, min(footprint, ROTATION_CAP_BYTES) // (size * k * n))
        x, ws = rand(int(s["m"]), k), itertools.cycle([rand(k, n) for _ in range(copies)])
        return lambda: ops.gemm(x, next(ws))
    if op == "norm":
        m, width = int(s["m"]), int(s["width"])
        x, d, w = rand(m, width), rand(m, width), rand(width)
        return lambda: ops.norm(x, d, w)
    if op == "act":
        x = rand(int(s["m"]), 2 * int(s["width"]))
        return lambda: ops.act(x)
    heads, dim = int(s["heads"]), int(s["head_dim"])
    kv = model.kv_heads or heads
    ctx = int(s["ctx"])
    if op == "attn_prefill":
        n = int(s["q"])
        # views of one fused projection, laid out as the model's forward hands them over
        fused = rand(n, (heads + 2 * kv) * dim)
        q = fused[:, : heads * dim].view(n, heads, dim).transpose(0, 1)
        k, v = fused[:, heads * dim :].view(n, 2, kv, dim).permute(1, 2, 0, 3)
        # a pool as large as a serving cache, the sequence's blocks scattered in it, as the engine has them
        used = -(-(ctx + n) // block)
        pool_blocks = max(POOL_BLOCKS, used)
        pool_k, pool_v = rand(pool_blocks, kv, block, dim), rand(pool_blocks, kv, block, dim)
        table = torch.randperm(pool_blocks, generator=g)[:used].to(device)
        return lambda: ops.attn_prefill(q, k, v, pool_k, pool_v, table, ctx)
    batch = int(s["batch"])
    fused = rand(batch, (heads + 2 * kv) * dim)
    q = fused[:, : heads * dim].view(batch, heads, dim)
    k, v = fused[:, heads * dim :].view(batch, 2, kv, dim).unbind(1)
    used = -(-(ctx + 1) // block)
    pool_blocks = max(POOL_BLOCKS, batch * used)
    pool_k, pool_v = rand(pool_blocks, kv, block, dim), rand(pool_blocks, kv, block, dim)
    scattered = torch.randperm(pool_blocks, generator=g)[: batch * used].to(device)
    tables = list(scattered.view(batch, used))
    ctxs = [ctx] * batch
    return lambda: ops.attn_decode(q, k, v, pool_k, pool_v, tables, ctxs)


def measure_compute(
    model: ModelShape, settings: Settings, block: int, progress: Callable[[str], None]
) -> dict[str, list[Sample]]:
    """Median times of every operator at every shape the model needs."""
    torch.set_num_threads(settings.threads)
    samples: dict[str, list[Sample]] = {op: [] for op in OPERATORS if op != PASS}
    clock = compute_clock(settings.device)
    with torch.inference_mode():
        for op, shape in _compute_cases(model, settings.max_tokens):
            ms = time_ms(_runner(op, shape, settings, block, model), settings, clock)
            keys = OPERATORS[op][0]
            samples[op].append(Sample({k: float(shape[k]) for k in keys}, ms))
            progress(f"{op} {shape}: {ms:.4f} ms")
    return samples


def _collective_worker(rank: int, world: int, store_path: str, settings: Settings, out: Any) -> None:
    """One rank: time every collective at every message size; rank 0 reports (op, bytes, ms)."""
    torch.set_num_threads(settings.threads)
    backend = "nccl" if settings.device == "cuda" else "gloo"
    device = f"cuda:{rank}" if settings.device == "cuda" else "cpu"
    if settings.device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{store_path}", rank=rank, world_size=world)
    lockstep = replace(settings, min_seconds=0.0)  # every rank must make the same number of calls
    results = []
    for nbytes in MESSAGE_BYTES:
        n = nbytes // 4
        x = torch.ones(n, device=device)
        gathered = [torch.empty(n, device=device) for _ in range(world)]
        chunk = max(n // world, 1)
        a2a_in, a2a_out = torch.ones(chunk * world, device=device), torch.empty(chunk * world, device=device)

        def send_recv(x: torch.Tensor = x) -> None:
            if rank == 0:
                dist.send(x, 1)
            elif rank == 1:
                dist.recv(x, 0)

        runs: dict[str, Callable[[], object]] = {
            "all_reduce": lambda x=x: dist.all_reduce(x),
            "all_gather": lambda x=x, g=gathered: dist.all_gather(g, x),
            "all_to_all": lambda i=a2a_in, o=a2a_out: dist.all_to_all_single(o, i),
            "send_recv": send_recv,
        }
        inner = max(1, min(20, 2**22 // nbytes))  # back to back, as nccl-tests do: latency, not barriers
        for op in COLLECTIVES:

            def timed(run: Callable[[], object] = runs[op], inner: int = inner) -> None:
                for _ in range(inner):
                    run()

            dist.barrier()
            ms = time_ms(timed, lockstep) / inner
            measured = torch.tensor([ms])
            dist.all_reduce(measured, op=dist.ReduceOp.MAX)  # the slowest rank finishes the collective
            results.append((op, nbytes, float(measured)))
    if rank == 0:
        out.put(results)
    dist.destroy_process_group()


def measure_collectives(world: int, settings: Settings) -> dict[str, list[Sample]]:
    """Collectives between `world` local processes (gloo on CPU, NCCL on GPUs)."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [
            ctx.Process(target=_collective_worker, args=(r, world, store, settings, out))
            for r in range(world)
        ]
        for p in procs:
            p.start()
        results = out.get(timeout=1800)
        for p in procs:
            p.join()
    samples: dict[str, list[Sample]] = {op: [] for op in COLLECTIVES}
    for op, nbytes, ms in results:
        samples[op].append(Sample({"bytes": float(nbytes)}, ms))
    return samples


def _compositions(max_tokens: float) -> Iterator[tuple[list[int], list[int], list[int]]]:
    """(chunk sizes, their cached tokens, decode contexts) of every timed pass of at most max_tokens."""
    short = itertools.product(PASS_DECODES, PASS_CHUNKS, PASS_CONTEXT)
    long = itertools.product(PASS_DECODES[::3], PASS_LONG, PASS_CONTEXT)
    for decodes, chunks, (context, cached) in itertools.chain(short, long):
        if (decodes or chunks) and sum(chunks) + decodes <= max_tokens:
            yield list(chunks), [cached] * len(chunks), [context] * decodes


def measure_passes(
    model: ModelShape,
    settings: Settings,
    block: int,
    operators: Mapping[str, Fit],
    progress: Callable[[str], None],
    max_tokens: float = float("inf"),
) -> list[Sample]:
    """Whole forward passes of the engine (model.py) at a grid of batch compositions, each with what its
    operators cost as profiled alone (ops_ms), to fit the pass over them. Runs on the CPU, where the engine
    runs. The passes are timed in rounds, each after a different one, as a server runs them: a pass repeated
    back to back would find its own data and code paths warm (about 14 % faster)."""
    from .model import KVPool, Transformer

    torch.set_num_threads(settings.threads)
    transformer = Transformer(model, seed=settings.seed)
    pool = KVPool.empty(model, POOL_BLOCKS, block)
    alone = CostModel(Profile("alone", settings.device, "", model, operators, {}), model)
    g = torch.Generator().manual_seed(settings.seed)
    scattered = torch.randperm(POOL_BLOCKS, generator=g)
    compositions = list(_compositions(max_tokens))
    batches = []
    for chunks, cached, contexts in compositions:
        rows, used = [], 0
        for new, start in [*zip(chunks, cached, strict=True), *((1, c) for c in contexts)]:
            blocks = -(-(start + new) // block)
            tokens = torch.randint(model.vocab, (new,), generator=g)
            rows.append((tokens, scattered[used : used + blocks], start))
            used += blocks
        batches.append(rows)
    clock = compute_clock("cpu")
    times: list[list[float]] = [[] for _ in batches]
    for round_ in range(settings.warmup + settings.repeats):
        for i in torch.randperm(len(batches), generator=g).tolist():
            start = clock()
            transformer.forward(pool, batches[i])
            if round_ >= settings.warmup:
                times[i].append((clock() - start) * 1e3)
        progress(f"forward passes, round {round_ + 1} of {settings.warmup + settings.repeats}")
    samples = []
    for (chunks, cached, contexts), rows, ms in zip(compositions, batches, times, strict=True):
        shape = {
            "ops_ms": alone.operators_ms(chunks, cached, contexts),
            "tokens": float(sum(chunks) + len(contexts)),
            "sequences": float(len(rows)),
        }
        samples.append(Sample(shape, statistics.median(ms)))
    return samples


def time_passes(profile: Profile, settings: Settings, block: int, max_tokens: int) -> list[Sample]:
    """The profile's whole forward passes of at most `max_tokens` tokens timed again now (model.pass_speed
    compares them with the profile): a CPU's speed drifts by tens of per cent within an hour, even idle."""
    if PASS not in profile.operators:
        raise ProfileError(f"profile {profile.name} has no timed forward passes to time again")
    operators = {op: fitted for op, fitted in profile.operators.items() if op != PASS}
    return measure_passes(profile.model, settings, block, operators, lambda _: None, max_tokens)


def profile(
    model: ModelShape,
    settings: Settings,
    name: str,
    block: int,
    progress: Callable[[str], None],
    passes: bool = True,
) -> Profile:
    """Measure, hold back, fit, and describe where every number came from (the machine's load included:
    on a CPU it changes the kernels' times, even in their own CPU time). `passes`: time the engine's whole
    forward passes too (the CPU engine's model; a GPU deployment's engine is not this one)."""
    load_before = os.getloadavg()[0]
    compute = measure_compute(model, settings, block, progress)
    operators: dict[str, Fit] = {
        op: fit(op, hold_back(s, settings.seed + i)) for i, (op, s) in enumerate(compute.items())
    }
    if passes:
        timed = measure_passes(model, settings, block, operators, progress)
        operators[PASS] = fit(PASS, hold_back(timed, settings.seed + len(operators)))
    collectives: dict[str, dict[int, Fit]] = {op: {} for op in COLLECTIVES}
    for world in settings.groups:
        progress(f"collectives over {world} processes")
        for i, (op, s) in enumerate(measure_collectives(world, settings).items()):
            collectives[op][world] = fit(op, hold_back(s, settings.seed + 100 * world + i))
    device = torch.cuda.get_device_name() if settings.device == "cuda" else platform.processor() or "cpu"
    return Profile(
        name=name,
        device=settings.device,
        source="measured by `crucible profile` (targets/reference_engine/profiler.py)",
        model=model,
        operators=operators,
        collectives=collectives,
        notes=(
            f"medians of >= {settings.repeats} runs after {settings.warmup} warm-ups, {settings.dtype}, "
            f"{settings.threads} thread(s) per process, computation timed in "
            f"{'wall' if settings.device == 'cuda' else 'thread CPU'} time; "
            + (
                "whole forward passes of the engine (on the CPU) fitted over their operators; "
                if passes
                else ""
            )
            + "a seeded quarter of each operator's shapes is held back from its fit"
        ),
        meta={
            "device_name": device,
            "cpus": os.cpu_count(),
            "threads": settings.threads,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "block_tokens": block,
            "date": time.strftime("%Y-%m-%d"),
            "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        },
    )
