"""Kernel signatures of the cuTile SSD kernels, for compiling them ahead of time without a GPU.

A launch specialises each kernel on facts of its tensors: unit strides and size-1 axes, sizes
divisible by 16, strides divisible by 16 bytes. `forward_launches` runs the host code of one
forward on meta tensors with the launches recorded (kernels/cutile/launch.py) and gives each
launch's exact signature (`from_arguments`), so the CPU compiles what a GPU would run: the names
it builds are those the H200 launched (tests/kernels/test_signatures.py). `from_symbol` reads a
signature back from a kernel name as a profiler shows it. Used by the CPU compile tests and by
`kernels.cutile.resources` (registers, spills and shared memory of a launch).
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
from kernels.cutile.compute_out import compute_out_kernel
from kernels.cutile.compute_out_chunk import compute_out_chunk_kernel_8_warps
from kernels.cutile.config import SSDConfig
from kernels.cutile.fwd_pass_state import fwd_pass_state_kernel
from kernels.cutile.segment_scan import segment_scan_kernel

KERNELS = {
    "chunk_cumsum_kernel": chunk_cumsum_kernel,
    "fwd_pass_state_kernel": fwd_pass_state_kernel,
    "segment_scan_kernel": segment_scan_kernel,
    "chunk_cb_kernel": chunk_cb_kernel,
    "compute_out_kernel": compute_out_kernel,
    "compute_out_chunk_kernel": compute_out_chunk_kernel_8_warps,
}


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
    size-1 axes as constants, sizes divisible by 16, other strides divisible by 16 bytes, and
    the base's alignment up to 16 bytes (16 for every tensor the host code allocates; a view's
    offset can lower it)."""
    per_16_bytes = 16 // tensor.element_size()
    offset = tensor.storage_offset() * tensor.element_size()
    base_alignment = 16 if offset % 16 == 0 else offset & -offset
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
        base_addr_divisible_by=base_alignment,
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
    return KernelSignature(params, CallingConvention.cutile_python_v2())


def _is_constant(hint) -> bool:
    return typing.get_origin(hint) is typing.Annotated and any(
        type(extra).__name__ == "ConstantAnnotation" for extra in typing.get_args(hint)[1:]
    )


def forward_launches(
    kwargs: dict, config: SSDConfig, sms: int = 132, captured: bool = True
) -> list[tuple[str, object, KernelSignature]]:
    """(kernel name, kernel with its hints, exact signature) of every launch of one forward, in
    launch order, on a GPU with `sms` SMs (the H200's 132 by default), captured into a CUDA graph
    or eager. `kwargs` are ssd_forward's inputs; meta tensors will do, so no GPU is needed."""
    from kernels.cutile import launch
    from kernels.cutile.ssd import launch_forward_of

    with launch.recorded(sms, captured) as recording:
        launch_forward_of(kwargs, config)
    return [
        (kernel._pyfunc.__name__, kernel, from_arguments(kernel, args))
        for _, kernel, args, _ in recording.launches
    ]
