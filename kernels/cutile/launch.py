"""Launches of the forward's kernels, chained by programmatic dependent launch (PDL).

On sm_90 a kernel launched as a programmatic dependent of the one before it in the stream can be
scheduled before that one has finished; it must then wait (griddepcontrol.wait) before it touches
memory the earlier kernel writes. Every kernel of the forward calls `wait_for_previous` first, so
each one still starts its work only after all earlier kernels have finished and their writes are
visible. A kernel calls `release_next` once its main loop is done, so that its successor is
scheduled while it stores its results: what this saves is the launch gap between kernels, a
microsecond or two each, which matters at short sequences. Released at a kernel's start instead,
the successor's waiting CTAs sat beside the state walk for its whole run and slowed it by up to
18 % (docs/performance.md, change 18). Without PDL both calls are no-ops.
"""

from __future__ import annotations

import cuda.tile as ct
import torch


def wait_for_previous() -> None:
    """Called first in every kernel: wait until the previous kernel in the stream has finished and
    its writes are visible."""
    ct.grid_dependency_control_wait()


def release_next() -> None:
    """Let the next kernel in the stream be scheduled (it still waits for this one to finish)."""
    ct.grid_dependency_control_launch_dependents()


def launch(grid: tuple[int, int, int], kernel, args: tuple, dependent: bool) -> None:
    """Launch on the current stream, as a programmatic dependent of the previous kernel or not."""
    ct.launch(
        torch.cuda.current_stream(), grid, kernel, args, programmatic_dependent_launch=dependent
    )
