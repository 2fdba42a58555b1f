"""Import Vidur's measured H100 timings (microsoft/vidur, data/profiling/, MIT) as a profile.

Each Vidur row is one Llama-2-7B operator at a token count and tensor-parallel degree (median of its
repeats, ms); it becomes a sample of our operator at the matching shape. Vidur's attention kernels are not
in the data, so an H100 profile made from it has no attention fits, and the cost model says so rather
than guess.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

from .model import Fit, Profile, ProfileError, Sample, fit, hold_back
from .shapes import LLAMA2_7B

MLP_CSV = "vidur_h100_llama2-7b_mlp.csv"
ALL_REDUCE_CSV = "vidur_h100_dgx_all_reduce.csv"
SEND_RECV_CSV = "vidur_h100_dgx_send_recv.csv"

Shape = Callable[[int, int, int, int, int], dict[str, float]]
_OPS: dict[str, tuple[str, Shape]] = {
    # Vidur operator: (our operator, shape from num_tokens m, tp, hidden h, expanded f, heads)
    "attn_pre_proj": ("gemm", lambda m, tp, h, f, heads: {"m": m, "k": h, "n": 3 * h // tp}),
    "attn_post_proj": ("gemm", lambda m, tp, h, f, heads: {"m": m, "k": h // tp, "n": h}),
    "mlp_up_proj": ("gemm", lambda m, tp, h, f, heads: {"m": m, "k": h, "n": 2 * f // tp}),
    "mlp_down_proj": ("gemm", lambda m, tp, h, f, heads: {"m": m, "k": f // tp, "n": h}),
    "input_layernorm": ("norm", lambda m, tp, h, f, heads: {"m": m, "width": h}),
    "post_attention_layernorm": ("norm", lambda m, tp, h, f, heads: {"m": m, "width": h}),
    "mlp_act": ("act", lambda m, tp, h, f, heads: {"m": m, "width": f // tp}),
}


def _rows(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="") as fh:
            return list(csv.DictReader(fh))
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read Vidur data ({exc.strerror})") from None


def import_vidur(folder: str | Path, seed: int = 0) -> Profile:
    """The H100 profile from Vidur's MLP-operator, all-reduce and send/recv CSVs in `folder`."""
    folder = Path(folder)
    compute: dict[str, list[Sample]] = {"gemm": [], "norm": [], "act": []}
    for row in _rows(folder / MLP_CSV):
        if row["n_head"] != row["n_kv_head"] or row["use_gated_mlp"] != "True":
            continue  # our shapes assume full multi-head attention and a gated MLP, as Llama-2-7B has
        m, tp = int(row["num_tokens"]), int(row["num_tensor_parallel_workers"])
        h, f, heads = int(row["n_embd"]), int(row["n_expanded_embd"]), int(row["n_head"])
        for vidur_op, (op, shape) in _OPS.items():
            compute[op].append(Sample(shape(m, tp, h, f, heads), float(row[f"time_stats.{vidur_op}.median"])))
    operators = {op: fit(op, hold_back(s, seed + i)) for i, (op, s) in enumerate(compute.items())}

    collectives: dict[str, dict[int, Fit]] = {"all_reduce": {}, "send_recv": {}}
    for op, name in (("all_reduce", ALL_REDUCE_CSV), ("send_recv", SEND_RECV_CSV)):
        by_group: dict[int, list[Sample]] = {}
        for row in _rows(folder / name):
            intra_node = int(row["devices_per_node"]) == int(row["num_workers"])
            if row["rank"] != "0" or not intra_node:
                continue  # one rank's view, and only groups within one NVLink node
            sample = Sample({"bytes": float(row["size"])}, float(row[f"time_stats.{op}.median"]))
            by_group.setdefault(int(row["num_workers"]), []).append(sample)
        for i, (group, samples) in enumerate(sorted(by_group.items())):
            collectives[op][group] = fit(op, hold_back(samples, seed + 100 * group + i))
    return Profile(
        name="h100-vidur",
        device="cuda",
        source=f"imported from Vidur's measurements (microsoft/vidur data/profiling/): {MLP_CSV}, "
        f"{ALL_REDUCE_CSV}, {SEND_RECV_CSV}",
        model=LLAMA2_7B,
        operators=operators,
        collectives=collectives,
        notes=(
            "H100 (DGX) timings of Llama-2-7B operators at tensor-parallel degrees 1, 2, 4, 8 and NCCL "
            "collectives within one node, medians as Vidur recorded them. Vidur's norm is a plain RMSNorm "
            "(our norm also adds the residual). No attention, LM-head or all-gather/all-to-all timings are "
            "in the data, so prefill and decode times cannot be composed from this profile; the GEMM fit "
            "covers projections only. A seeded quarter of each operator's samples is held back from its fit."
        ),
        meta={"device_name": "NVIDIA H100 80GB (DGX)", "seed": seed},
    )
