"""Models and topologies: real shapes, token counts, subsets of GPUs, and bad sizes refused in one line."""

from __future__ import annotations

import pytest

from targets.base import WorkloadError
from targets.dit.models import MODELS, model
from targets.dit.topology import TOPOLOGIES, topology


def test_the_models_named_by_the_issue_and_the_published_tables_are_all_there() -> None:
    named = ("flux.1-dev", "sd3-medium", "pixart-sigma", "hunyuandit", "hunyuanvideo", "cogvideox-5b")
    measured = ("flux.1-schnell", "sana-1600m", "cogvideox-2b", "cogvideox1.5-5b", "consisid")
    assert set(MODELS) == {*named, *measured, "wan2.1-14b"}
    for m in MODELS.values():
        assert m.hidden == m.heads * m.head_dim, m.name
        assert m.source.endswith("config.json")


def test_cogvideox_1_5_pads_odd_latent_frames_to_whole_temporal_patches() -> None:
    # 161 frames: 41 latent frames, padded to 42 = 21 patches of 2; 768 x 1360 is 48 x 85 patches.
    assert model("cogvideox1.5-5b").grid(768, 1360, 161) == (21, 48, 85)


def test_flux_at_1024px_is_4096_image_tokens_and_512_text_tokens() -> None:
    flux = model("flux.1-dev")
    assert flux.image_tokens(1024, 1024) == (1024 // 16) ** 2 == 4096
    assert flux.sequence(1024, 1024) == 4096 + 512


def test_hunyuanvideo_720p_129_frames_is_33_latent_frames_of_45x80_patches() -> None:
    video = model("hunyuanvideo")
    assert video.grid(720, 1280, 129) == (33, 45, 80)
    assert video.image_tokens(720, 1280, 129) == 118_800


def test_cross_attention_models_keep_text_out_of_the_sequence() -> None:
    wan = model("wan2.1-14b")
    assert wan.sequence(720, 1280, 81) == wan.image_tokens(720, 1280, 81) == 21 * 45 * 80


@pytest.mark.parametrize(
    ("name", "size", "message"),
    [
        ("flux.1-dev", (1000, 1024, 1), "does not patch evenly; height must be a multiple of 16"),
        ("hunyuanvideo", (720, 1280, 128), "frames must be 1 \\+ a multiple of 4"),
        ("sd3-medium", (1024, 1024, 5), "makes images: frames must be 1"),
    ],
)
def test_a_size_that_does_not_patch_evenly_is_one_line(
    name: str, size: tuple[int, int, int], message: str
) -> None:
    with pytest.raises(WorkloadError, match=message):
        model(name).grid(*size)


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(WorkloadError, match=r"unknown model 'flux'; models: flux\.1-dev"):
        model("flux")
    with pytest.raises(WorkloadError, match="unknown topology 'dgx'; topologies: h100-nvlink"):
        topology("dgx")


def test_nvlink_groups_run_at_the_nvlink_rate_and_cross_socket_pcie_groups_share_upi() -> None:
    h100, l40 = TOPOLOGIES["h100-nvlink"], TOPOLOGIES["l40-pcie"]
    assert h100.bandwidth(range(8)) == 450e9  # 900 GB/s bidirectional per GPU
    assert l40.bandwidth(range(4)) == 32e9  # one socket's PCIe Gen4 x16
    assert l40.bandwidth(range(8)) == pytest.approx(22.4e9 / 4)  # 4 GPUs behind one UPI link
    assert l40.span(range(8)) == "UPI (cross-socket)" and l40.span(range(4)) == "PCIe Gen4 x16"


def test_groups_across_nodes_share_the_network() -> None:
    two = TOPOLOGIES["h100-nvlink-x2"]
    assert two.gpus == 16
    assert two.bandwidth([0, 8]) == 50e9 and two.bandwidth([0, 1, 8, 9]) == 25e9
    with pytest.raises(WorkloadError, match="has 16 GPUs; cannot use 17"):
        two.check_gpus(17)
