"""tests/conftest.py: which `-m` expressions ask for the GPU tests (refused without a GPU), and the
allocator settings a GPU machine refuses."""

from __future__ import annotations

import pytest

from tests import conftest
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


@pytest.mark.parametrize("has_gpu", [True, False])
def test_gpu_machine_refuses_allocator_settings_before_any_test(
    monkeypatch: pytest.MonkeyPatch, has_gpu: bool
) -> None:
    """The allocator reads its settings once, so a GPU machine exporting expandable segments would
    run every GPU check under them; a CPU machine only validates configs, with them unset."""
    monkeypatch.setattr(conftest, "HAS_CUDA_GPU", has_gpu)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    if has_gpu:
        with pytest.raises(pytest.UsageError, match="expandable_segments .* unset it"):
            conftest.pytest_configure(None)
    else:
        conftest.pytest_configure(None)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    monkeypatch.setattr(conftest, "HAS_CUDA_GPU", True)
    conftest.pytest_configure(None)
