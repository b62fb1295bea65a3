"""Correctness checks: relative error against a reference, per-dtype tolerances, output poisoning.

The one place that decides whether a provider's answer is right. NaN or inf never passes.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch

from harness import environment

# ‖out − ref‖ / ‖ref‖ limits against the float64 reference. Errors come from rounding the inputs
# of each tensor-core product to the input dtype (bf16: 8 bits of mantissa, fp16 and TF32: 11).
# Worst errors measured on the H200 over the whole GPU suite (docs/correctness.md): bf16 2.4e-3
# (Triton the same), fp16 2.2e-4 (Triton the same), fp32/TF32 3.1e-4 (Triton 1.1e-3). Each limit
# sits about 4x above the worst of both providers; peers are looser (mamba_ssm's tests: rtol 1e-2,
# atol 3e-3; vLLM's port: 5e-2 for bf16).
TOLERANCE = {"bfloat16": 1e-2, "float16": 1e-3, "float32": 5e-3}


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖₂ / ‖ref‖₂ in float64; NaN if out holds any NaN or inf; against an all-zero
    reference 0 for an all-zero answer and inf for any other."""
    out64, ref64 = out.detach().double(), ref.detach().to(out.device).double()
    if out64.shape != ref64.shape:
        raise ValueError(f"shape mismatch: out {tuple(out64.shape)} vs ref {tuple(ref64.shape)}")
    if not torch.isfinite(out64).all():
        return math.nan
    denom = torch.linalg.vector_norm(ref64).item()
    diff = torch.linalg.vector_norm(out64 - ref64).item()
    if denom == 0:  # no scale to be relative to: only the exact answer is right
        return 0.0 if diff == 0 else math.inf
    return diff / denom


def passes(error: float, dtype: str) -> bool:
    """True when a finite error is within the dtype's tolerance (NaN compares False)."""
    return error <= TOLERANCE[dtype]


#: Every bit set: NaN read as any float dtype (fp64, fp32, bf16, fp16), at any alignment.
POISON_BYTE = 0xFF


def poison_block(nbytes: int, device: torch.device | str) -> torch.Tensor:
    """`nbytes` of POISON_BYTE on `device`."""
    return torch.full((nbytes,), POISON_BYTE, dtype=torch.uint8, device=device)


#: The caching allocator's segments: a request between 1 and 10 MiB gets one of 20 MiB, a larger
#: one is rounded up to 2 MiB. A poisoned block filling less would leave a tail unpoisoned.
_SEGMENT_BYTES = 20 << 20
_ROUND_BYTES = 2 << 20
_SMALL_BLOCKS = 32  # of 512 KiB: 8 whole 2 MiB segments of the small pool (requests <= 1 MiB)
_HEADROOM_BYTES = 2 << 30  # free memory left beside the pool (workspaces, the driver's own)


def _whole_segment(nbytes: int) -> int:
    return max(_SEGMENT_BYTES, -(-nbytes // _ROUND_BYTES) * _ROUND_BYTES)


class PoisonOverflow(RuntimeError):
    """A checked call allocated past its poisoned pool, so part of what it returned may lie in
    memory that was never filled with NaN: its check cannot be trusted."""


@contextlib.contextmanager
def poisoned_allocations(device: torch.device | str, nbytes: int) -> Iterator[None]:
    """Inside, every allocation of this thread on `device` is cut from NaN: an element a kernel
    forgets to write stays NaN and fails the check, whatever the output's dtype (all bits set; a
    float32 NaN's bytes would read as 0.0 at every other bf16 element).

    The allocations go to a fresh memory pool (torch.cuda.MemPool) whose only free memory is a
    poisoned segment of `nbytes` (rounded up to the whole segment, at most the device's free
    memory less 2 GiB) and poisoned small segments (requests <= 1 MiB: the outputs of tiny
    problems). In the shared pool a provider's output was served by whatever free block fit
    best, often the free tail of a segment an input lives in, holding an earlier answer. Make
    `nbytes` a bound on everything the call allocates (problem.working_set_bytes). An allocation
    the pool cannot serve from poisoned memory (past `nbytes`, on another stream) asks the
    driver for more, which raises PoisonOverflow on the way out. The tensors made inside stay
    valid after it; the cache is emptied first, which also returns the previous check's pool.
    """
    conflict = environment.allocator_conflict()
    if conflict:
        raise RuntimeError(conflict)
    index = torch.device(device).index  # use_mem_pool wants one: "cuda" means the current GPU
    gpu = torch.device("cuda", torch.cuda.current_device() if index is None else index)
    torch.cuda.empty_cache()
    room = torch.cuda.mem_get_info(gpu)[0] - _HEADROOM_BYTES  # for the call's own CUDA work
    filled = min(_whole_segment(nbytes), max(room, 0) // _ROUND_BYTES * _ROUND_BYTES)
    with torch.cuda.device(gpu):  # a MemPool is made on the current GPU
        pool = torch.cuda.MemPool()
    try:
        with torch.cuda.use_mem_pool(pool, device=gpu):
            small = [poison_block(1 << 19, gpu) for _ in range(_SMALL_BLOCKS)]
            large = poison_block(filled, gpu)
            del small, large
            before = _device_allocations(gpu)
            yield
            added = _device_allocations(gpu) - before
        if added:
            short = (
                f"the GPU's free memory held only {filled / 2**30:.2f} GiB of the "
                f"{nbytes / 2**30:.2f} GiB bound"
                if filled < nbytes
                else f"the provider's bound on its allocations, {nbytes / 2**30:.2f} GiB, is "
                "too small (harness.providers, working_set)"
            )
            raise PoisonOverflow(
                f"the checked call took {added} new segment(s) of device memory past its "
                "poisoned pool (or on another stream), so part of its answer may lie in memory "
                f"never filled with NaN: {short}"
            )
    finally:
        del pool  # now, not when a traceback lets go of this frame: a late release aborts


def _device_allocations(gpu: torch.device) -> int:
    """How many times the caching allocator has asked the driver for memory on `gpu`: inside the
    pool, any new one is memory never filled with NaN (even at an address a freed poisoned
    segment had)."""
    return torch.cuda.memory_stats(gpu)["num_device_alloc"]
