"""This GPU's attainable bf16 matmul rate and copy bandwidth, measured by each worker of a run.

The frac_peak_* columns divide by these rather than by datasheet numbers: what cuBLAS and a plain
device-to-device copy reach on this board, at its clocks, is the roof a kernel can hope for. A run
resumed on another node, or sharded over several GPUs, has one rate per worker: each row is divided
by the rate of the GPU that measured it (`rates_by_worker`); meta.json keeps the first worker's.
The performance target judges a fraction of the highest rate the run measured on that GPU model
(`highest_rate`) instead, so that a low reading cannot make it read met.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

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
    """{bf16_tflops, copy_gbps} of this GPU (a worker record's "peaks"; the creating worker's
    also meta.json's)."""
    import torch

    with torch.cuda.device(device):
        peaks = {"bf16_tflops": matmul_tflops(device, reps), "copy_gbps": copy_gbps(device, reps)}
        torch.cuda.empty_cache()
    return peaks


def rates_by_worker(meta: Mapping) -> dict[str, dict[str, float]]:
    """{worker: its peaks} for the run's workers that measured their own (meta["workers"], as
    records.run_meta gives it); workers recorded before rates were measured per worker have none,
    and their rows divide by meta["peaks"]."""
    return {
        str(w["worker"]): dict(w["peaks"])
        for w in meta.get("workers") or []
        if w.get("worker") and w.get("peaks")
    }


def row_rate(meta: Mapping, worker: str | None, key: str) -> float | None:
    """The rate (`bf16_tflops` or `copy_gbps`) a row measured by `worker` is divided by: that
    worker's own, else the run's (None when neither was measured)."""
    own = rates_by_worker(meta).get(str(worker), {}).get(key)
    return own if own else (meta.get("peaks") or {}).get(key) or None


def highest_rate(meta: Mapping, key: str, gpu_name: str) -> float | None:
    """The highest rate (`bf16_tflops` or `copy_gbps`) measured in the run on GPUs named
    `gpu_name`: by any of its workers there, or meta's own (None when none was). A probe taken on a
    GPU still warm from earlier work reads low, by up to a fifth on the H200, which would flatter a
    fraction of it; a fraction of the highest cannot be flattered so."""
    records = [*(meta.get("workers") or []), meta]
    rates = [
        (record.get("peaks") or {}).get(key)
        for record in records
        if ((record.get("env") or {}).get("gpu") or {}).get("name") == gpu_name
    ]
    rates = [rate for rate in rates if rate]
    return max(rates) if rates else None


def run_rates(meta: Mapping) -> dict[str, float] | None:
    """The rates every row of the run divides by (meta["peaks"], {} when none was measured), or
    None when its workers measured rates of their own that differ from those."""
    run = dict(meta.get("peaks") or {})
    return run if all(own == run for own in rates_by_worker(meta).values()) else None
