"""fwd_pass_state's choice of segments, on the CPU (the SM count is faked)."""

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
