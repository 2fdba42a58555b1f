"""Diffusion Transformers with their real shapes, and how many tokens a resolution and frame count make.

Every figure is read from the model's public configuration (the file named next to it); no code is taken
from those projects. A "block" here is one attention block: Flux's and HunyuanVideo's double-stream blocks
(separate weights for text and image tokens) and their single-stream blocks both cost 12 x hidden^2
multiply-accumulates per token (qkv 3h^2, output h^2, MLP 2 x h x 4h), so they are counted alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from targets.base import WorkloadError

BYTES_PER_PARAM = 2
"""Weights and activations in bfloat16, as every model below is served."""


@dataclass(frozen=True)
class DiTModel:
    """One DiT's shapes: what the cost model needs to price a denoising step and its communication."""

    name: str
    blocks: int
    hidden: int
    heads: int
    head_dim: int
    mlp: int
    """Hidden width of the MLP."""
    patch: tuple[int, int, int]
    """Patch size in latent frames, latent rows and latent columns."""
    vae_temporal: int
    """Video frames per latent frame (1 for image models)."""
    vae_spatial: int
    """Pixels per latent row and column."""
    latent_channels: int
    text_tokens: int
    text: Literal["joint", "cross"]
    """"joint": text tokens join the image sequence in every attention; "cross": image tokens cross-attend
    to them."""
    cfg: bool
    """Classifier-free guidance runs the model twice per step (with and without the prompt)."""
    params: float
    """Parameters of the transformer, as its model card states them."""
    video: bool
    source: str
    default: tuple[int, int, int, int]
    """Height, width, frames, steps the model card generates at."""
    outside_s_per_pixel_frame: float | None = None
    """Seconds per output pixel and frame the generation spends outside the transformer (text encoders,
    VAE decoding), which no plan divides; None where no measurement ships (then priced as nothing)."""
    attention: Literal["softmax", "linear"] = "softmax"
    """"linear": ReLU linear attention (SANA), a d x d key-value state per head instead of a score matrix."""
    gated_mlp: bool = False
    """The MLP's first projection is gated (two halves of `mlp` width, SANA's GLU Mix-FFN)."""
    depthwise_kernel: int = 0
    """Mix-FFN: a depthwise k x k convolution over the MLP's gated input between its two projections (SANA's
    GLUMBConv: k = 3); 0 for a plain MLP."""
    skips: int = 0
    """Long skip connections: block i's output also feeds block `blocks - 1 - i` (HunyuanDiT)."""
    modulated: bool = True
    """adaLN: the attention and the MLP each scale and shift their normed input and gate their output by
    the timestep's embedding before the residual add (every model here but HunyuanDiT)."""
    qk_norm: bool = False
    """Queries and keys are normalized per head before attention (the config's qk_norm)."""
    rope: bool = False
    """Rotary position embedding applied to queries and keys in every attention."""
    side_attention: tuple[int, int, int, int] | None = None
    """A cross-attention after every `interval`-th block to a few conditioning tokens, as (interval, heads,
    head dim, tokens): ConsisID's PerceiverCrossAttention to its face tokens."""

    @property
    def weight_bytes(self) -> float:
        return self.params * BYTES_PER_PARAM

    def outside_s(self, height: int, width: int, frames: int = 1) -> float:
        """Seconds of one generation outside the transformer: the VAE decodes every pixel of every frame."""
        return (self.outside_s_per_pixel_frame or 0.0) * height * width * frames

    def latent_frames(self, frames: int) -> int:
        """Latent frames of a clip: the first frame alone, then one per `vae_temporal` frames, padded up to
        a whole number of temporal patches as the CogVideoX1.5 pipeline pads them."""
        if not self.video:
            if frames != 1:
                raise WorkloadError(f"{self.name} makes images: frames must be 1, got {frames}")
            return 1
        if frames < 1 or (frames - 1) % self.vae_temporal:
            raise WorkloadError(
                f"{self.name}: frames must be 1 + a multiple of {self.vae_temporal} (e.g. "
                f"{self.default[2]}), got {frames}"
            )
        latent = (frames - 1) // self.vae_temporal + 1
        return -(-latent // self.patch[0]) * self.patch[0]  # padded to whole temporal patches (CogVideoX1.5)

    def grid(self, height: int, width: int, frames: int) -> tuple[int, int, int]:
        """Tokens along time, rows and columns; WorkloadError if the size does not patch evenly."""
        pt, ph, pw = self.patch
        step_h, step_w = self.vae_spatial * ph, self.vae_spatial * pw
        if height < step_h or width < step_w or height % step_h or width % step_w:
            raise WorkloadError(
                f"{self.name}: {height}x{width} does not patch evenly; height must be a multiple of {step_h} "
                f"and width of {step_w} pixels"
            )
        return self.latent_frames(frames) // pt, height // step_h, width // step_w

    def image_tokens(self, height: int, width: int, frames: int = 1) -> int:
        """Tokens of the latent a request denoises."""
        t, h, w = self.grid(height, width, frames)
        return t * h * w

    def sequence(self, height: int, width: int, frames: int = 1) -> int:
        """Tokens of one self-attention: the image tokens, and the text tokens where they join it."""
        joint = self.text_tokens if self.text == "joint" else 0
        return self.image_tokens(height, width, frames) + joint


HUNYUANVIDEO_960_H100_ULYSSES_S = {2: 934.09, 6: 367.02}
"""xDiT docs/performance/hunyuanvideo.md: HunyuanVideo 960x960, 129 frames, 50 steps, Ulysses on 2 and 6 H100s
(s), end to end in the official repository, which divides only the transformer among the GPUs (its
hyvideo/inference.py wraps the transformer alone; every rank encodes the prompt and decodes the whole
video)."""


def undivided_s(times: dict[int, float]) -> float:
    """F of T(n) = F + W / n, the part no GPU count divides, from counts a < b: (b T_b - a T_a) / (b - a)."""
    (a, t_a), (b, t_b) = sorted(times.items())
    return (b * t_b - a * t_a) / (b - a)


HUNYUANVIDEO_OUTSIDE_S_PER_PIXEL_FRAME = undivided_s(HUNYUANVIDEO_960_H100_ULYSSES_S) / (960 * 960 * 129)
"""83.5 s over 960 x 960 x 129 pixel-frames. Not scaled off H100: xDiT's H20 rows in the same file give 121 s
(720p, 2 and 8 GPUs) and 119 s (960 px, 3 and 6) by the same formula, no longer than on H100 with under a
sixth of its tensor throughput (H20 datasheet: 148 TFLOPS dense BF16): tensor throughput does not set it."""

MODELS: dict[str, DiTModel] = {
    m.name: m
    for m in (
        # black-forest-labs/FLUX.1-dev transformer/config.json: num_layers 19 (double-stream) +
        # num_single_layers 38, num_attention_heads 24 x attention_head_dim 128, MLP ratio 4, latents packed
        # 2x2 (in_channels 64 = 16 channels x 4), VAE 8x; T5 max_sequence_length 512 in the dev pipeline;
        # guidance_embeds true (guidance distilled, no CFG pass). Model card: 12 billion parameters.
        # diffusers FluxTransformer2DModel: RMS qk-norm, rotary embedding, adaLN in every block.
        DiTModel("flux.1-dev", 57, 3072, 24, 128, 12288, (1, 2, 2), 1, 8, 16, 512, "joint", False, 12e9,
                 False, "black-forest-labs/FLUX.1-dev transformer/config.json", (1024, 1024, 1, 28),
                 qk_norm=True, rope=True),
        # black-forest-labs/FLUX.1-schnell transformer/config.json: Flux.1-dev's transformer (19 + 38
        # blocks, 24 x 128 heads), guidance_embeds false; 256 T5 tokens (the pipeline's max_sequence_length
        # for schnell); 4 steps on the model card.
        DiTModel("flux.1-schnell", 57, 3072, 24, 128, 12288, (1, 2, 2), 1, 8, 16, 256, "joint", False, 12e9,
                 False, "black-forest-labs/FLUX.1-schnell transformer/config.json", (1024, 1024, 1, 4),
                 qk_norm=True, rope=True),
        # stabilityai/stable-diffusion-3-medium-diffusers transformer/config.json: num_layers 24,
        # num_attention_heads 24 x attention_head_dim 64, patch_size 2, in_channels 16, VAE 8x; joint text
        # of 77 CLIP + 256 T5 tokens (the pipeline's max_sequence_length); CFG. Model card: 2B parameters.
        # qk_norm null, absolute position embedding (no rotary); adaLN.
        DiTModel("sd3-medium", 24, 1536, 24, 64, 6144, (1, 2, 2), 1, 8, 16, 333, "joint", True, 2e9,
                 False, "stabilityai/stable-diffusion-3-medium-diffusers transformer/config.json",
                 (1024, 1024, 1, 28)),
        # PixArt-alpha/PixArt-Sigma-XL-2-1024-MS transformer/config.json: num_layers 28,
        # num_attention_heads 16 x attention_head_dim 72, patch_size 2, in_channels 4 (SDXL VAE, 8x),
        # cross-attention to 300 T5 tokens; CFG. Paper: 0.6B parameters. adaLN-single, no qk-norm, no rotary.
        DiTModel("pixart-sigma", 28, 1152, 16, 72, 4608, (1, 2, 2), 1, 8, 4, 300, "cross", True, 0.6e9,
                 False, "PixArt-alpha/PixArt-Sigma-XL-2-1024-MS transformer/config.json",
                 (1024, 1024, 1, 20)),
        # Tencent-Hunyuan/HunyuanDiT-v1.2-Diffusers transformer/config.json: num_layers 40,
        # num_attention_heads 16 x attention_head_dim 88, mlp_ratio 4.3637 (6144), patch_size 2,
        # in_channels 4, VAE 8x, cross-attention to 77 CLIP + 256 T5 tokens; CFG. Model card: 1.5B.
        # Long skips as diffusers' HunyuanDiT2DModel.forward wires them: blocks 0-18 each feed block 39 - i.
        # HunyuanDiTBlock: a shift-only adaptive norm and no gates, LayerNorm qk-norm, 2D rotary embedding.
        DiTModel("hunyuandit", 40, 1408, 16, 88, 6144, (1, 2, 2), 1, 8, 4, 333, "cross", True, 1.5e9,
                 False, "Tencent-Hunyuan/HunyuanDiT-v1.2-Diffusers transformer/config.json",
                 (1024, 1024, 1, 50), skips=19, modulated=False, qk_norm=True, rope=True),
        # Efficient-Large-Model/Sana_1600M_4Kpx_BF16_diffusers transformer/config.json: num_layers 20,
        # num_attention_heads 70 x attention_head_dim 32 (linear attention), cross-attention 20 x 112 to 300
        # Gemma tokens, mlp_ratio 2.5 (a gated Mix-FFN: 2 x 5600 up, a depthwise 3x3 conv, 5600 down),
        # patch_size 1, in_channels 32 of the DC-AE (32x spatial); CFG. Model card: 1.6B parameters.
        # NVlabs/Sana configs/sana_config/4096ms/Sana_1600M_img4096_bf16.yaml: qk_norm false, use_pe (an
        # absolute position embedding, no rotary), fp32_attention true; adaLN-single.
        DiTModel("sana-1600m", 20, 2240, 70, 32, 5600, (1, 1, 1), 1, 32, 32, 300, "cross", True, 1.6e9,
                 False, "Efficient-Large-Model/Sana_1600M_4Kpx_BF16_diffusers transformer/config.json",
                 (4096, 4096, 1, 20), attention="linear", gated_mlp=True, depthwise_kernel=3),
        # tencent/HunyuanVideo (diffusers transformer/config.json): num_layers 20 (double-stream) +
        # num_single_layers 40, num_attention_heads 24 x attention_head_dim 128, mlp_ratio 4, patch_size 2,
        # patch_size_t 1, in_channels 16; 3D VAE 4x in time, 8x in space; 256 text tokens (text_len);
        # guidance_embeds true (no CFG pass). Paper: 13 billion parameters.
        # qk_norm rms_norm, rotary embedding, adaLN (modulate, apply_gate) in every block.
        DiTModel("hunyuanvideo", 60, 3072, 24, 128, 12288, (1, 2, 2), 4, 8, 16, 256, "joint", False, 13e9,
                 True, "tencent/HunyuanVideo transformer/config.json", (720, 1280, 129, 50),
                 HUNYUANVIDEO_OUTSIDE_S_PER_PIXEL_FRAME, qk_norm=True, rope=True),
        # THUDM/CogVideoX-5b transformer/config.json: num_layers 42, num_attention_heads 48 x
        # attention_head_dim 64, patch_size 2, in_channels 16, max_text_seq_length 226 (joint), VAE 4x in
        # time (temporal_compression_ratio) and 8x in space; CFG. Model card: 5B parameters.
        # use_rotary_positional_embeddings true; CogVideoXBlock: LayerNorm qk-norm, CogVideoXLayerNormZero.
        DiTModel("cogvideox-5b", 42, 3072, 48, 64, 12288, (1, 2, 2), 4, 8, 16, 226, "joint", True, 5e9,
                 True, "THUDM/CogVideoX-5b transformer/config.json", (480, 720, 49, 50), qk_norm=True,
                 rope=True),
        # THUDM/CogVideoX-2b transformer/config.json: num_layers 30, num_attention_heads 30 x
        # attention_head_dim 64, patch_size 2, in_channels 16, max_text_seq_length 226 (joint); CFG.
        # use_rotary_positional_embeddings false (3D sincos); LayerNorm qk-norm.
        DiTModel("cogvideox-2b", 30, 1920, 30, 64, 7680, (1, 2, 2), 4, 8, 16, 226, "joint", True, 2e9,
                 True, "THUDM/CogVideoX-2b transformer/config.json", (480, 720, 49, 50), qk_norm=True),
        # THUDM/CogVideoX1.5-5B transformer/config.json: CogVideoX-5b's 42 blocks of 48 x 64 heads with
        # patch_size_t 2 (two latent frames per token; the pipeline pads odd latent frames); CFG.
        DiTModel("cogvideox1.5-5b", 42, 3072, 48, 64, 12288, (2, 2, 2), 4, 8, 16, 226, "joint", True, 5e9,
                 True, "THUDM/CogVideoX1.5-5B transformer/config.json", (768, 1360, 81, 50), qk_norm=True,
                 rope=True),
        # BestWishYsh/ConsisID-preview transformer/config.json: CogVideoX-5B's image-to-video transformer
        # (42 blocks, 48 x 64 heads, patch 2, 16 latent channels out); is_train_face: after every
        # cross_attn_interval = 2 blocks a PerceiverCrossAttention (cross_attn_num_heads 16 x
        # cross_attn_dim_head 128) from the video tokens to LFE_num_querie = 32 face tokens (diffusers
        # ConsisIDTransformer3DModel); use_rotary_positional_embeddings and LayerNorm qk-norm as CogVideoX-5B;
        # CFG (guidance 6.0 in xDiT's examples/run_consisid.sh).
        DiTModel("consisid", 42, 3072, 48, 64, 12288, (1, 2, 2), 4, 8, 16, 226, "joint", True, 5e9,
                 True, "BestWishYsh/ConsisID-preview transformer/config.json", (480, 720, 49, 50),
                 qk_norm=True, rope=True, side_attention=(2, 16, 128, 32)),
        # Wan-AI/Wan2.1-T2V-14B config.json: num_layers 40, dim 5120, num_heads 40 (head dim 128),
        # ffn_dim 13824, patch_size (1, 2, 2), in_dim 16; Wan-VAE 4x in time, 8x in space; cross-attention
        # to 512 umT5 tokens (text_len); CFG (sample_guide_scale 5.0). Model card: 14B parameters.
        # qk_norm true, rotary embedding, adaLN modulation.
        DiTModel("wan2.1-14b", 40, 5120, 40, 128, 13824, (1, 2, 2), 4, 8, 16, 512, "cross", True, 14e9,
                 True, "Wan-AI/Wan2.1-T2V-14B config.json", (720, 1280, 81, 50), qk_norm=True, rope=True),
    )
}  # fmt: skip


def model(name: str) -> DiTModel:
    """The model called `name`; WorkloadError names the known ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise WorkloadError(f"unknown model {name!r}; models: {', '.join(MODELS)}") from None
