"""kernels.cutile.limits: the grids and int32 indexing of a forward's launches, on meta tensors."""

from __future__ import annotations

import pytest

from harness.inputs import meta_inputs
from harness.problem import Problem
from kernels.cutile.config import inputs_default_config
from kernels.cutile.limits import launch_limit_reason


def _reason(problem: Problem) -> str | None:
    kwargs = meta_inputs(problem).kwargs()
    return launch_limit_reason(kwargs, inputs_default_config(kwargs), sms=132)


def test_the_default_sweeps_largest_point_launches() -> None:
    assert _reason(Problem(seqlen=65536, nheads=128, dstate=256)) is None
    # batch 1: a size-1 axis's stride of 2³¹ is never used
    assert _reason(Problem(seqlen=1 << 20, nheads=8, dstate=64, chunk_size=32)) is None


@pytest.mark.parametrize(
    ("problem", "named"),
    [
        (
            Problem(seqlen=1 << 20, nheads=8, dstate=64, chunk_size=16),
            "compute_out_kernel's grid (8, 65536, 1) passes CUDA's limits",
        ),
        (
            Problem(batch=70000, seqlen=64, nheads=2, headdim=8, dstate=16, chunk_size=16),
            "chunk_cumsum_kernel's grid (4, 1, 70000) passes CUDA's limits",
        ),
        (
            Problem(batch=2, seqlen=1 << 18, nheads=64, dstate=128, chunk_size=64),
            "fwd_pass_state_kernel would index a tensor of shape (2, 4096, 64, 64, 128)",
        ),
    ],
)
def test_what_cannot_launch_is_named_with_its_kernel(problem: Problem, named: str) -> None:
    reason = _reason(problem)
    assert reason is not None and reason.startswith(named)
