"""The allocator poisoning on a real GPU: what a provider's torch.empty output holds before its
kernels write it.

Run on a GPU node: `pytest -m gpu tests/harness/test_correctness_gpu.py`.
"""

from __future__ import annotations

import pytest
import torch

from harness.correctness import PoisonOverflow, poisoned_allocations
from harness.problem import Problem, working_set_bytes

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("numel", [1000, 1 << 22])  # the small pool and the large one
def test_an_output_fresh_from_the_poisoned_allocator_is_all_nan(dtype, numel: int) -> None:
    """Every element, not every other one: an unwritten bf16 element must fail the check."""
    with poisoned_allocations("cuda", numel * dtype.itemsize):
        out = torch.empty(numel, dtype=dtype, device="cuda")
    assert out.isnan().all().item()


def test_an_output_allocated_after_intermediates_is_still_poisoned() -> None:
    """A forward allocates its intermediates first (cuTile: decays, weights, chunk states) and
    its output last; another provider's answer, freed just before, must not serve it."""
    problem = Problem(seqlen=4096, nheads=32, dstate=128)
    shape = (problem.batch, problem.seqlen, problem.nheads, problem.headdim)
    answer = torch.zeros(shape, dtype=torch.bfloat16, device="cuda")  # a right-looking answer
    del answer
    with poisoned_allocations("cuda", working_set_bytes(problem)):
        states = torch.empty(working_set_bytes(problem) // 4, dtype=torch.uint8, device="cuda")
        decays = torch.empty(problem.seqlen * problem.nheads, dtype=torch.float32, device="cuda")
        out = torch.empty(shape, dtype=torch.bfloat16, device="cuda")
    assert out.isnan().all().item()
    del states, decays


def test_a_free_tail_beside_a_live_tensor_does_not_serve_the_output() -> None:
    """The shared pool's best fit: an input living in a 20 MiB segment leaves its free tail,
    which held an earlier answer, to any request that fits it; the poisoned pool has no such
    tail. (It failed with the allocator poisoned in place, review of 2026-12-05.)"""
    torch.cuda.empty_cache()
    live = torch.empty(2 << 20, dtype=torch.uint8, device="cuda")  # an input: 2 MiB of 20
    answer = torch.zeros(4 << 20, dtype=torch.bfloat16, device="cuda")  # 8 MiB of its tail
    del answer
    with poisoned_allocations("cuda", 64 << 20):
        out = torch.empty(4 << 20, dtype=torch.bfloat16, device="cuda")
    assert out.isnan().all().item()
    del live


def test_what_is_made_inside_stays_valid_after() -> None:
    """The check reads the answer after the pool is left, and the fallback keeps it longer."""
    with poisoned_allocations("cuda", 64 << 20):
        out = torch.empty(1 << 20, dtype=torch.float32, device="cuda")
        out.fill_(3.0)
    torch.cuda.empty_cache()
    scratch = torch.zeros(64 << 20, dtype=torch.uint8, device="cuda")
    assert (out == 3.0).all().item()
    del scratch


def test_a_call_allocating_past_its_poisoned_pool_is_refused() -> None:
    """Past the bound the pool takes fresh, unfilled memory: the check cannot be trusted."""
    with pytest.raises(PoisonOverflow, match="past its"):
        with poisoned_allocations("cuda", 32 << 20):
            inside = torch.empty(48 << 20, dtype=torch.uint8, device="cuda")
    del inside
