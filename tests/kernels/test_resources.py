"""kernels/cutile/resources.py: resources read from real cubins, compiled on the CPU.

The relations checked are the ones the H200 measured: the configurations that lost 16-33 % in
compute_out (docs/performance.md, changes 13 and 14) spill far more than the defaults chosen, in
compilations from the builders' signatures (which lack the launch's shape and stride facts). And
a kernel name taken from a profile compiles to the resources the profiler reported.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from kernels.cutile.resources import read_cubin


def test_a_file_that_is_not_a_cubin_is_refused() -> None:
    with pytest.raises(ValueError, match="not an ELF64 cubin"):
        read_cubin(b"#!/bin/sh\n")


def _compute_out(dstate: int, tiles: int | None = None, **overrides):
    pytest.importorskip("cuda.tile")
    from kernels.cutile.config import default_config
    from kernels.cutile.resources import compile_resources
    from kernels.cutile.signatures import sweep_launches

    config = dataclasses.replace(default_config(dstate, tiles), **overrides)
    segmented = config.state_segments != 1  # as the walk runs on the sweep's larger problems
    name, kernel, signature = sweep_launches(dstate, config, segmented)[-1]
    assert name == "compute_out"
    return compile_resources(kernel, signature)


@pytest.mark.slow
def test_default_compute_out_fits_its_occupancy_hint() -> None:
    """Two CTAs of 128 threads per SM: at most 255 registers, little local memory."""
    res = _compute_out(128)
    assert 0 < res.registers <= 255
    assert res.local_bytes <= 64
    assert 0 < res.shared_bytes <= 228 * 1024 // 2


@pytest.mark.slow
def test_measured_losses_show_as_spills() -> None:
    default_128 = _compute_out(128)
    three_ctas_two_heads = _compute_out(128, out_occupancy=3)  # +16-32 % on the H200
    assert three_ctas_two_heads.local_bytes > default_128.local_bytes + 256
    default_256_small = _compute_out(256, tiles=256)
    rank1_inside = _compute_out(256, tiles=256, out_rank1=1)  # +33 % at 2K/32/256
    assert rank1_inside.local_bytes > default_256_small.local_bytes + 1024


NCU_OUTPUT = (
    Path(__file__).resolve().parents[2]
    / "results/nvidia-h200/config-comparisons/ncu-f56c702-compute-out-64K-128-128.txt"
)


@pytest.mark.slow
def test_a_profiled_kernel_name_compiles_to_what_the_profiler_saw() -> None:
    """compute_out as it ran at 64K/128/128, chunk 256 (its mangled name, from the committed
    Nsight Compute output), compiled here with its config's hint of two CTAs per SM: ncu reported
    128 registers per thread, no spills, 115.30 + 1.02 KB (static + driver) shared per CTA."""
    pytest.importorskip("cuda.tile")
    from kernels.cutile.config import with_occupancy
    from kernels.cutile.resources import compile_resources
    from kernels.cutile.signatures import from_symbol

    symbol = re.search(r"compute_out_kernel_\w*_I256_\w*", NCU_OUTPUT.read_text()).group(0)
    name, kernel, signature = from_symbol(symbol)
    res = compile_resources(with_occupancy(kernel, 2), signature)
    assert name == "compute_out_kernel"
    assert (res.registers, res.local_bytes) == (128, 0)
    assert res.shared_bytes == pytest.approx((115.30 + 1.02) * 1000, rel=0.01)


def test_a_name_that_is_not_one_of_our_kernels_is_refused() -> None:
    pytest.importorskip("cuda.tile")
    from kernels.cutile.signatures import from_symbol

    with pytest.raises(ValueError, match="none of"):
        from_symbol("matmul_kernel_Kt2")
