"""This GPU's attainable bf16 matmul rate and copy bandwidth, measured once per run.

The frac_peak_* columns divide by these rather than by datasheet numbers: what cuBLAS and a plain
device-to-device copy reach on this board, at its clocks, is the roof a kernel can hope for.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.stats import summarize

MATMUL_N = 8192
COPY_BYTES = 1 << 30


def _median_ms(fn: Callable[[], object], reps: int, warmup: int = 3) -> float:
    """Median CUDA-event time of fn over reps calls, after warm-up."""
    import torch

    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return summarize(times).median


def matmul_tflops(device: str, reps: int) -> float:
    """Rate of an 8192³ bf16 torch.matmul on random data (cuBLAS), in TFLOP/s."""
    import torch

    gen = torch.Generator(device=device).manual_seed(0)
    a, b = (
        torch.randn((MATMUL_N, MATMUL_N), generator=gen, device=device, dtype=torch.bfloat16)
        for _ in range(2)
    )
    c = torch.empty_like(a)
    ms = _median_ms(lambda: torch.matmul(a, b, out=c), reps)
    return 2 * MATMUL_N**3 / (ms * 1e-3) / 1e12


def copy_gbps(device: str, reps: int) -> float:
    """Bandwidth of a 1 GiB device-to-device copy, counting bytes read and written, in GB/s."""
    import torch

    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = _median_ms(lambda: dst.copy_(src), reps)
    return 2 * COPY_BYTES / (ms * 1e-3) / 1e9


def measure_peaks(device: str = "cuda", reps: int = 10) -> dict[str, float]:
    """{bf16_tflops, copy_gbps} of this GPU (the run's meta.json "peaks")."""
    import torch

    with torch.cuda.device(device):
        peaks = {"bf16_tflops": matmul_tflops(device, reps), "copy_gbps": copy_gbps(device, reps)}
        torch.cuda.empty_cache()
    return peaks
