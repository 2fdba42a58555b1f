"""A DiT block run sequence-parallel for real (Ulysses all-to-all, ring attention, their hybrid over gloo
between local processes) gives the single-process block's output."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from targets.dit.block import BlockShape, run_parallel, run_single  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]

SHAPE = BlockShape(hidden=256, heads=8, mlp=1024, tokens=512)
TOLERANCE = 1e-5
"""Largest absolute difference allowed, in float32, for outputs of magnitude ~6: the ring merges partial
softmaxes through their log-sum-exp and the all-to-alls only move data, so they differ from one process by
rounding alone (measured: at most 1.5e-6)."""


@pytest.mark.parametrize(
    "layouts", [[(2, 1), (1, 2)], [(4, 1), (1, 4), (2, 2)]], ids=["2-processes", "4-processes"]
)
def test_sequence_parallel_block_equals_the_single_process_block(layouts: list[tuple[int, int]]) -> None:
    reference, _ = run_single(SHAPE)
    for (ulysses, ring), (output, _) in run_parallel(SHAPE, layouts).items():
        assert output.shape == reference.shape
        difference = float((output - reference).abs().max())
        assert difference <= TOLERANCE, f"ulysses {ulysses} x ring {ring}: {difference}"


def test_a_layout_that_does_not_split_the_heads_is_refused() -> None:
    with pytest.raises(ValueError, match="must use one process count"):
        run_parallel(BlockShape(hidden=96, heads=3, mlp=64, tokens=12), [(2, 1)])
