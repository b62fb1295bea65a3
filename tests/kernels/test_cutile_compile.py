"""Ahead-of-time compile of every cuTile kernel for sm_90 and sm_100, on the CPU.

Covers the specialisations the default sweep launches (bf16, P=64, N 64/128/256, Q=256, D per
head, dt_bias, softplus) plus the option branches (fp32/TF32, z, D per head-dim, initial and
final states), so a kernel that stops compiling fails CI without a GPU.
"""

from __future__ import annotations

import io

import pytest

pytest.importorskip("cuda.tile")
from cuda.tile.compilation import export_kernel  # noqa: E402

from kernels.cutile.chunk_cb import chunk_cb_kernel  # noqa: E402
from kernels.cutile.chunk_cumsum import chunk_cumsum_kernel  # noqa: E402
from kernels.cutile.compute_out import D_PER_HEAD, D_PER_HEAD_DIM, compute_out_kernel  # noqa: E402
from kernels.cutile.config import default_config  # noqa: E402
from kernels.cutile.fwd_pass_state import fwd_pass_state_kernel  # noqa: E402
from kernels.cutile.segment_scan import segment_scan_kernel  # noqa: E402
from kernels.cutile.signatures import (  # noqa: E402
    cb_signature,
    cumsum_signature,
    out_signature,
    scan_signature,
    state_signature,
    sweep_launches,
)

ARCHS = ("sm_90", "sm_100")


def default_sweep(
    dstate: int, segmented: bool, tiles: int | None = None, only: str | None = None
) -> list:
    """fwd_pass_state, chunk_cb (where used) and compute_out, or only the one named, as the
    default sweep launches them at this dstate (and size), occupancy hints included."""
    size = "" if tiles is None else f"-{tiles}tiles"
    return [
        pytest.param(kernel, signature, id=f"{name}-bf16-N{dstate}{size}-seg{int(segmented)}")
        for name, kernel, signature in sweep_launches(
            dstate, default_config(dstate, tiles), segmented
        )
        if only in (None, name)
    ]


CASES = [
    pytest.param(chunk_cumsum_kernel, cumsum_signature(True, True), id="cumsum"),
    *[case for n in (64, 128, 256) for seg in (False, True) for case in default_sweep(n, seg)],
    pytest.param(
        fwd_pass_state_kernel,
        state_signature("float32", 64, True, False),
        id="state-fp32-init-one-segment",
    ),
    pytest.param(
        fwd_pass_state_kernel,
        state_signature("float16", 64, True, True, 64, 2, True),
        id="state-fp16-init-two-heads-weight-x",
    ),
    pytest.param(chunk_cb_kernel, cb_signature("float32", 16), id="cb-fp32-N16"),
    pytest.param(
        chunk_cb_kernel, cb_signature("bfloat16", 128, "bfloat16"), id="cb-bf16-N128-stored-bf16"
    ),
    pytest.param(
        compute_out_kernel,
        out_signature("bfloat16", 64, 64, D_PER_HEAD, False, 2, True, 1),
        id="out-bf16-cb-two-heads-seg",
    ),
    pytest.param(
        compute_out_kernel,
        out_signature("bfloat16", 64, 256, D_PER_HEAD, False, 2, False, 2),
        id="out-bf16-N256-cb-stored-bf16",
    ),
    pytest.param(
        compute_out_kernel,
        out_signature("bfloat16", 64, 256, D_PER_HEAD, False, 2, True, 0, True),
        id="out-bf16-N256-rank1-two-heads-seg",
    ),
    pytest.param(
        compute_out_kernel,
        out_signature("bfloat16", 64, 128, D_PER_HEAD, False, 1, False, 2, True),
        id="out-bf16-N128-rank1-cb-stored-bf16",
    ),
    pytest.param(
        compute_out_kernel,
        out_signature("float32", 32, 16, D_PER_HEAD, True, 1, False, 0, True),
        id="out-fp32-rank1-z",
    ),
    pytest.param(segment_scan_kernel, scan_signature("bfloat16", 64), id="segment-scan"),
    *default_sweep(256, False, tiles=128, only="compute_out"),
    pytest.param(
        compute_out_kernel,
        out_signature("float16", 128, 128, D_PER_HEAD_DIM, True),
        id="out-fp16-Dhp-z",
    ),
    pytest.param(
        compute_out_kernel, out_signature("float32", 32, 16, D_PER_HEAD, True), id="out-fp32-z"
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize(("kernel", "signature"), CASES)
def test_kernel_compiles(kernel, signature, arch: str) -> None:
    cubin = io.BytesIO()
    export_kernel(kernel, [signature], cubin, gpu_code=arch, output_format="cubin")
    data = cubin.getvalue()
    assert data[:4] == b"\x7fELF", "export did not produce an ELF cubin"
