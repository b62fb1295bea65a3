"""Launches of the forward's kernels, chained by programmatic dependent launch (PDL).

On sm_90 a kernel launched as a programmatic dependent of the one before it in the stream can be
scheduled before that one has finished; it must then wait (griddepcontrol.wait) before it touches
memory the earlier kernel writes. chunk_cumsum, the state walk, segment_scan and chunk_cb call
`follow_previous` first: each waits until every earlier kernel has finished and its writes are
visible, then lets its own successor be scheduled. What this saves is the launch gap between
kernels, a microsecond or so each, which matters at short sequences (H200, 1K-2K/32/64: −6 to
−9 %; docs/performance.md, change 18). Without PDL both calls are no-ops.

Measured on the H200 and kept out:
- compute_out is launched plainly, without these calls: they cost its tens of thousands of short
  CTAs more than the gap saves (with them: compute_out +11 to +12 % at 64K/128/128 and
  16K/64/64).
- Releasing the successor after a kernel's main loop instead of at its start changed the
  compiled code: the walk and compute_out ran 1.6-2.4x slower, and two chunk_cb configurations
  gave wrong outputs (errors 1.2e-2 and 5.6e-2).
"""

from __future__ import annotations

import cuda.tile as ct
import torch


def follow_previous() -> None:
    """Called first in each kernel of the chain: wait for the previous kernel in the stream to
    finish and its writes to become visible (a no-op unless launched as a dependent), then allow
    the next one to be scheduled."""
    ct.grid_dependency_control_wait()
    ct.grid_dependency_control_launch_dependents()


def launch(grid: tuple[int, int, int], kernel, args: tuple, dependent: bool) -> None:
    """Launch on the current stream, as a programmatic dependent of the previous kernel or not."""
    ct.launch(
        torch.cuda.current_stream(), grid, kernel, args, programmatic_dependent_launch=dependent
    )
