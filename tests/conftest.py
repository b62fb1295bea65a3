"""Test-session setup: Triton's interpreter on machines without a CUDA GPU, `gpu` test skips
there and `interpreter` test skips on machines with one, where mamba_ssm runs deterministic.

pytest imports this before any test module, hence before triton: Triton decides at import time
whether @triton.jit builds interpreted functions, so TRITON_INTERPRET must be set here.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch  # does not import triton (checked with torch 2.13 CPU), so the flag below still counts

HAS_CUDA_GPU = torch.cuda.is_available()

if HAS_CUDA_GPU:
    # mamba_ssm's deterministic mode for every GPU test, whichever files are selected: one Triton
    # config per kernel instead of autotuning each of test_cutile_gpu.py's many shapes (16-27 s
    # each). mamba_ssm reads it when its Triton modules are imported, once per process, so a
    # test module that set it would decide for every test after its collection (the restored-picks
    # test failed so in the full GPU suite at 19c2faa). In the forward kernels it changes only the
    # config lists, not the arithmetic; tests that need autotuning give a kernel two configs.
    os.environ.setdefault("MAMBA_DETERMINISTIC", "1")
else:
    if "triton" in sys.modules and "TRITON_INTERPRET" not in os.environ:
        raise RuntimeError("triton was imported before conftest.py could set TRITON_INTERPRET")
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _selects_gpu_tests(markexpr: str) -> bool:
    """Whether `-m` asks for the gpu tests (`gpu`, `gpu and not slow`; not `not gpu`)."""
    words = markexpr.replace("(", " ").replace(")", " ").split()
    return any(w == "gpu" and (i == 0 or words[i - 1] != "not") for i, w in enumerate(words))


def pytest_configure(config: pytest.Config) -> None:
    """On a GPU machine, refuse allocator settings that defeat the poisoned pool: the allocator
    reads them once, before any test could unset them (the fixture below does so only for the
    config checks), so every GPU check would run under them."""
    from harness.environment import allocator_conflict

    if HAS_CUDA_GPU and (conflict := allocator_conflict()):
        raise pytest.UsageError(f"the GPU tests: {conflict}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without a GPU the `gpu` tests are skipped; with one, the `interpreter` tests (Triton then
    compiles for the GPU and refuses their CPU tensors; test_matches_reference_on_gpu covers it)."""
    if HAS_CUDA_GPU:
        skip, reason = "interpreter", "runs Triton's interpreter, which a GPU machine does not use"
    elif _selects_gpu_tests(config.option.markexpr):
        raise pytest.UsageError(
            "-m gpu, but torch sees no CUDA GPU here (a CPU build of torch, CUDA_VISIBLE_DEVICES "
            "empty, or a driver mismatch): the GPU tests would all be skipped"
        )
    else:
        skip, reason = "gpu", "needs a CUDA GPU (run pytest -m gpu on a GPU node)"
    for item in items:
        if skip in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _default_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    """The caching allocator as the harness needs it (environment.allocator_conflict): a CPU
    machine exporting, say, expandable_segments must not fail every test that validates a config
    (a GPU machine refuses them in pytest_configure)."""
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        monkeypatch.delenv(name, raising=False)
