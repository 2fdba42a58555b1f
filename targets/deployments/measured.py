"""A deployment's operators measured on a device beside what its published-derived pricing predicts.

`crucible profile --device cuda --deployment NAME` measures one GPU's share of the deployment (its GEMM,
norm and activation shapes, attention through PyTorch's SDPA with its grouped KV heads, NCCL collectives
where several GPUs are visible) in BF16; this module sets each measured shape beside the deployment's
prediction of it, operator by operator, so a GPU at hand says which published figure holds for it.
"""

from __future__ import annotations

import statistics
from typing import Any

from targets.costmodel.model import PASS, Fit, Profile, Sample

from .deployment import Deployment


def against_published(deployment: Deployment, measured: Profile) -> list[dict[str, Any]]:
    """Per operator (and collective group), how many shapes were measured and the median, lowest and
    highest ratio of measured to predicted time."""
    published = deployment.cost_model().profile
    pairs: list[tuple[str, Fit, tuple[Sample, ...]]] = [
        (op, published.operators[op], fit.samples)
        for op, fit in measured.operators.items()
        if op != PASS and op in published.operators
    ]
    for op, by_group in measured.collectives.items():
        for group, fit in by_group.items():
            if group in published.collectives.get(op, {}):
                pairs.append((f"{op}/{group}", published.collectives[op][group], fit.samples))
    rows = []
    for name, predicted, samples in pairs:
        ratios = [s.ms / float(predicted.predict(**s.shape)) for s in samples]
        rows.append(
            {
                "operator": name,
                "shapes": len(ratios),
                "measured / predicted": round(statistics.median(ratios), 3),
                "lowest": round(min(ratios), 3),
                "highest": round(max(ratios), 3),
            }
        )
    return rows
