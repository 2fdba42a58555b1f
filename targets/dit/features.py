"""The features of one serving option (a waiting request, a group of free GPUs, a plan) a policy may read."""

from __future__ import annotations

from targets.base import Feature, FeatureRegistry

_T = 1.0e9
"""Seconds: no simulated stream runs this long."""
_S = 1.0e7
"""Seconds one request may take: far above any model, size and plan here."""
_G = 64.0
"""GPUs: the largest topology has 32."""

OPTION_FEATURES = FeatureRegistry(
    (
        Feature("now", "s", 0.0, _T, "the scheduling time", clock=True),
        Feature("arrival", "s", 0.0, _T, "when the request arrived", clock=True),
        Feature("waiting", "s", 0.0, _T, "now - arrival"),
        Feature("deadline", "s", 0.0, 2 * _T, "when the request must be finished", clock=True),
        Feature("slack", "s", -_T, 2 * _T, "deadline - now (negative once it cannot finish in time)"),
        Feature("predicted_s", "s", 1.0e-6, _S, "seconds the request takes under this plan on this group"),
        Feature("slack_after", "s", -_T - _S, 2 * _T, "slack - predicted_s: time to spare if started now"),
        Feature("alone_s", "s", 1.0e-6, _S, "its fastest time on the whole empty cluster (any plan)"),
        Feature("gpus", "GPUs", 1.0, _G, "GPUs this option uses", integer=True),
        Feature(
            "fastest_gpus", "GPUs", 1.0, _G, "GPUs of its fastest plan on the empty cluster", integer=True
        ),
        Feature(
            "fastest_on_group", "flag", 0.0, 1.0, "1 if this is its fastest plan on this group", integer=True
        ),
        Feature("comm_share", "share", 0.0, 1.0, "share of a step spent in communication not hidden"),
        Feature("ulysses", "degree", 1.0, _G, "Ulysses degree of the plan", integer=True),
        Feature("ring", "degree", 1.0, _G, "ring-attention degree of the plan", integer=True),
        Feature("cfg_degree", "degree", 1.0, 2.0, "CFG-parallel degree of the plan", integer=True),
        Feature("pipefusion", "degree", 1.0, _G, "PipeFusion degree of the plan", integer=True),
        Feature("tensor", "degree", 1.0, _G, "tensor-parallel degree of the plan", integer=True),
        Feature("gpu_seconds", "GPU s", 1.0e-6, _G * _S, "predicted_s x gpus: what the option costs"),
        Feature(
            "efficiency",
            "share",
            0.0,
            1.0,
            "its least GPU-seconds on any group / gpu_seconds (1 = most frugal)",
        ),
        Feature("params_b", "1e9", 0.1, 100.0, "the model's parameters, in billions"),
        Feature("video", "flag", 0.0, 1.0, "1 for a video model", integer=True),
        Feature(
            "tokens", "tokens", 1.0, 1.0e7, "tokens of one attention (image and joint text)", integer=True
        ),
        Feature("steps", "steps", 1.0, 1000.0, "denoising steps", integer=True),
        Feature("free_gpus", "GPUs", 1.0, _G, "free GPUs now", integer=True),
        Feature("cluster_gpus", "GPUs", 1.0, _G, "GPUs of the cluster", integer=True),
        Feature("queued", "count", 1.0, 1.0e6, "requests waiting now, this one included", integer=True),
        Feature(
            "slow_link",
            "flag",
            0.0,
            1.0,
            "1 if the group spans sockets or nodes (PCIe, UPI, network)",
            integer=True,
        ),
    ),
    relations=(
        "waiting == now - arrival",
        "slack == deadline - now",
        "slack_after == slack - predicted_s",
        "gpus <= free_gpus",
        "free_gpus <= cluster_gpus",
        "fastest_gpus <= cluster_gpus",
    ),
)
"""Relations hold for every option the mechanism scores (exactly in reals; its subtractions round)."""
