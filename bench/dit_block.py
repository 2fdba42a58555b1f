"""One DiT block measured on this machine (one process, then Ulysses-2 and Ring-2 over gloo between two
local processes) against the DiT cost model's prediction priced by this machine's profile (cpu-2core:
GEMMs, norms and activations from its fits, attention as two GEMMs per head and a softmax, all-to-all and
send/recv from its gloo fits over 2 processes). Prints measured / predicted per layout.

    .venv/bin/python bench/dit_block.py [--tokens 1024] [--repeats 7] [--quick] [--record]

`--quick`: 64 tokens, one repeat.
"""

from __future__ import annotations

import argparse
import os

import _bench

from targets.dit.block import BlockShape, run_parallel, run_single
from targets.dit.cost import step_cost
from targets.dit.models import DiTModel
from targets.dit.plans import Plan, Request
from targets.dit.pricing import profile_pricing
from targets.dit.topology import GPU, PCIE4, Topology

CPU = GPU("this machine's CPU cores", 1e12, 0.0, 0.0)
LOCAL = Topology("local-processes", CPU, 2, 1, 1, PCIE4, PCIE4, "2 local processes on one CPU (gloo)")
"""The links are never read: every collective of 2 processes is priced by the profile's gloo fits."""


def predicted_s(shape: BlockShape, ulysses: int, ring: int) -> float:
    """The cost model's time of the block: a one-block model of its shape, one step, no CFG."""
    model = DiTModel(
        "block", 1, shape.hidden, shape.heads, shape.head_dim, shape.mlp, (1, 1, 1), 1, 1, 1, 0, "joint",
        False, 0.0, False, "bench/dit_block.py", (shape.tokens, 1, 1, 1), modulated=False,
    )  # fmt: skip  # targets/dit/block.py: plain LayerNorms and residual adds, no adaLN, qk-norm or rotary
    request = Request(model, shape.tokens, 1, 1, 1)
    plan = Plan(1, 1, 1, ring, ulysses, 1, tuple(range(ulysses * ring)))
    return step_cost(request, plan, profile_pricing(LOCAL, "cpu-2core")).step_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=7)
    args, session = _bench.start(parser)
    if session.quick:
        args.tokens, args.repeats = 64, 1
    shape = BlockShape(hidden=256, heads=8, mlp=1024, tokens=args.tokens)
    _, single = run_single(shape, args.repeats)
    measured = {(1, 1): single}
    measured |= {k: t for k, (_, t) in run_parallel(shape, [(2, 1), (1, 2)], args.repeats).items()}
    print(
        f"block: hidden {shape.hidden}, {shape.heads} heads, MLP {shape.mlp}, {shape.tokens} tokens", end="; "
    )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (the profile was measured idle)")
    print(f"{'layout':12} {'measured ms':>12} {'predicted ms':>13} {'measured/predicted':>19}")
    rows = []
    for (ulysses, ring), seconds in measured.items():
        label = "1 process" if ulysses * ring == 1 else ("ulysses2" if ulysses == 2 else "ring2")
        model = predicted_s(shape, ulysses, ring)
        print(f"{label:12} {seconds * 1e3:12.2f} {model * 1e3:13.2f} {seconds / model:19.2f}")
        rows.append(
            {"layout": label, "measured ms": seconds * 1e3, "predicted ms": model * 1e3,
             "measured / predicted": seconds / model}
        )  # fmt: skip
    block = f"hidden {shape.hidden}, {shape.heads} heads, MLP {shape.mlp}, {shape.tokens} tokens"
    session.save({"block": block, "profile": "cpu-2core", "layouts": rows})


if __name__ == "__main__":
    main()
