"""What a request costs under a plan, part by part, and the exhaustive planner that ranks plans by it.

One line per formula (b: passes per GPU, 2 under CFG over the cfg degree; s: tokens of one attention; M:
PipeFusion patches; p: stages; u, r, t: Ulysses, ring, tensor degrees; h: hidden; f: MLP width; L: blocks):
- a GPU computes n = b s / (u r M) tokens per patch (USP splits the sequence u r ways, PipeFusion in M
  patches: xDiT docs/methods/hybrid.md);
- GEMMs per block: n x h x 3h/t (qkv), n x h/t x h (out), n x h x f/t (MLP up, twice if gated) and
  n x f/t x h (down); cross-attention adds n x h x h/t and n x h/t x h; a skip input adds n x 2h x h; a
  side cross-attention every k-th block (ConsisID's face tokens) adds n x h x w/t and n x w/t x h per k blocks
  (model configs);
- self-attention per block: r ring steps, each of s / (r M) queries over s / r keys for b H / (u t) heads
  (a PipeFusion patch attends over the whole image: fresh K,V of its own tokens, one-step-stale K,V of the
  others: PipeFusion paper, arXiv 2405.14430); linear attention (SANA) in float32 (pricing);
- elementwise per block: two norms and the MLP's activation (all a compiled block keeps); eager PyTorch adds
  the residual adds, adaLN's scale, shift and gate, qk-norm and the rotary embedding, each a pass over the
  block's values (RESIDUAL_BYTES, MODULATION_BYTES, ROPE_BYTES); SANA's Mix-FFN a depthwise 3 x 3
  convolution and its gate (diffusers GLUMBConv);
- Ulysses: four all-to-alls per block (q, k, v in, the output back) of n x h/t values per GPU, each
  (u - 1) message latencies + (u - 1)/u of the bytes at NCCL's bandwidth (DeepSpeed-Ulysses, arXiv
  2309.14509; nccl-tests issue 212), between two layout copies of its tensor (yunchang's all_to_all_4D);
- ring: r - 1 passes of the patch's K,V chunk, 2 b s/(r M) x h/(u t) values, each overlapped with one ring
  step's attention, at the rate of the ring's slowest hop; only the excess is exposed, and the r - 1
  partial outputs are merged in float32 (USP, arXiv 2405.07719; yunchang's update_out_and_lse,
  RING_MERGE_BYTES);
- tensor parallel: two all-reduces of n x h values per block (Megatron-LM);
- PipeFusion: a stage holds ceil(L/p) blocks; each patch's activations (n x h, plus one n x h per long skip
  that leaves the stage) go to the next stage asynchronously, hidden behind the stage's next patch; the last
  stage sends each patch back to the first, so a step keeps stage 0 busy only if M >= p, else it idles
  p - M patch slots (xDiT's _async_pipeline);
- PipeFusion's warm-up step (xDiT default 1) runs every stage in turn over the whole image with synchronous
  hops (xDiT's _sync_pipeline); the pipeline fills and drains once per request: p - 1 patch slots;
- CFG parallel: one all-gather of the noise prediction per step, before the scheduler (xDiT
  docs/methods/cfg_parallel.md);
- work outside the transformer (text encoders, VAE decoding) runs whole on every rank (models.py);
- the host dispatches each block's kernels once per patch, and each ring step after the first adds its
  launch, merge and wait: two fixed times no kernel measurement sees (pricing.CALIBRATION).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from .models import BYTES_PER_PARAM
from .plans import Memory, Plan, Request, memory, plans
from .pricing import Pricing

RESIDUAL_BYTES = 12.0
"""Eager PyTorch, per value of a block's hidden states: the two residual adds (attention's and the MLP's),
each reading two bf16 tensors and writing one."""
MODULATION_BYTES = 24.0
"""Eager adaLN, per value of a block's hidden states, for the attention and the MLP each: the normed input
times (1 + scale), plus shift, and the output times its gate, one bf16 read and one written each (diffusers'
AdaLayerNormZero and CogVideoXLayerNormZero; HunyuanVideo's modulate and apply_gate)."""
ROPE_BYTES = 52.0
"""Eager rotary embedding, per query or key value, as diffusers' apply_rotary_emb runs it: negate the odd
half (2 B), stack it with the even half (4 B), cast x and the rotated copy to float32 (6 + 6 B), multiply them
by cos and sin (8 + 8 B), add (12 B) and cast back to bf16 (6 B)."""
RING_MERGE_BYTES = 38.0
"""Bytes moved per output value by one merge of a partial attention output into the running one, as
yunchang's update_out_and_lse runs it in float32: cast the block's output (2 B read, 4 B written), out -
block_out (4 + 4 read, 4 written), times the sigmoid of the log-sum-exp difference (4 read, 4 written), out
minus that (4 + 4 read, 4 written)."""
PIPEFUSION_WARMUP_STEPS = 1
"""xDiT's default --warmup_steps: the first step runs without stale activations."""

STEP_PARTS = {
    "dispatch": "host time launching each block's kernels, per patch (fitted: pricing.CALIBRATION)",
    "gemm": "linear layers: qkv, output, MLP, cross-attention and skip projections",
    "elementwise": "norms, activations, eager adaLN, residual, qk-norm and rotary passes, the ring's merges",
    "attention": "self- and cross-attention kernels",
    "ulysses_all_to_all": "Ulysses' four all-to-alls per block and their layout copies (never overlapped)",
    "ring_p2p": "ring steps' merges and synchronisation, and K,V passes beyond what attention hides",
    "tensor_all_reduce": "tensor parallelism's two all-reduces per block",
    "pipefusion_p2p": "PipeFusion patch hops (and long skips) beyond what the next patch's compute hides",
    "pipeline_bubble": "PipeFusion stage idle while fewer patches than stages circulate",
    "cfg_all_gather": "CFG parallel's gather of the two noise predictions",
}
"""The parts a step's time is made of, on the busiest GPU; they add up to the step's time."""
_BUSY_PARTS = ("dispatch", "gemm", "elementwise", "attention")
"""The parts a GPU spends computing or launching kernels; the rest is communication or idling."""
HIDDEN_PARTS = {
    "ring_p2p": "ring K,V passes overlapped with attention",
    "pipefusion_p2p": "PipeFusion patch hops overlapped with the next patch",
}
"""Communication that runs but costs no time: overlapped with compute."""
ONCE_PARTS = {
    "warmup": "PipeFusion's warm-up step: every stage in turn over the whole image (instead of a step)",
    "pipeline_fill": "PipeFusion's pipeline fill and drain, once per request",
    "outside": "text encoders and VAE decoding, whole on every rank",
}
"""Per request, beyond pipelined_steps x step_s."""


@dataclass(frozen=True)
class StepCost:
    """A plan's predicted times, part by part, and its memory, for one request."""

    plan: Plan
    parts: dict[str, float]
    """Seconds per denoising step by STEP_PARTS name, on the busiest GPU."""
    hidden: dict[str, float]
    """Seconds per step of communication overlapped with compute, by HIDDEN_PARTS name."""
    once: dict[str, float]
    """Seconds per request beyond pipelined_steps x step_s, by ONCE_PARTS name."""
    steps: int
    warmup_steps: int
    """Of `steps`, those PipeFusion runs synchronously over the whole image (priced in once["warmup"])."""
    memory: Memory = field(compare=False)

    @property
    def pipelined_steps(self) -> int:
        return self.steps - self.warmup_steps

    @property
    def step_s(self) -> float:
        return sum(self.parts.values())

    @property
    def compute_s(self) -> float:
        """Per step: GEMMs, elementwise work and attention."""
        return self.parts["gemm"] + self.parts["elementwise"] + self.parts["attention"]

    @property
    def comm_s(self) -> float:
        """Per step: communication and pipeline idling not hidden behind compute."""
        return sum(v for k, v in self.parts.items() if k not in _BUSY_PARTS)

    @property
    def outside_s(self) -> float:
        return self.once["outside"]

    @property
    def total_s(self) -> float:
        """End to end: every step, PipeFusion's warm-up and fill, and the work outside the transformer."""
        return self.pipelined_steps * self.step_s + sum(self.once.values())

    @property
    def memory_bytes(self) -> float:
        return self.memory.total

    @property
    def comm_share(self) -> float:
        return self.comm_s / self.step_s if self.step_s > 0 else 0.0


@dataclass(frozen=True)
class _Stage:
    """One pipeline stage's work on one patch (seconds), and its outgoing hop."""

    dispatch: float
    gemm: float
    elementwise: float
    attention: float
    ulysses: float
    ring: float
    ring_hidden: float
    tensor: float
    hop: float

    @property
    def busy(self) -> float:
        compute = self.gemm + self.elementwise + self.attention
        return self.dispatch + compute + self.ulysses + self.ring + self.tensor


def _stage(request: Request, plan: Plan, pricing: Pricing, patches: int, blocks: float) -> _Stage:
    """`blocks` blocks over one of `patches` patches, on the slowest group of each kind."""
    m, b = request.model, request.batch / plan.cfg
    u, r, t = plan.ulysses, plan.ring, plan.tensor
    s, h, d, f, word = request.sequence, m.hidden, m.head_dim, m.mlp, BYTES_PER_PARAM
    n = b * s / (u * r * patches)
    queries = s / (r * patches)
    heads = b * m.heads / (u * t)
    linear = m.attention == "linear"
    worst = {k: min(plan.groups(k), key=pricing.topology.bandwidth) for k in ("ulysses", "ring", "tensor")}

    up = 2 if m.gated_mlp else 1
    gemm = (
        pricing.gemm_s(n, h, 3 * h / t) + pricing.gemm_s(n, h / t, h)
        + up * pricing.gemm_s(n, h, f / t) + pricing.gemm_s(n, f / t, h)
    )  # fmt: skip
    elementwise = 2 * pricing.elementwise_s("norm", n, h) + up * pricing.elementwise_s("act", n, f / t)
    if m.gated_mlp:  # the gate's activation, and the product of the two halves (three bf16 operands)
        elementwise += pricing.elementwise_s("act", n, f / t) + pricing.stream_s(n * f / t, 6.0)
    if m.depthwise_kernel:  # k x k multiply-adds per value of the gated input, read and written once
        values = up * n * f / t
        elementwise += pricing.conv_s(values, m.depthwise_kernel**2)
    if linear:
        attention = pricing.linear_attention_s(heads, queries, s / r, d, chunks=r)
        attention_step = attention / r
    else:
        attention_step = pricing.attention_s(heads, queries, s / r, d)
        attention = r * attention_step
    if m.text == "cross":
        gemm += pricing.gemm_s(n, h, h / t) + pricing.gemm_s(n, h / t, h)
        attention += pricing.attention_s(b * m.heads / t, n / b, m.text_tokens, d)
    if not request.compiled:  # each elementwise operation its own kernel, over the whole tensor
        per_value = RESIDUAL_BYTES + (MODULATION_BYTES if m.modulated else 0.0)
        per_value += RESIDUAL_BYTES / 2 if m.text == "cross" else 0.0  # the cross-attention's residual add
        elementwise += pricing.stream_s(n * h, per_value)
        if m.qk_norm:
            elementwise += 2 * pricing.elementwise_s("norm", n, h / t)
        if m.rope:
            elementwise += pricing.stream_s(2 * n * h / t, ROPE_BYTES)
    gemm += m.skips / m.blocks * pricing.gemm_s(n, 2 * h, h)
    if m.side_attention:  # q and output projections, attention to a few tokens, a norm, the residual add
        interval, side_heads, side_dim, side_tokens = m.side_attention
        width = side_heads * side_dim / t
        gemm += (pricing.gemm_s(n, h, width) + pricing.gemm_s(n, width, h)) / interval
        attention += pricing.attention_s(b * side_heads / t, n / b, side_tokens, side_dim) / interval
        elementwise += (pricing.elementwise_s("norm", n, h) + pricing.stream_s(n * h, 6.0)) / interval
    ulysses = 0.0
    if u > 1:  # each all-to-all between two layout copies (transpose, then contiguous) of its tensor
        ulysses = 4 * (
            pricing.all_to_all_s(n * h / t * word, worst["ulysses"]) + 2 * pricing.stream_s(n * h / t)
        )
    ring = ring_hidden = 0.0
    if r > 1:
        send = pricing.send_s(2 * b * queries * h / (u * t) * word, _hop(worst["ring"], pricing))
        ring = (r - 1) * (max(0.0, send - attention_step) + pricing.ring_step_overhead_s)
        ring_hidden = (r - 1) * min(send, attention_step)
        outputs = b * queries * h / (u * t)
        if linear:  # each further chunk's float32 partial output added to the sum
            elementwise += (r - 1) * pricing.stream_s(outputs, 12.0)
        else:  # cast to float32 and back once; each merge casts the partial output and runs three passes
            elementwise += pricing.stream_s(outputs, 12.0) + (r - 1) * pricing.stream_s(
                outputs, RING_MERGE_BYTES
            )
    tensor = 2 * pricing.all_reduce_s(n * h * word, worst["tensor"]) if t > 1 else 0.0
    hop = 0.0
    if plan.pipefusion > 1:
        pair = _hop(min(plan.groups("pipefusion"), key=pricing.topology.bandwidth), pricing)
        messages = 1 + _skips_leaving_a_stage(m.blocks, m.skips, plan.pipefusion)
        hop = messages * pricing.send_s(n * h * word, pair)
    per_block = (pricing.block_overhead_s, gemm, elementwise, attention, ulysses, ring, ring_hidden, tensor)
    return _Stage(*(blocks * x for x in per_block), hop)


def _hop(group: tuple[int, ...], pricing: Pricing) -> tuple[int, ...]:
    """Who a ring or pipeline hop's time is priced over. Every member sends to the next at once, so the
    slowest hop sets the pace: the group's own bandwidth, which divides a shared link among the members
    behind it. Within one NVLink node every hop is alike, and the first pair is priced instead, so that a
    measured two-GPU send applies."""
    return group[:2] if pricing.topology.within_nvlink_node(group) else group


def _skips_leaving_a_stage(blocks: int, skips: int, stages: int) -> int:
    """The most long skips (block i to block blocks - 1 - i) any one stage sends to another stage."""
    per = math.ceil(blocks / stages)
    leaving = [0] * stages
    for i in range(skips):
        if i // per != (blocks - 1 - i) // per:
            leaving[i // per] += 1
    return max(leaving)


def step_cost(request: Request, plan: Plan, pricing: Pricing) -> StepCost:
    """Price `request` under `plan`: a pipelined step part by part, and what a request pays once."""
    m, p, patches = request.model, plan.pipefusion, plan.patches
    stage = _stage(request, plan, pricing, patches, math.ceil(m.blocks / p))
    exposed_hop = max(0.0, stage.hop - stage.busy)
    slot = stage.busy + exposed_hop
    parts = {
        "dispatch": patches * stage.dispatch,
        "gemm": patches * stage.gemm,
        "elementwise": patches * stage.elementwise,
        "attention": patches * stage.attention,
        "ulysses_all_to_all": patches * stage.ulysses,
        "ring_p2p": patches * stage.ring,
        "tensor_all_reduce": patches * stage.tensor,
        "pipefusion_p2p": patches * exposed_hop,
        "pipeline_bubble": max(0, p - patches) * slot,
        "cfg_all_gather": 0.0,
    }
    if plan.cfg > 1:
        latent = request.tokens * m.latent_channels * math.prod(m.patch) * BYTES_PER_PARAM
        group = min(plan.groups("cfg"), key=pricing.topology.bandwidth)
        parts["cfg_all_gather"] = pricing.all_gather_s(latent, group)
    hidden = {"ring_p2p": patches * stage.ring_hidden, "pipefusion_p2p": patches * min(stage.hop, stage.busy)}
    outside = m.outside_s(request.height, request.width, request.frames)
    once = {"warmup": 0.0, "pipeline_fill": 0.0, "outside": outside}
    warmup = min(PIPEFUSION_WARMUP_STEPS, request.steps) if p > 1 else 0
    if p > 1:
        whole = _stage(request, plan, pricing, 1, m.blocks / p)  # one stage's share of the whole image
        once["warmup"] = warmup * (p * (whole.busy + whole.hop) + parts["cfg_all_gather"])
        once["pipeline_fill"] = (p - 1) * slot if request.steps > warmup else 0.0
    return StepCost(plan, parts, hidden, once, request.steps, warmup, memory(request, plan))


def ranked(request: Request, gpus: Sequence[int], pricing: Pricing) -> list[StepCost]:
    """Every valid plan on these GPUs, priced, fastest end to end first (the exhaustive optimum first)."""
    costs = [step_cost(request, plan, pricing) for plan in plans(request, gpus, pricing)]
    return sorted(costs, key=lambda c: (c.total_s, c.plan.label))
