"""The allocator poisoning on a real GPU: what a provider's torch.empty output holds before its
kernels write it.

Run on a GPU node: `pytest -m gpu tests/harness/test_correctness_gpu.py`.
"""

from __future__ import annotations

import pytest
import torch

from harness.correctness import poison_cuda_allocator

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("numel", [1000, 1 << 22])  # the small pool and the large one
def test_an_output_fresh_from_the_poisoned_allocator_is_all_nan(dtype, numel: int) -> None:
    """Every element, not every other one: an unwritten bf16 element must fail the check."""
    torch.cuda.empty_cache()
    poison_cuda_allocator("cuda", numel * dtype.itemsize)
    out = torch.empty(numel, dtype=dtype, device="cuda")
    assert out.isnan().all().item()
