"""The size limits a forward's launches must keep, checked before any of them runs.

CUDA caps a grid's y and z at 65535 blocks (x at 2³¹−1), and cuTile indexes a tensor with int32
shapes and strides unless its parameter is annotated otherwise: past either, the launch fails,
after the forward's earlier kernels have run. Where the grids and tensors of a problem land is
read from the forward's own launches, recorded on meta tensors (launch.recorded), so the check
follows whatever the launch code does.
"""

from __future__ import annotations

import torch

from kernels.cutile.config import SSDConfig

GRID_X_MAX = 2**31 - 1
GRID_YZ_MAX = 65535
INDEX_MAX = 2**31 - 1  # int32 shapes and strides


def _largest_index(tensor: torch.Tensor) -> int:
    """The largest size or stride cuTile indexes the tensor with: a size-1 axis's stride is never
    multiplied by anything but 0."""
    strides = [s for n, s in zip(tensor.shape, tensor.stride(), strict=True) if n > 1]
    return max((*tensor.shape, *strides), default=0)


def launch_limit_reason(kwargs: dict, config: SSDConfig, sms: int) -> str | None:
    """Why a forward on these inputs (meta tensors will do) cannot launch with `config` on a GPU
    with `sms` SMs, naming the kernel, the limit and what to lower; None when it can."""
    from kernels.cutile import launch
    from kernels.cutile.ssd import launch_forward_of

    with launch.recorded(sms) as recording:
        launch_forward_of(kwargs, config)
    for grid, kernel, args, _ in recording.launches:
        name = kernel._pyfunc.__name__
        if grid[0] > GRID_X_MAX or max(grid[1:]) > GRID_YZ_MAX:
            return (
                f"{name}'s grid {grid} passes CUDA's limits (y and z at most {GRID_YZ_MAX}): "
                "lower batch or seqlen, or raise chunk_size"
            )
        for arg in args:
            if isinstance(arg, torch.Tensor) and _largest_index(arg) > INDEX_MAX:
                return (
                    f"{name} would index a tensor of shape {tuple(arg.shape)}, strides "
                    f"{arg.stride()}, past cuTile's int32 range: lower batch, seqlen or nheads"
                )
    return None
