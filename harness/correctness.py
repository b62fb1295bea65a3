"""Correctness checks: relative error against a reference, per-dtype tolerances, output poisoning.

The one place that decides whether a provider's answer is right. NaN or inf never passes.
"""

from __future__ import annotations

import math

import torch

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


def poison_cuda_allocator(device: torch.device | str, nbytes: int) -> None:
    """Fill `nbytes` of the caching allocator's free memory with NaN and release it.

    Providers allocate their own outputs with torch.empty; the caching allocator hands back these
    freed NaN-filled blocks, so an element a kernel forgets to write stays NaN and fails the check,
    whatever the output's dtype (a float32 NaN's bytes would read as 0.0 at every other bf16
    element). The cache is emptied first, so that no earlier free block (another provider's
    answer) is left to serve an allocation: everything up to `nbytes` the provider allocates,
    intermediates before its outputs included, is cut from the one poisoned block (at most half
    the device's free memory). Both pools are poisoned: the large one and the small one (< 1 MiB
    requests, 2 MiB segments), which holds the outputs of tiny problems.
    """
    torch.cuda.empty_cache()
    free = torch.cuda.mem_get_info(device)[0]
    small = [poison_block(1 << 19, device) for _ in range(32)]  # 512 KiB each
    large = poison_block(min(max(nbytes, 4 << 20), free // 2), device)
    del small, large
