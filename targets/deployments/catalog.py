"""The named deployments every LLM target prices on (`--set deployment=NAME`), and the CPU one.

Model shapes are the models' config.json files on the Hugging Face hub (meta-llama/Meta-Llama-3-8B and
-70B; Llama 3.1 has the same shapes). The engine's own time, beyond the kernels, is two numbers per GPU: a
time per iteration (scheduling, launches) and a time per sequence in it (bookkeeping, sampling), chosen on
a grid (0.5 ms, 0.01 ms steps) for the least worst error over the eight published figures of that GPU in
SGLang's benchmark_vllm_060 (the A100's with Llama-3.1-8B, the H100's with Llama-3.1-70B at TP 4):
bench/deployments_check.py, docs/targets/deployments.md. Two numbers fitted to eight figures, so the check
shows that one pair explains every setting, not a held-out prediction. No published figure of Llama-3-8B
on one H100 is in the check: the H100's overheads, fitted at TP 4, are assumed at TP 1 and 8.
"""

from __future__ import annotations

from targets.costmodel.shapes import LLAMA3_8B, LLAMA3_70B

from .deployment import Deployment
from .gpus import A100_SXM, H100_SXM

H100_OVERHEAD_MS, H100_PER_SEQUENCE_MS = 4.0, 0.05
A100_OVERHEAD_MS, A100_PER_SEQUENCE_MS = 4.0, 0.02

DEPLOYMENTS = {
    d.name: d
    for d in (
        Deployment("h100-llama3-8b", LLAMA3_8B, H100_SXM, 1, H100_OVERHEAD_MS, H100_PER_SEQUENCE_MS),
        Deployment("h100-llama3-70b-tp4", LLAMA3_70B, H100_SXM, 4, H100_OVERHEAD_MS, H100_PER_SEQUENCE_MS),
        Deployment("h100-llama3-70b-tp8", LLAMA3_70B, H100_SXM, 8, H100_OVERHEAD_MS, H100_PER_SEQUENCE_MS),
        Deployment("a100-llama3-8b", LLAMA3_8B, A100_SXM, 1, A100_OVERHEAD_MS, A100_PER_SEQUENCE_MS),
        Deployment("a100-llama3-70b-tp4", LLAMA3_70B, A100_SXM, 4, A100_OVERHEAD_MS, A100_PER_SEQUENCE_MS),
        Deployment(
            "llama3-8b-h100",
            LLAMA3_8B,
            H100_SXM,
            1,
            profile="h100-vidur",
            attention="gemm-macs",
            note="kv-tiered's first pricing, kept so its recorded figures stay comparable: Llama-2-7B's "
            "operator fits, attention at the GEMM's cost per multiply-accumulate, no iteration floor",
        ),
        Deployment(
            "llama3-70b-4xh100",
            LLAMA3_70B,
            H100_SXM,
            4,
            profile="h100-vidur",
            attention="gemm-macs",
            note="kv-tiered's first pricing of Llama-3-70B on four H100s, kept as llama3-8b-h100 is",
        ),
    )
}
"""The five GPU deployments, then kv-tiered's two first ones."""
DEFAULT = "h100-llama3-8b"
CPU = "cpu"
"""The choice that prices on a CPU profile instead, the tiny model the reference engine runs: what checks a
simulator against the real engine."""
SERVING = tuple(name for name, d in DEPLOYMENTS.items() if d.attention == "published")
"""The deployments that price a whole iteration (prefill and decode attention), which serving targets take."""


def deployment(name: str) -> Deployment:
    """The deployment called `name`; KeyError names the known ones."""
    if name not in DEPLOYMENTS:
        raise KeyError(f"unknown deployment {name!r}; known: {', '.join(DEPLOYMENTS)}")
    return DEPLOYMENTS[name]
