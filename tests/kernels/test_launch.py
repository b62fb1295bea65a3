"""kernels/cutile/launch.py: which kernels of the forward launch as programmatic dependents, on the
CPU (the launches are recorded, not run)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("cuda.tile")
from kernels.cutile import fwd_pass_state, launch  # noqa: E402
from kernels.cutile.chunk_cumsum import chunk_cumsum  # noqa: E402
from kernels.cutile.compute_out import compute_out  # noqa: E402
from kernels.cutile.config import SSDConfig  # noqa: E402


@pytest.fixture
def launches(monkeypatch) -> list[tuple[str, bool]]:
    """(kernel function name, launched as a programmatic dependent) of every launch, in order."""
    recorded: list[tuple[str, bool]] = []

    def record(stream, grid, kernel, args, programmatic_dependent_launch):
        recorded.append((kernel._pyfunc.__name__, programmatic_dependent_launch))

    monkeypatch.setattr(launch.ct, "launch", record)
    monkeypatch.setattr(launch.torch.cuda, "current_stream", lambda: None)
    monkeypatch.setattr(fwd_pass_state, "_sm_count", lambda device: 132)
    return recorded


def _forward(config: SSDConfig) -> None:
    """The wrappers in the order ssd_forward calls them, on CPU tensors (64 heads, dstate 64, 8
    chunks: the walk is split, so segment_scan runs)."""
    b, seqlen, h, p, n = 1, 1024, 64, 64, 64
    x = torch.zeros(b, seqlen, h, p, dtype=torch.bfloat16)
    B = C = torch.zeros(b, seqlen, 1, n, dtype=torch.bfloat16)
    dt_out, dA = chunk_cumsum(torch.zeros(b, seqlen, h), torch.zeros(h), None, 128, True, (0, 1))
    state_pass = fwd_pass_state.fwd_pass_state(x, B, dt_out, dA, None, config)
    compute_out(x, B, C, state_pass, dt_out, dA, None, None, config)


def test_the_walk_its_scan_and_chunk_cb_follow_as_dependents_and_compute_out_plainly(
    launches,
) -> None:
    _forward(SSDConfig(state_segments=2, out_cb=1))
    assert launches == [
        ("chunk_cumsum_kernel", False),
        ("fwd_pass_state_kernel", True),
        ("segment_scan_kernel", True),
        ("chunk_cb_kernel", True),
        ("compute_out_kernel", False),
    ]


def test_dependent_launch_off_launches_everything_plainly(launches) -> None:
    _forward(SSDConfig(state_segments=2, out_cb=1, dependent_launch=0))
    assert [name for name, _ in launches][1:3] == ["fwd_pass_state_kernel", "segment_scan_kernel"]
    assert not any(dependent for _, dependent in launches)
