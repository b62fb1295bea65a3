"""Launches of the forward's kernels, chained by programmatic dependent launch (PDL).

On sm_90 a kernel launched as a programmatic dependent of the one before it in the stream can be
scheduled while that one is still running; it must then wait (griddepcontrol.wait) before it
touches memory the earlier kernel writes. Every kernel of the forward calls `follow_previous`
first, so each one still starts its work only after all earlier kernels have finished and their
writes are visible, and lets its own successor launch as soon as every one of its CTAs is
resident. What this saves is the launch gap between kernels: a few microseconds per forward,
which matters at short sequences. Without PDL the wait is a no-op.
"""

from __future__ import annotations

import cuda.tile as ct
import torch


def follow_previous() -> None:
    """Called first in every kernel: wait for the previous kernel in the stream to finish and its
    writes to become visible, then allow the next kernel to be scheduled."""
    ct.grid_dependency_control_wait()
    ct.grid_dependency_control_launch_dependents()


def launch(grid: tuple[int, int, int], kernel, args: tuple, dependent: bool) -> None:
    """Launch on the current stream, as a programmatic dependent of the previous kernel or not."""
    ct.launch(
        torch.cuda.current_stream(), grid, kernel, args, programmatic_dependent_launch=dependent
    )
