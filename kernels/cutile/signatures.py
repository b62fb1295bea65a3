"""Kernel signatures of the cuTile SSD kernels, for compiling them ahead of time without a GPU.

Each builder mirrors the argument list its host wrapper hands to `ct.launch` (arrays as torch
passes contiguous tensors, then scalars, then compile-time constants), so a kernel whose
parameters change without its builder fails to compile here. Used by the CPU compile tests and
by `kernels.cutile.resources` (registers, spills and shared memory of a launch configuration).
"""

from __future__ import annotations

import inspect
import typing

import cuda.tile as ct
import torch
from cuda.tile.compilation import (
    ArrayConstraint,
    CallingConvention,
    ConstantConstraint,
    KernelSignature,
    ScalarConstraint,
    demangle_kernel_name,
)

from kernels.cutile.chunk_cb import chunk_cb_kernel
from kernels.cutile.chunk_cumsum import chunk_cumsum_kernel
from kernels.cutile.compute_out import D_PER_HEAD, D_PER_HEAD_DIM, compute_out_kernel
from kernels.cutile.config import SSDConfig, with_occupancy
from kernels.cutile.fwd_pass_state import fwd_pass_state_kernel
from kernels.cutile.segment_scan import segment_scan_kernel
from kernels.cutile.tiles import pow2_tile

KERNELS = {
    "chunk_cumsum_kernel": chunk_cumsum_kernel,
    "fwd_pass_state_kernel": fwd_pass_state_kernel,
    "segment_scan_kernel": segment_scan_kernel,
    "chunk_cb_kernel": chunk_cb_kernel,
    "compute_out_kernel": compute_out_kernel,
}

DTYPES = {"float32": ct.float32, "float16": ct.float16, "bfloat16": ct.bfloat16}
DEFAULT_TILES = SSDConfig()  # the tile sizes a builder takes when none are given
CHUNK = 256


def array(dtype, ndim: int) -> ArrayConstraint:
    """A contiguous array as torch hands it over: last stride 1, 16-byte aligned base.

    A launch also specialises on facts of the actual tensors (size-1 axes, sizes divisible by 16,
    strides divisible by 16 bytes) that this leaves out, so what compiles from these signatures
    is not always what runs: at dstate 128 the default compute_out compiles to 255 registers here
    and to 128 with the facts of a 64K/128/128 launch. For the exact specialisation that ran, use
    `from_symbol` on the kernel name a profiler shows or scripts/kernel_symbols.py records."""
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


def _signature(params: list) -> KernelSignature:
    return KernelSignature(params, CallingConvention.cutile_python_v2())


def cumsum_signature(has_bias: bool, softplus: bool, heads: int = 8) -> KernelSignature:
    f32 = ct.float32
    arrays = [array(f32, 3), array(f32, 1), array(f32, 1), array(f32, 4), array(f32, 4)]
    scalars = [ScalarConstraint(ct.int32), ScalarConstraint(f32), ScalarConstraint(f32)]
    return _signature(arrays + scalars + [CHUNK, heads, has_bias, softplus])


def state_signature(
    dtype: str,
    headdim: int,
    init: bool,
    segmented: bool,
    block_q: int = DEFAULT_TILES.state_block_q,
    heads: int = 1,
    weight_x: bool = False,
    block_n: int = DEFAULT_TILES.state_block_n,
) -> KernelSignature:
    t, f32 = DTYPES[dtype], ct.float32
    arrays = [array(t, 4), array(t, 4)] + [array(f32, 4)] * 3 + [array(t, 5), array(f32, 5)]
    arrays += [array(f32, 3)] * 2
    scalars = [ScalarConstraint(ct.int32)] * 4
    constants = [CHUNK, headdim, block_n, block_q, heads, weight_x, init, segmented]
    return _signature(arrays + scalars + constants)


def scan_signature(dtype: str, headdim: int) -> KernelSignature:
    t, f32 = DTYPES[dtype], ct.float32
    arrays = [array(f32, 5), array(f32, 3), array(t, 5), array(f32, 4)]
    return _signature(arrays + [ScalarConstraint(ct.int32), headdim, 64])


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
    tiles: SSDConfig = DEFAULT_TILES,
) -> KernelSignature:
    """compute_out; `tiles` gives rows per CTA, k-tile and dstate slice."""
    t, f32 = DTYPES[dtype], ct.float32
    d_ndim = 2 if d_mode == D_PER_HEAD_DIM else 1
    cb_array = array(f32 if cb < 2 else t, 5)
    arrays = [array(t, 4)] * 3 + [cb_array, array(t, 5), array(t, 5), array(f32, 3)]
    arrays += [array(f32, 4), array(f32, 4), array(f32, d_ndim), array(t, 4), array(t, 4)]
    block_m = min(tiles.out_block_m, CHUNK)
    constants = [CHUNK, headdim, dstate, min(tiles.out_slice_n, dstate), block_m]
    constants += [min(tiles.out_block_k, block_m), heads, d_mode, has_z, segmented, cb > 0, rank1]
    return _signature(arrays + [ScalarConstraint(ct.int32)] * 2 + constants)


def cb_signature(
    dtype: str, dstate: int, out_dtype: str = "float32", tiles: SSDConfig = DEFAULT_TILES
) -> KernelSignature:
    t = DTYPES[dtype]
    arrays = [array(t, 4), array(t, 4), array(DTYPES[out_dtype], 5)]
    block_m = min(tiles.out_block_m, CHUNK)
    constants = [CHUNK, min(128, dstate), dstate, block_m, min(tiles.out_block_k, block_m)]
    return _signature(arrays + [ScalarConstraint(ct.int32)] + constants)


