"""kernels.cutile.ssd's input checks on the CPU: what is refused before anything is launched."""

from __future__ import annotations

import pytest
import torch

from kernels.cutile.ssd import _check_inputs


def _inputs(b=1, seqlen=64, h=4, p=16, g=1, n=16) -> dict:
    return {
        "x": torch.empty(b, seqlen, h, p),
        "dt": torch.empty(b, seqlen, h),
        "A": torch.empty(h),
        "B": torch.empty(b, seqlen, g, n),
        "C": torch.empty(b, seqlen, g, n),
        "chunk_size": 16,
        "D": None,
        "z": None,
        "dt_bias": None,
        "initial_states": None,
    }


@pytest.mark.parametrize(
    ("sizes", "named"),
    [
        ({"b": 0}, "batch must be at least 1, got 0"),
        ({"seqlen": 0}, "seqlen must be at least 1"),
        ({"h": 0}, "nheads must be at least 1"),
        ({"g": 0}, "ngroups must be at least 1"),
        ({"n": 0}, "dstate must be at least 1"),
    ],
)
def test_empty_sizes_are_refused_by_name(sizes: dict, named: str) -> None:
    """Not a ZeroDivisionError, nor a launch of an empty grid after others ran."""
    with pytest.raises(ValueError, match=named):
        _check_inputs(**_inputs(**sizes))


@pytest.mark.parametrize("chunk_size", [64.0, True, "64"])
def test_chunk_size_must_be_an_int(chunk_size) -> None:
    with pytest.raises(ValueError, match="chunk_size must be an int"):
        _check_inputs(**{**_inputs(), "chunk_size": chunk_size})


def test_sound_inputs_on_the_cpu_fail_only_for_their_device() -> None:
    with pytest.raises(ValueError, match="must be CUDA tensors"):
        _check_inputs(**_inputs())
