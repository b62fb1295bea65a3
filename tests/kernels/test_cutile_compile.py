"""Ahead-of-time compile of every cuTile kernel for sm_90 and sm_100, on the CPU.

Covers the specialisations the default sweep launches (bf16, P=64, N 64/128/256, Q=256, D per
head, dt_bias, softplus) plus the option branches (fp32/TF32, z, D per head-dim, initial and
final states), so a kernel that stops compiling fails CI without a GPU.
"""

from __future__ import annotations

import io

import pytest

ct = pytest.importorskip("cuda.tile")
from cuda.tile.compilation import (  # noqa: E402
    ArrayConstraint,
    CallingConvention,
    KernelSignature,
    ScalarConstraint,
    export_kernel,
)

from kernels.cutile.chunk_cb import chunk_cb_kernel  # noqa: E402
from kernels.cutile.chunk_cumsum import chunk_cumsum_kernel  # noqa: E402
from kernels.cutile.compute_out import D_PER_HEAD, D_PER_HEAD_DIM, compute_out_kernel  # noqa: E402
from kernels.cutile.config import SSDConfig, default_config, with_occupancy  # noqa: E402
from kernels.cutile.fwd_pass_state import fwd_pass_state_kernel  # noqa: E402
from kernels.cutile.segment_scan import segment_scan_kernel  # noqa: E402

DTYPES = {"float32": ct.float32, "float16": ct.float16, "bfloat16": ct.bfloat16}
ARCHS = ("sm_90", "sm_100")
CONFIG = SSDConfig()  # tile sizes of the default_config of dstate <= 128


def array(dtype, ndim: int) -> ArrayConstraint:
    """A contiguous array as torch hands it over: last stride 1, 16-byte aligned base."""
    return ArrayConstraint(
        dtype,
        ndim,
        index_dtype=ct.int32,
        stride_lower_bound_incl=0,
        alias_groups=(),
        may_alias_internally=False,
        stride_constant=(None,) * (ndim - 1) + (1,),
        base_addr_divisible_by=16,
    )


def cumsum_signature(dtype: str, has_bias: bool, softplus: bool) -> KernelSignature:
    f32 = ct.float32
    return KernelSignature(
        [
            array(f32, 3),
            array(f32, 1),
            array(f32, 1),
            array(f32, 4),
            array(f32, 4),
            ScalarConstraint(ct.int32),
            ScalarConstraint(f32),
            ScalarConstraint(f32),
            256,
            8,
            has_bias,
            softplus,
        ],
        CallingConvention.cutile_python_v2(),
    )


def state_signature(
    dtype: str,
    headdim: int,
    init: bool,
    segmented: bool,
    block_q: int = CONFIG.state_block_q,
    heads: int = 1,
    weight_x: bool = False,
    block_n: int = CONFIG.state_block_n,
) -> KernelSignature:
    t, f32 = DTYPES[dtype], ct.float32
    arrays = [array(t, 4), array(t, 4)] + [array(f32, 4)] * 3 + [array(t, 5), array(f32, 5)]
    arrays += [array(f32, 3)] * 2
    scalars = [ScalarConstraint(ct.int32)] * 4
    constants = [256, headdim, block_n, block_q, heads, weight_x, init, segmented]
    return KernelSignature(arrays + scalars + constants, CallingConvention.cutile_python_v2())


def scan_signature(dtype: str, headdim: int) -> KernelSignature:
    t, f32 = DTYPES[dtype], ct.float32
    arrays = [array(f32, 5), array(f32, 3), array(t, 5), array(f32, 4)]
    constants = [headdim, 64]
    return KernelSignature(
        arrays + [ScalarConstraint(ct.int32)] + constants, CallingConvention.cutile_python_v2()
    )


def out_signature(
    dtype: str,
    headdim: int,
    dstate: int,
    d_mode: int,
    has_z: bool,
    heads: int = 1,
    segmented: bool = False,
    cb: int = 0,
    rank1: bool = False,
) -> KernelSignature:
    t, f32 = DTYPES[dtype], ct.float32
    d_ndim = 2 if d_mode == D_PER_HEAD_DIM else 1
    cb_array = array(f32 if cb < 2 else t, 5)
    arrays = [array(t, 4)] * 3 + [cb_array, array(t, 5), array(t, 5), array(f32, 3)]
    arrays += [array(f32, 4), array(f32, 4), array(f32, d_ndim), array(t, 4), array(t, 4)]
    slice_n = min(CONFIG.out_slice_n, dstate)
    constants = [256, headdim, dstate, slice_n, CONFIG.out_block_m, CONFIG.out_block_k, heads]
    constants += [d_mode, has_z, segmented, cb > 0, rank1]
    return KernelSignature(
        arrays + [ScalarConstraint(ct.int32)] * 2 + constants, CallingConvention.cutile_python_v2()
    )


def cb_signature(dtype: str, dstate: int, out_dtype: str = "float32") -> KernelSignature:
    t = DTYPES[dtype]
    arrays = [array(t, 4), array(t, 4), array(DTYPES[out_dtype], 5)]
    constants = [256, min(128, dstate), dstate, CONFIG.out_block_m, CONFIG.out_block_k]
    return KernelSignature(
        arrays + [ScalarConstraint(ct.int32)] + constants, CallingConvention.cutile_python_v2()
    )


def default_sweep_out(dstate: int, segmented: bool, tiles: int | None = None):
    """compute_out as the default sweep launches it at this dstate (and size), occupancy hint
    included."""
    cfg = default_config(dstate, tiles)
    kernel = with_occupancy(compute_out_kernel, cfg.out_occupancy)
    signature = out_signature(
        "bfloat16",
        64,
        dstate,
        D_PER_HEAD,
        False,
        cfg.out_heads,
        segmented,
        cfg.out_cb,
        bool(cfg.out_rank1),
    )
    size = "" if tiles is None else f"-{tiles}tiles"
    return pytest.param(kernel, signature, id=f"out-bf16-N{dstate}{size}-seg{int(segmented)}")


def default_sweep_state(dstate: int, segmented: bool):
    """fwd_pass_state as the default sweep launches it at this dstate."""
    cfg = default_config(dstate)
    kernel = with_occupancy(fwd_pass_state_kernel, cfg.state_occupancy)
    signature = state_signature(
        "bfloat16",
        64,
        False,
        segmented,
        cfg.state_block_q,
        cfg.state_heads,
        bool(cfg.state_weight_x),
        min(cfg.state_block_n, dstate),
    )
    return pytest.param(kernel, signature, id=f"state-bf16-N{dstate}-seg{int(segmented)}")


CASES = [
    pytest.param(chunk_cumsum_kernel, cumsum_signature("bfloat16", True, True), id="cumsum"),
    *[default_sweep_state(n, seg) for n in (64, 128, 256) for seg in (False, True)],
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
    pytest.param(chunk_cb_kernel, cb_signature("bfloat16", 256), id="cb-bf16-N256"),
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
    *[default_sweep_out(n, seg) for n in (64, 128, 256) for seg in (False, True)],
    default_sweep_out(256, False, tiles=128),
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