def sweep_launches(
    dstate: int, config: SSDConfig, segmented: bool
) -> list[tuple[str, object, KernelSignature]]:
    """(name, kernel with its occupancy hint, signature) of fwd_pass_state, chunk_cb (when the
    config uses it) and compute_out, as the default sweep launches them: bf16, headdim 64,
    chunk 256, D per head, no z, an even number of heads per group. `segmented`: whether the walk
    is split (the host decides that from the problem's size)."""
    n_tile = pow2_tile(dstate)
    state = state_signature(
        "bfloat16",
        64,
        False,
        segmented,
        min(config.state_block_q, CHUNK),
        config.state_heads,
        bool(config.state_weight_x),
        min(config.state_block_n, n_tile),
    )
    out = out_signature(
        "bfloat16",
        64,
        n_tile,
        D_PER_HEAD,
        False,
        config.out_heads,
        segmented,
        config.out_cb,
        bool(config.out_rank1),
        config,
    )
    launches = [
        ("fwd_pass_state", with_occupancy(fwd_pass_state_kernel, config.state_occupancy), state)
    ]
    if config.out_cb:
        out_dtype = "float32" if config.out_cb == 1 else "bfloat16"
        launches.append(
            ("chunk_cb", chunk_cb_kernel, cb_signature("bfloat16", n_tile, out_dtype, config))
        )
    launches.append(("compute_out", with_occupancy(compute_out_kernel, config.out_occupancy), out))
    return launches


def from_symbol(symbol: str) -> tuple[str, object, KernelSignature]:
    """(name, kernel, signature) of a mangled kernel name as a profiler shows it: the exact
    specialisation that ran, with every fact its launch derived from the tensors."""
    name, signature = demangle_kernel_name(symbol)
    if name not in KERNELS:
        raise ValueError(f"{symbol[:60]!r} names {name!r}, none of {sorted(KERNELS)}")
    return name, KERNELS[name], signature


TORCH_DTYPES = {torch.float32: ct.float32, torch.float16: ct.float16, torch.bfloat16: ct.bfloat16}


def tensor_constraint(tensor: torch.Tensor) -> ArrayConstraint:
    """The facts a launch derives from one tensor, as torch launches on the H200 recorded them
    (tests/kernels/test_signatures.py checks this against recorded names): unit strides and
    size-1 axes as constants, sizes divisible by 16, other strides divisible by 16 bytes, a
    16-byte-aligned base (every tensor the host code allocates is)."""
    per_16_bytes = 16 // tensor.element_size()
    strides, shape = tensor.stride(), tensor.shape
    return ArrayConstraint(
        TORCH_DTYPES[tensor.dtype],
        tensor.dim(),
        index_dtype=ct.int32,
        stride_lower_bound_incl=tuple(None if s == 1 else 0 for s in strides),
        alias_groups=(),
        may_alias_internally=False,
        stride_constant=tuple(1 if s == 1 else None for s in strides),
        shape_constant=tuple(1 if d == 1 else None for d in shape),
        stride_divisible_by=tuple(
            per_16_bytes if s != 1 and s % per_16_bytes == 0 else 1 for s in strides
        ),
        shape_divisible_by=tuple(16 if d % 16 == 0 else 1 for d in shape),
        base_addr_divisible_by=16,
    )


def from_arguments(kernel, args: tuple) -> KernelSignature:
    """The signature a launch of `kernel` with `args` compiles: tensors by `tensor_constraint`
    (meta tensors will do), parameters annotated ct.Constant by value, other ints and floats as
    int32 and float32 scalars. With `launch.recorded()` this gives, without a GPU, exactly what
    the forward launches at any shape."""
    hints = typing.get_type_hints(kernel._pyfunc, include_extras=True)
    names = list(inspect.signature(kernel._pyfunc).parameters)
    if len(names) != len(args):
        raise ValueError(f"{kernel._pyfunc.__name__} takes {len(names)} arguments, got {len(args)}")
    params = []
    for name, value in zip(names, args, strict=True):
        if isinstance(value, torch.Tensor):
            params.append(tensor_constraint(value))
        elif _is_constant(hints.get(name)):
            params.append(ConstantConstraint(value))
        else:
            params.append(ScalarConstraint(ct.float32 if isinstance(value, float) else ct.int32))
    return _signature(params)


def _is_constant(hint) -> bool:
    return typing.get_origin(hint) is typing.Annotated and any(
        type(extra).__name__ == "ConstantAnnotation" for extra in typing.get_args(hint)[1:]
    )


def forward_launches(
    kwargs: dict, config: SSDConfig, sms: int = 132
) -> list[tuple[str, object, KernelSignature]]:
    """(kernel name, kernel with its hints, exact signature) of every launch of one forward, in
    launch order, on a GPU with `sms` SMs (the H200's 132 by default). `kwargs` are
    ssd_forward's inputs; meta tensors will do, so no GPU is needed."""
    from kernels.cutile import launch
    from kernels.cutile.ssd import launch_forward

    names = ("x", "dt", "A", "B", "C", "chunk_size", "D", "z", "dt_bias", "initial_states")
    with launch.recorded(sms) as recording:
        launch_forward(
            *(kwargs.get(n) for n in names), kwargs["dt_softplus"], kwargs["dt_limit"], config
        )
    return [
        (kernel._pyfunc.__name__, kernel, from_arguments(kernel, args))
        for _, kernel, args, _ in recording.launches
    ]
