"""harness.correctness: the relative error, NaN handling and the tolerance table."""

from __future__ import annotations

import math

import pytest
import torch

from harness import correctness


def test_relative_error_is_the_l2_ratio_in_float64() -> None:
    ref = torch.tensor([3.0, 4.0], dtype=torch.float64)
    out = torch.tensor([3.0, 4.5], dtype=torch.bfloat16)
    assert correctness.relative_error(out, ref) == pytest.approx(0.5 / 5.0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_or_inf_never_passes(bad: float) -> None:
    out = torch.tensor([1.0, bad])
    err = correctness.relative_error(out, torch.tensor([1.0, 1.0]))
    assert math.isnan(err)
    assert not any(correctness.passes(err, dtype) for dtype in correctness.TOLERANCE)


def test_shape_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="shape mismatch"):
        correctness.relative_error(torch.zeros(2), torch.zeros(3))


def test_zero_reference_falls_back_to_the_absolute_error() -> None:
    assert correctness.relative_error(torch.ones(4), torch.zeros(4)) == pytest.approx(2.0)


def test_tolerances_order_by_precision() -> None:
    tol = correctness.TOLERANCE
    assert set(tol) == {"float32", "float16", "bfloat16"}
    assert tol["float16"] < tol["bfloat16"] and tol["float32"] < tol["bfloat16"]
    assert correctness.passes(tol["bfloat16"], "bfloat16")
    assert not correctness.passes(tol["bfloat16"] * 1.01, "bfloat16")
