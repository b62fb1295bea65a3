"""segment_scan: the true state at the start of each segment of chunks, and the final state.

fwd_pass_state walks segments of chunks in parallel, each from a zero state; here, per head and
state block, H_0 = 0 (segment 0 already started from the initial states) and
H_{s+1} = exp(total decay of segment s)·H_s + local end state of segment s; the last H is the
final state. A handful of element-wise steps on (headdim × NB) tiles: a chain of loads, short
enough to matter only where the whole forward is short (3-7 µs of 30-60 µs at 2K-8K with 32
heads), so each step's loads are issued a step ahead and the tiles are narrow (16 state columns:
four times the CTAs of 64, each waiting on less). H200, 32 heads: 6.7-7.0 → 4.0-4.8 µs
(docs/performance.md, change 38).
"""

from __future__ import annotations

import cuda.tile as ct
import torch

from kernels.cutile.decay import exp2
from kernels.cutile.launch import follow_previous, launch
from kernels.cutile.tiles import pow2_tile

ConstInt = ct.Constant[int]
ConstBool = ct.Constant[bool]


@ct.kernel
def segment_scan_kernel(
    seg_end,  # (b, S, h, p, n) float32
    seg_total,  # (b, h, S) float32: log2 decay over each segment (kernels/cutile/decay.py)
    seg_start,  # (b, S, h, p, n): true state at each segment's start
    final,  # (b, h, p, n) float32
    segments: int,
    P: ConstInt,
    NB: ConstInt,
    CHAINED: ConstBool,
):
    follow_previous(CHAINED)
    nblock = ct.bid(0)
    head = ct.bid(1)
    batch = ct.bid(2)
    zero = ct.PaddingMode.ZERO
    state = ct.zeros((P, NB), dtype=ct.float32)
    # Each segment's loads are issued before the previous segment's store, so that one step of
    # the chain waits on one load's latency, not on a store and then a load (past the last
    # segment the loads read padding).
    decay = ct.load(seg_total, index=(batch, head, 0), shape=(1, 1, 1), padding_mode=zero)
    local = ct.load(
        seg_end, index=(batch, 0, head, 0, nblock), shape=(1, 1, 1, P, NB), padding_mode=zero
    )
    for seg in range(segments):
        next_decay = ct.load(
            seg_total, index=(batch, head, seg + 1), shape=(1, 1, 1), padding_mode=zero
        )
        next_local = ct.load(
            seg_end,
            index=(batch, seg + 1, head, 0, nblock),
            shape=(1, 1, 1, P, NB),
            padding_mode=zero,
        )
        ct.store(
            seg_start,
            index=(batch, seg, head, 0, nblock),
            tile=state.reshape((1, 1, 1, P, NB)).astype(seg_start.dtype),
        )
        state = exp2(decay.reshape((1, 1))) * state + local.reshape((P, NB))
        decay, local = next_decay, next_local
    ct.store(final, index=(batch, head, 0, nblock), tile=state.reshape((1, 1, P, NB)))


def segment_scan(
    seg_end: torch.Tensor,
    seg_total: torch.Tensor,
    dtype: torch.dtype,
    block_n: int = 16,
    dependent: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch segment_scan; returns (state at each segment's start in `dtype`, final fp32).
    `dependent`: launched as a programmatic dependent of the walk (kernels/cutile/launch.py)."""
    batch, segments, nheads, headdim, dstate = seg_end.shape
    seg_start = torch.empty(seg_end.shape, device=seg_end.device, dtype=dtype)
    final = torch.empty(batch, nheads, headdim, dstate, device=seg_end.device, dtype=torch.float32)
    nb = min(block_n, pow2_tile(dstate))
    grid = (-(-dstate // nb), nheads, batch)
    launch(
        grid,
        segment_scan_kernel,
        (seg_end, seg_total, seg_start, final, segments, pow2_tile(headdim), nb, dependent),
        dependent,
    )
    return seg_start, final
