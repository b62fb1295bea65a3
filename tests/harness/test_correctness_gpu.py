"""The allocator poisoning on a real GPU: what a provider's torch.empty output holds before its
kernels write it.

Run on a GPU node: `pytest -m gpu tests/harness/test_correctness_gpu.py`.
"""

from __future__ import annotations

import pytest
import torch

from harness.correctness import poison_cuda_allocator
from harness.problem import Problem, working_set_bytes

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("numel", [1000, 1 << 22])  # the small pool and the large one
def test_an_output_fresh_from_the_poisoned_allocator_is_all_nan(dtype, numel: int) -> None:
    """Every element, not every other one: an unwritten bf16 element must fail the check."""
    torch.cuda.empty_cache()
    poison_cuda_allocator("cuda", numel * dtype.itemsize)
    out = torch.empty(numel, dtype=dtype, device="cuda")
    assert out.isnan().all().item()


def test_an_output_allocated_after_intermediates_is_still_poisoned() -> None:
    """A forward allocates its intermediates first (cuTile: decays, weights, chunk states) and
    its output last; another provider's answer, freed just before, must not serve it."""
    problem = Problem(seqlen=4096, nheads=32, dstate=128)
    shape = (problem.batch, problem.seqlen, problem.nheads, problem.headdim)
    answer = torch.zeros(shape, dtype=torch.bfloat16, device="cuda")  # a right-looking answer
    del answer
    poison_cuda_allocator("cuda", working_set_bytes(problem))
    states = torch.empty(working_set_bytes(problem) // 4, dtype=torch.uint8, device="cuda")
    decays = torch.empty(problem.seqlen * problem.nheads, dtype=torch.float32, device="cuda")
    out = torch.empty(shape, dtype=torch.bfloat16, device="cuda")
    assert out.isnan().all().item()
    del states, decays
