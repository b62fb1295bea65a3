"""tests/conftest.py: which `-m` expressions ask for the GPU tests (refused without a GPU)."""

from __future__ import annotations

import pytest

from tests.conftest import _selects_gpu_tests


@pytest.mark.parametrize(
    ("markexpr", "selects"),
    [
        ("gpu", True),
        ("gpu and not slow", True),
        ("(gpu or slow)", True),
        ("not gpu", False),
        ("slow", False),
        ("", False),
    ],
)
def test_gpu_selection(markexpr: str, selects: bool) -> None:
    assert _selects_gpu_tests(markexpr) is selects
