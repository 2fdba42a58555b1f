"""Import Vidur's measured GPU timings (microsoft/vidur, data/profiling/, MIT) as profiles.

Each Vidur row is one operator of one model at a token count and tensor-parallel degree (median of its
repeats, ms); it becomes a sample of our operator at the matching shape, grouped-query attention counted in
the QKV projection. A set may hold several models' rows: one fit across two shapes is what lets a profile
price a third model's shapes (Llama-3's, from Llama-2-7B's and -70B's on the H100). Vidur's attention
kernels are not in the data, so these profiles have no attention fits; a deployment prices attention from
published kernel figures instead (targets/deployments/).
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .model import Fit, Profile, ProfileError, Sample, fit, hold_back
from .shapes import LLAMA2_7B, LLAMA2_70B, LLAMA3_8B, ModelShape

# Vidur operator: (our operator, shape from num_tokens m, tp, hidden h, expanded f, heads, kv heads)
Shape = Callable[[int, int, int, int, int, int], dict[str, float]]
_OPS: dict[str, tuple[str, Shape]] = {
    "attn_pre_proj": (
        "gemm",
        lambda m, tp, h, f, heads, kv: {"m": m, "k": h, "n": (heads + 2 * kv) * (h // heads) // tp},
    ),
    "attn_post_proj": ("gemm", lambda m, tp, h, f, heads, kv: {"m": m, "k": h // tp, "n": h}),
    "mlp_up_proj": ("gemm", lambda m, tp, h, f, heads, kv: {"m": m, "k": h, "n": 2 * f // tp}),
    "mlp_down_proj": ("gemm", lambda m, tp, h, f, heads, kv: {"m": m, "k": f // tp, "n": h}),
    "input_layernorm": ("norm", lambda m, tp, h, f, heads, kv: {"m": m, "width": h}),
    "post_attention_layernorm": ("norm", lambda m, tp, h, f, heads, kv: {"m": m, "width": h}),
    "mlp_act": ("act", lambda m, tp, h, f, heads, kv: {"m": m, "width": f // tp}),
}


@dataclass(frozen=True)
class VidurSet:
    """Which of Vidur's CSVs make one profile, and what the profile is called and says it is."""

    name: str
    device_name: str
    operators: tuple[str, ...]
    all_reduce: str
    send_recv: str
    model: ModelShape
    """The profile's reference shape (the first model measured)."""
    measured: str
    """Whose operators, in the profile's notes: "H100 (DGX) timings of Llama-2-7B operators"."""


SETS = {
    s.name: s
    for s in (
        VidurSet(
            "h100-vidur",
            "NVIDIA H100 80GB (DGX)",
            ("vidur_h100_llama2-7b_mlp.csv",),
            "vidur_h100_dgx_all_reduce.csv",
            "vidur_h100_dgx_send_recv.csv",
            LLAMA2_7B,
            "H100 (DGX) timings of Llama-2-7B operators",
        ),
        VidurSet(
            "h100-vidur-llama2",
            "NVIDIA H100 80GB (DGX)",
            ("vidur_h100_llama2-7b_mlp.csv", "vidur_h100_llama2-70b_mlp.csv"),
            "vidur_h100_dgx_all_reduce.csv",
            "vidur_h100_dgx_send_recv.csv",
            LLAMA2_70B,
            "H100 (DGX) timings of Llama-2-7B and Llama-2-70B operators",
        ),
        VidurSet(
            "a100-vidur-llama3",
            "NVIDIA A100 80GB (DGX)",
            ("vidur_a100_llama3-8b_mlp.csv", "vidur_a100_llama3-70b_mlp.csv"),
            "vidur_a100_dgx_all_reduce.csv",
            "vidur_a100_dgx_send_recv.csv",
            LLAMA3_8B,
            "A100 (DGX) timings of Llama-3-8B and Llama-3-70B operators",
        ),
    )
}
"""h100-vidur: Llama-2-7B alone (the first import, which kv-tiered's and DiT's figures were priced on);
h100-vidur-llama2: Llama-2-7B and -70B, one fit across both; a100-vidur-llama3: Llama-3-8B and -70B."""


def _rows(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="") as fh:
            return list(csv.DictReader(fh))
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read Vidur data ({exc.strerror})") from None


def import_vidur(folder: str | Path, seed: int = 0, name: str = "h100-vidur") -> Profile:
    """The profile `name` (one of SETS) from Vidur's operator and collective CSVs in `folder`."""
    if name not in SETS:
        raise ProfileError(f"no Vidur set {name!r}; known: {', '.join(SETS)}")
    chosen, folder = SETS[name], Path(folder)
    compute: dict[str, list[Sample]] = {"gemm": [], "norm": [], "act": []}
    for csv_name in chosen.operators:
        for row in _rows(folder / csv_name):
            if row["use_gated_mlp"] != "True":
                continue  # our shapes assume a gated MLP, as every Llama has
            m, tp = int(row["num_tokens"]), int(row["num_tensor_parallel_workers"])
            h, f = int(row["n_embd"]), int(row["n_expanded_embd"])
            heads, kv = int(row["n_head"]), int(row["n_kv_head"])
            for vidur_op, (op, shape) in _OPS.items():
                ms = float(row[f"time_stats.{vidur_op}.median"])
                compute[op].append(Sample(shape(m, tp, h, f, heads, kv), ms))
    operators = {op: fit(op, hold_back(s, seed + i)) for i, (op, s) in enumerate(compute.items())}

    collectives: dict[str, dict[int, Fit]] = {"all_reduce": {}, "send_recv": {}}
    for op, csv_name in (("all_reduce", chosen.all_reduce), ("send_recv", chosen.send_recv)):
        by_group: dict[int, list[Sample]] = {}
        for row in _rows(folder / csv_name):
            intra_node = int(row["devices_per_node"]) == int(row["num_workers"])
            if row["rank"] != "0" or not intra_node:
                continue  # one rank's view, and only groups within one NVLink node
            sample = Sample({"bytes": float(row["size"])}, float(row[f"time_stats.{op}.median"]))
            by_group.setdefault(int(row["num_workers"]), []).append(sample)
        for i, (group, samples) in enumerate(sorted(by_group.items())):
            collectives[op][group] = fit(op, hold_back(samples, seed + 100 * group + i))
    files = ", ".join((*chosen.operators, chosen.all_reduce, chosen.send_recv))
    return Profile(
        name=chosen.name,
        device="cuda",
        source=f"imported from Vidur's measurements (microsoft/vidur data/profiling/): {files}",
        model=chosen.model,
        operators=operators,
        collectives=collectives,
        notes=(
            f"{chosen.measured} at tensor-parallel degrees 1, 2, 4, 8 and NCCL collectives within one "
            "node, medians as Vidur recorded them. Vidur's norm is a plain RMSNorm (our norm also adds the "
            "residual). No attention, LM-head or all-gather/all-to-all timings are in the data, so prefill "
            "and decode times cannot be composed from this profile; the GEMM fit covers projections only. "
            "A seeded quarter of each operator's samples is held back from its fit."
        ),
        meta={"device_name": chosen.device_name, "seed": seed},
    )
