"""Test-session setup: Triton's interpreter on machines without a CUDA GPU, and `gpu` test skips.

pytest imports this before any test module, hence before triton: Triton decides at import time
whether @triton.jit builds interpreted functions, so TRITON_INTERPRET must be set here.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch  # does not import triton (checked with torch 2.13 CPU), so the flag below still counts

HAS_CUDA_GPU = torch.cuda.is_available()

if not HAS_CUDA_GPU:
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
