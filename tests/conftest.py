"""Test-session setup: Triton's interpreter on machines without a CUDA GPU, `gpu` test skips, and
mamba_ssm's deterministic mode on machines with one.

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_CUDA_GPU:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (run pytest -m gpu on a GPU node)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
