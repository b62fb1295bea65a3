"""fwd_pass_state's choice of segments, and of the CTAs that compute C·Bᵀ beside the walk, on the
CPU (the SM count is faked)."""

from __future__ import annotations

import pytest

pytest.importorskip("cuda.tile")
from kernels.cutile import fwd_pass_state  # noqa: E402


@pytest.fixture(autouse=True)
def h200_sms(monkeypatch) -> None:
    monkeypatch.setattr(fwd_pass_state, "sm_count", lambda device: 132)


@pytest.mark.parametrize(
    ("nchunks", "walkers", "segments"),
    [
        (4, 32, 4),  # L=1K, 32 heads: one chunk per segment, one walker per SM at most
        (8, 32, 4),  # L=2K: two chunks per segment
        (16, 32, 4),  # L=4K: 4 chunks per segment (more segments lost 14 % there)
        (4, 128, 1),  # 128 walkers already fill the SMs at L=1K
        (8, 128, 2),  # then 4 chunks per segment
        (512, 32, 8),  # L=64K: one wave of 2 walkers per SM (256 of 264), 8 segments of 64
        (512, 128, 2),  # not 5 segments: 640 walkers would run in 3 waves
        (256, 1024, 1),
    ],
)
def test_auto_segments_fill_one_wave(nchunks: int, walkers: int, segments: int) -> None:
    got, seg_len = fwd_pass_state._segments(0, nchunks, walkers, 2, device=None)
    assert got == segments
    assert (got - 1) * seg_len < nchunks <= got * seg_len


def test_an_automatic_occupancy_counts_as_one_walker_per_sm() -> None:
    assert fwd_pass_state._segments(0, 512, 32, 0, device=None) == (4, 128)
    assert fwd_pass_state._segments(0, 512, 32, 1, device=None) == (4, 128)


def test_requested_segments_are_clamped_to_the_chunks() -> None:
    assert fwd_pass_state._segments(3, 6, 32, 2, device=None) == (3, 2)
    assert fwd_pass_state._segments(8, 4, 32, 2, device=None) == (4, 1)
    assert fwd_pass_state._segments(1, 256, 32, 2, device=None) == (1, 256)


def _beside(config, batch: int = 1, nheads: int = 128, ngroups: int = 1, dstate: int = 256) -> int:
    from kernels.cutile.config import SSDConfig

    config = SSDConfig(**config)
    walk = fwd_pass_state.walk_layout(
        config, (batch, 8192, nheads, 64), (batch, 8192, ngroups, dstate), 128, None
    )
    return fwd_pass_state.cb_ctas_beside(config, walk)


ONE_PER_SM = {"state_cb": 1, "state_segments": 1, "state_occupancy": 1, "state_block_n": 256,
              "out_cb": 1}  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "ctas"),
    [
        ({}, 4),  # 128 walkers one per SM leave 4 of 132 SMs
        ({"nheads": 124}, 8),
        ({"ngroups": 2}, 4),  # two per group still
        ({"ngroups": 4}, 0),  # one per group would take a walk's time per chunk
        ({"batch": 2, "nheads": 64}, 2),  # per batch entry
        ({"nheads": 132}, 0),  # no SM free
    ],
)
def test_c_b_beside_the_walk_takes_the_sms_its_wave_leaves(changes: dict, ctas: int) -> None:
    assert _beside(ONE_PER_SM, **changes) == ctas


@pytest.mark.parametrize(
    "config",
    [{"state_cb": 0}, {"out_cb": 0}, {"state_segments": 2}, {"state_block_n": 128},
     {"out_chunk_heads": 8}],
    ids=["off", "compute-out-computes-it", "segments", "two-state-blocks", "chunk-kernel"],
)  # fmt: skip
def test_no_c_b_beside_the_walk_otherwise(config: dict) -> None:
    """Only where compute_out's row-block kernel reads C·Bᵀ, after a walk of one segment of
    whole-state walkers that leave SMs free."""
    assert _beside({**ONE_PER_SM, **config}) == 0
