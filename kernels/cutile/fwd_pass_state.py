"""fwd_pass_state: each chunk's state contribution and the state jump across chunks, fused.

One CTA owns a (headdim × NB) slice of one head's state and walks a run of chunks in order:
h_next = exp(dA_last)·h + Xᵀ·(B ⊙ exp(dA_last − dA) ⊙ dt). The decayed state is the initial
accumulator of the tensor-core mma, so the jump costs no extra pass. Only the state entering each
chunk is written (in the input dtype, as Triton does); the fp32 per-chunk contributions never
round-trip through global memory.

A walk over every chunk of a long sequence leaves most SMs idle when heads × state blocks are
few, so the chunks are split into `segments` runs walked in parallel, each from a zero state
(segment 0 from the initial states). The states written are then local to their segment; the
true state entering chunk c of segment s is h_local(c) + exp(decay from the segment's start to c)
· H_s, with H_s the true state at the segment's start. segment_scan computes H_s and the final
state; compute_out adds the H_s term. Each CTA records its segment's end state and decay for that.
With two segments and no final states asked for, H_1 is segment 0's end state itself, so segment 0
stores it as segment_scan would (H_0 = 0 beside it) and segment_scan is not launched.

With CARRY (one segment, one walker per head over its whole state) the walk stores, in place of
each chunk's state, what compute_out would make of it: the rows C[m]·h(chunk)ᵀ for the chunk's
positions, (Q, P) against the state's (P, N), half the bytes at dstate 256. The product is one
more mma per step with the state entering the chunk as its operand. With FINISH as well,
compute_out has run before the walk and left in out everything but those rows (the intra-chunk
part and D·x); each step adds exp(dA[m])·C[m]·hᵀ to its rows of out in place, gated by silu(z)
when given, so the rows never pass through memory and compute_out does not read them. It reads
out's rows through their own parameter (`partial`, the same tensor), so that the compiler need
not keep a load behind the step before's store to out (change 83). Off by default: on an H200
the finishing walk is still about a third slower than the plain one, more than compute_out saves.

A walk of one segment runs in one wave, often on fewer CTAs than the GPU has SMs (128 heads on
an H200's 132). With `state_cb` the SMs it leaves free compute compute_out's C·Bᵀ meanwhile
(chunk_cb.py's strided kernel, launched by ssd.py on a second stream; `cb_ctas_beside`).
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.tile as ct
import torch

from kernels.cutile.chunk_cb import beside_rows
from kernels.cutile.config import (
    SSDConfig,
    compute_out_tiles,
    reads_chunk_cb,
    uses_chunk_kernel,
    with_occupancy,
)
from kernels.cutile.decay import LOG2E, exp2
from kernels.cutile.indices import group_of, split_index
from kernels.cutile.launch import follow_previous, launch, sm_count
from kernels.cutile.tiles import pow2_tile

ConstInt = ct.Constant[int]
ConstBool = ct.Constant[bool]


def _initial_state(initial_states, batch, head, nblock, seg, P: int, NB: int, HAS_INIT: bool):
    """Segment 0 starts from the initial states (when given), every other segment from zero."""
    state = ct.zeros((P, NB), dtype=ct.float32)
    if HAS_INIT:
        if seg == 0:
            state = ct.load(
                initial_states,
                index=(batch, head, 0, nblock),
                shape=(1, 1, P, NB),
                padding_mode=ct.PaddingMode.ZERO,
            ).reshape((P, NB))
    return state


def _chunk_weights(dA_cumsum, dt_out, weight, batch, head, chunk, Q: int, LAT: int, WEIGHTS: bool):
    """`_chunk_decays`, except that with WEIGHTS the second tile is chunk_cumsum's weights
    exp(dA_last − dA)·dt in place of dt, so that the walk's steps take no exponential per
    position (it needs dA then only for dA_last)."""
    if WEIGHTS:
        index = (batch, head, chunk, 0)
        dA = ct.load(dA_cumsum, index=index, shape=(1, 1, 1, Q), latency=LAT).reshape((Q,))
        w = ct.load(weight, index=index, shape=(1, 1, 1, Q), latency=LAT).reshape((Q,))
        return dA, w, ct.extract(dA, index=(Q - 1,), shape=(1,)) * LOG2E
    return _chunk_decays(dA_cumsum, dt_out, batch, head, chunk, Q, LAT)


def _chunk_decays(dA_cumsum, dt_out, batch, head, chunk, Q: int, LAT: int):
    """dA and dt of a whole chunk, loaded once with the loop's latency hint so the compiler fetches
    them ahead with x and B, and dA_last in log2 units, taken from the dA tile rather than by a
    load of its own ahead of the state's decay (walk −24 % at 64K/32/256, −4 to −21 % at dstate
    128 with several mma steps a chunk; docs/performance.md, changes 27 and 28)."""
    index = (batch, head, chunk, 0)
    dA = ct.load(dA_cumsum, index=index, shape=(1, 1, 1, Q), latency=LAT).reshape((Q,))
    dt = ct.load(dt_out, index=index, shape=(1, 1, 1, Q), latency=LAT).reshape((Q,))
    return dA, dt, ct.extract(dA, index=(Q - 1,), shape=(1,)) * LOG2E


def _step_rows(chunk_tile, step, Q: int, TQ: int):
    """The TQ rows of one mma step out of a whole chunk's (Q,) tile."""
    if TQ == Q:
        return chunk_tile
    return ct.extract(chunk_tile, index=(step,), shape=(TQ,))


def _step_tile(BC, batch, row_block, group, nblock, TQ: int, NB: int, LAT: int):
    """The (TQ, NB) tile of B or C at one mma step's rows and the walker's state columns."""
    return ct.load(
        BC,
        index=(batch, row_block, group, nblock),
        shape=(1, TQ, 1, NB),
        padding_mode=ct.PaddingMode.ZERO,
        latency=LAT,
    ).reshape((TQ, NB))


def _weighted_x_b(
    acc, x, b, chunk_dA, chunk_dt, dA_last, batch, head, chunk, step, steps,
    Q: int, P: int, TQ: int, WEIGHT_X: bool, mma_dtype, LAT: int, WEIGHTS: bool,
):  # fmt: skip
    """acc + Xᵀ·(B ⊙ exp(dA_last − dA) ⊙ dt) over TQ rows of one head; the weights go on the
    operand WEIGHT_X names (that operand is computed in registers, the other comes from memory)."""
    dt = _step_rows(chunk_dt, step, Q, TQ)
    weight = dt  # with WEIGHTS, chunk_cumsum's weights
    if not WEIGHTS:
        dA = _step_rows(chunk_dA, step, Q, TQ)
        # Decay from each position to the chunk end, dA_last in log2 units; min(…, 0) keeps it ≤ 1.
        weight = exp2(ct.minimum(dA_last - dA * LOG2E, 0.0)) * dt
    # Xᵀ as a (P, TQ) tile: tile axis 1 is x's headdim axis, tile axis 3 its seqlen axis.
    xt = ct.load(
        x,
        index=(batch, 0, head, chunk * steps + step),
        shape=(1, P, 1, TQ),
        order=(0, 3, 2, 1),
        padding_mode=ct.PaddingMode.ZERO,
        latency=LAT,
    ).reshape((P, TQ))
    if WEIGHT_X:
        xw = (xt.astype(ct.float32) * weight[None, :]).astype(mma_dtype)
        return ct.mma(xw, b.astype(mma_dtype), acc)
    bw = (b.astype(ct.float32) * weight[:, None]).astype(mma_dtype)
    return ct.mma(xt.astype(mma_dtype), bw, acc)


def _store_state(states, state, batch, chunk, head, nblock, P: int, NB: int, TMA: bool):
    """One chunk's state, stored as tileiras picks (TMA where legal) or, without TMA, plainly."""
    index = (batch, chunk, head, 0, nblock)
    tile = state.reshape((1, 1, 1, P, NB)).astype(states.dtype)
    if TMA:
        ct.store(states, index=index, tile=tile)
    else:
        ct.store(states, index=index, tile=tile, allow_tma=False)


def _store_rows(states, rows, batch, row_block, head, TQ: int, P: int, ALTERNATE: bool):
    """One step's C·hᵀ rows into `states`. With ALTERNATE by one of two identical stores picked
    by the row block's parity, so that consecutive steps take turns: tileiras builds each its
    own handshake with the warp that issues the TMA store (the staging buffer stays one), and
    in the walks whose loads are hinted 6 (or more; measured at 6) the step comes out shorter
    (H100, 8K-64K/128/256: the walk −1.7 to −3.3 %, the forward −0.7 to −1.1 % in graph mode;
    H200: the walk −0.5 to −1.0 %, the forward within noise). Walks hinted 4 build another walk
    that way, one consumer warpgroup instead of two, +13 % and +21 % at 1K and 4K/128/256, so
    they keep one store (docs/performance.md, change 84)."""
    index = (batch, row_block, head, 0)
    tile = rows.reshape((1, TQ, 1, P)).astype(states.dtype)
    if ALTERNATE:
        if row_block % 2 == 0:
            ct.store(states, index=index, tile=tile)
        else:
            ct.store(states, index=index, tile=tile)
    else:
        ct.store(states, index=index, tile=tile)


def _finished_rows(
    out, z, carried, dA, batch, row_block, head, TQ: int, P: int, LAT: int, HAS_Z: bool
):
    """One step's rows of out: what compute_out left there plus exp(dA[m])·C[m]·hᵀ, gated by
    silu(z) when given. The rows out holds are loaded with the step's latency hint, as x is: they
    do not depend on the walk's chain."""
    index = (batch, row_block, head, 0)
    zero = ct.PaddingMode.ZERO
    rows = ct.load(out, index=index, shape=(1, TQ, 1, P), padding_mode=zero, latency=LAT)
    total = rows.reshape((TQ, P)).astype(ct.float32) + carried * exp2(dA * LOG2E)[:, None]
    if HAS_Z:
        gate = ct.load(z, index=index, shape=(1, TQ, 1, P), padding_mode=zero, latency=LAT)
        gate = gate.reshape((TQ, P)).astype(ct.float32)
        total = total * gate / (1.0 + ct.exp(-gate))
    return total


def _finish_segment(
    seg_end, seg_total, state, log_decay, batch, seg, head, nblock, P: int, NB: int,
    SEGMENTED: bool, DIRECT: bool,
):  # fmt: skip
    """Record the segment's local end state (and, with segments, its total log decay). DIRECT
    (two segments, no final states): seg_end is then compute_out's segment starts in the states'
    dtype; segment 0 writes H_0 = 0 and H_1, its own end state, and segment 1 nothing."""
    if DIRECT:
        if seg == 0:
            zero = ct.zeros((1, 1, 1, P, NB), dtype=seg_end.dtype)
            ct.store(seg_end, index=(batch, 0, head, 0, nblock), tile=zero)
            end = state.reshape((1, 1, 1, P, NB)).astype(seg_end.dtype)
            ct.store(seg_end, index=(batch, 1, head, 0, nblock), tile=end)
    else:
        end = state.reshape((1, 1, 1, P, NB))
        ct.store(seg_end, index=(batch, seg, head, 0, nblock), tile=end)
        if SEGMENTED:
            if nblock == 0:
                ct.store(seg_total, index=(batch, head, seg), tile=log_decay.reshape((1, 1, 1)))


@ct.kernel
def fwd_pass_state_kernel(
    x,  # (b, l, h, p)
    B,  # (b, l, g, n)
    dt_out,  # (b, h, nchunks, Q) float32
    dA_cumsum,  # (b, h, nchunks, Q) float32
    initial_states,  # (b, h, p, n) float32 (unused unless HAS_INIT)
    states,  # (b, nchunks, h, p, n): state entering each chunk, local to its segment; with
    # CARRY (b, l, h, p): each position's C[m]·h(chunk)ᵀ; with FINISH the output, completed here
    seg_end,  # (b, S, h, p, n) float32: each segment's local state after its last chunk; with
    # DIRECT each segment's true start state, in the states' dtype
    seg_total,  # (b, h, S) float32: each segment's total log2 decay (unused unless SEGMENTED)
    seg_decay,  # (b, h, nchunks) float32: decay factor from segment start to chunk start
    weight,  # (b, h, nchunks, Q) float32: chunk_cumsum's exp(dA_last − dA)·dt (if WEIGHTS)
    C,  # (b, l, g, n) (unused unless CARRY)
    z,  # (b, l, h, p) (unused unless HAS_Z)
    nchunks: int,
    heads_per_group: int,
    segments: int,
    seg_len: int,
    Q: ConstInt,
    P: ConstInt,
    NB: ConstInt,
    TQ: ConstInt,
    HS: ConstInt,
    WEIGHT_X: ConstBool,
    HAS_INIT: ConstBool,
    SEGMENTED: ConstBool,
    CHAINED: ConstBool,
    LAT: ConstInt,
    WEIGHTS: ConstBool,
    STORE_TMA: ConstBool,
    DIRECT: ConstBool,
    CARRY: ConstBool,
    FINISH: ConstBool,
    HAS_Z: ConstBool,
    partial,  # with FINISH: out as compute_out left it, the same tensor as `states`
):
    follow_previous(CHAINED)
    nblock = ct.bid(0)
    head = ct.bid(1) * HS  # HS (1 or 2) heads of one group share each B tile
    batch, seg = split_index(ct.bid(2), segments, x.shape[0])
    group = group_of(head, heads_per_group, B.shape[2])
    mma_dtype = ct.tfloat32 if x.dtype == ct.float32 else x.dtype
    steps = Q // TQ
    first = seg * seg_len
    last = min(first + seg_len, nchunks)

    state0 = _initial_state(initial_states, batch, head, nblock, seg, P, NB, HAS_INIT)
    state1 = state0
    if HS == 2:
        state1 = _initial_state(initial_states, batch, head + 1, nblock, seg, P, NB, HAS_INIT)
    log_decay0 = ct.zeros((1,), dtype=ct.float32)
    log_decay1 = log_decay0

    for chunk in range(first, last):
        if CARRY:
            h_t = ct.transpose(state0.astype(mma_dtype))  # rounded as a stored state would be
        else:
            _store_state(states, state0, batch, chunk, head, nblock, P, NB, STORE_TMA)
        dA0, dt0, dA_last0 = _chunk_weights(
            dA_cumsum, dt_out, weight, batch, head, chunk, Q, LAT, WEIGHTS
        )
        dA1, dt1, dA_last1 = dA0, dt0, dA_last0
        if HS == 2:
            _store_state(states, state1, batch, chunk, head + 1, nblock, P, NB, STORE_TMA)
            dA1, dt1, dA_last1 = _chunk_weights(
                dA_cumsum, dt_out, weight, batch, head + 1, chunk, Q, LAT, WEIGHTS
            )
        if SEGMENTED:
            if nblock == 0:
                ct.store(
                    seg_decay,
                    index=(batch, head, chunk),
                    tile=exp2(log_decay0).reshape((1, 1, 1)),
                )
                if HS == 2:
                    ct.store(
                        seg_decay,
                        index=(batch, head + 1, chunk),
                        tile=exp2(log_decay1).reshape((1, 1, 1)),
                    )
            log_decay0 = log_decay0 + dA_last0
            if HS == 2:
                log_decay1 = log_decay1 + dA_last1
        # The decayed state is the mma's initial accumulator: the state jump costs no extra pass.
        acc0 = state0 * exp2(dA_last0)
        acc1 = acc0
        if HS == 2:
            acc1 = state1 * exp2(dA_last1)
        for step in range(steps):
            b = _step_tile(B, batch, chunk * steps + step, group, nblock, TQ, NB, LAT)
            if CARRY:  # C·hᵀ for this step's rows, from the state entering the chunk
                c = _step_tile(C, batch, chunk * steps + step, group, nblock, TQ, NB, LAT)
                carried = ct.mma(c.astype(mma_dtype), h_t, ct.zeros((TQ, P), dtype=ct.float32))
                if FINISH:
                    carried = _finished_rows(
                        partial, z, carried, _step_rows(dA0, step, Q, TQ), batch,
                        chunk * steps + step, head, TQ, P, LAT, HAS_Z,
                    )  # fmt: skip
                _store_rows(
                    states, carried, batch, chunk * steps + step, head, TQ, P, ALTERNATE=LAT >= 6
                )
            acc0 = _weighted_x_b(
                acc0, x, b, dA0, dt0, dA_last0, batch, head, chunk, step, steps,
                Q, P, TQ, WEIGHT_X, mma_dtype, LAT, WEIGHTS,
            )  # fmt: skip
            if HS == 2:
                acc1 = _weighted_x_b(
                    acc1, x, b, dA1, dt1, dA_last1, batch, head + 1, chunk, step, steps,
                    Q, P, TQ, WEIGHT_X, mma_dtype, LAT, WEIGHTS,
                )  # fmt: skip
        state0 = acc0
        state1 = acc1

    _finish_segment(
        seg_end, seg_total, state0, log_decay0, batch, seg, head, nblock, P, NB, SEGMENTED, DIRECT
    )
    if HS == 2:
        _finish_segment(
            seg_end, seg_total, state1, log_decay1, batch, seg, head + 1, nblock, P, NB,
            SEGMENTED, DIRECT,
        )  # fmt: skip


@dataclass(frozen=True)
class StatePass:
    """What fwd_pass_state leaves for compute_out (and the final states)."""

    states: torch.Tensor  # (b, nchunks, h, p, n), local to each segment; with carry (b, l, h, p)
    final: torch.Tensor | None  # (b, h, p, n) float32; None when not asked for (DIRECT)
    segments: int
    seg_len: int  # chunks per segment (the last one may be shorter)
    seg_start: torch.Tensor | None  # (b, S, h, p, n): true state at each segment's start
    seg_decay: torch.Tensor | None  # (b, h, nchunks) float32
    carry: bool = False  # `states` holds each chunk's C·hᵀ rows (config.state_carry)


def fwd_pass_state(
    x: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    dt_out: torch.Tensor,
    dA_cumsum: torch.Tensor,
    weight: torch.Tensor | None,
    initial_states: torch.Tensor | None,
    config: SSDConfig,
    walk: WalkLayout,
    final_states: bool = True,
    out: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
) -> StatePass:
    """Launch fwd_pass_state under its layout `walk` (`walk_layout`, worked out once per forward
    by its caller: host time counts in eager mode), and segment_scan when the chunks are split
    into segments, except for two segments where the final states are not asked for (the walk's
    DIRECT stores). With `out` (only where `finishes_out`), the walk completes the output
    compute_out began in it."""
    from kernels.cutile.segment_scan import segment_scan

    grid, kernel, args = fwd_pass_state_launch(
        x, B, C, dt_out, dA_cumsum, weight, initial_states, config, walk, final_states, out, z
    )
    launch(grid, kernel, args, bool(config.dependent_launch))
    states, seg_end, seg_total, seg_decay = args[5:9]
    segments, seg_len = walk.segments, walk.seg_len
    if segments == 1:
        return StatePass(states, seg_end[:, 0], 1, seg_len, None, None, carries_rows(config, walk))
    if stores_starts(walk, final_states):  # DIRECT: seg_end holds the segments' start states
        return StatePass(states, None, segments, seg_len, seg_end, seg_decay)
    seg_start, final = segment_scan(
        seg_end, seg_total, states.dtype, dependent=bool(config.dependent_launch)
    )
    return StatePass(states, final, segments, seg_len, seg_start, seg_decay)


def fwd_pass_state_launch(
    x: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    dt_out: torch.Tensor,
    dA_cumsum: torch.Tensor,
    weight: torch.Tensor | None,
    initial_states: torch.Tensor | None,
    config: SSDConfig,
    walk: WalkLayout,
    final_states: bool = True,
    out: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
) -> tuple[tuple[int, int, int], object, tuple]:
    """(grid, kernel, arguments) of the walk's launch under its layout `walk` (`walk_layout`),
    outputs allocated (with `out`, the walk writes its rows there)."""
    batch, _, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    tq = min(config.state_block_q, chunk_size)
    nb, nblocks, hs = walk.block_n, walk.blocks, walk.heads
    segments, seg_len = walk.segments, walk.seg_len
    device, f32 = x.device, torch.float32
    direct = stores_starts(walk, final_states)
    carry = carries_rows(config, walk)
    finish = out is not None
    if finish and not finishes_out(config, walk):
        raise ValueError("the walk completes out only where finishes_out(config, walk)")
    if finish:
        states = out
    elif carry:
        states = torch.empty(x.shape, device=device, dtype=x.dtype)
    else:
        states = torch.empty(batch, nchunks, nheads, headdim, dstate, device=device, dtype=x.dtype)
    seg_end = torch.empty(
        batch, segments, nheads, headdim, dstate, device=device, dtype=x.dtype if direct else f32
    )
    shape_total, shape_decay = (
        ((batch, nheads, segments), (batch, nheads, nchunks))
        if segments > 1
        else ((1, 1, 1), (1, 1, 1))
    )
    unused = torch.empty(1, 1, 1, 1, device=device)
    gate = finish and z is not None
    grid = (nblocks, nheads // hs, batch * segments)
    kernel = with_occupancy(fwd_pass_state_kernel, config.state_occupancy)
    args = (
        x, B, dt_out, dA_cumsum,
        initial_states if initial_states is not None else unused,
        states, seg_end,
        torch.empty(shape_total, device=device, dtype=f32),
        torch.empty(shape_decay, device=device, dtype=f32),
        weight if weight is not None else unused,
        C if carry else unused,
        z if gate else unused,
        nchunks, nheads // ngroups, segments, seg_len, chunk_size, pow2_tile(headdim), nb, tq, hs,
        bool(config.state_weight_x), initial_states is not None, segments > 1,
        bool(config.dependent_launch), config.state_latency, weight is not None,
        bool(config.state_store_tma), direct, carry, finish, gate,
        out if finish else unused,
    )  # fmt: skip
    return grid, kernel, args


@dataclass(frozen=True)
class WalkLayout:
    """How the walk splits its work: state columns per walker and blocks of them per head, heads
    per walker, segments, and the SMs its one wave leaves free for other work."""

    block_n: int
    blocks: int
    heads: int
    segments: int
    seg_len: int
    batch: int
    ngroups: int
    chunk_size: int
    free_sms: int  # SMs no walker runs on


def walk_layout(
    config: SSDConfig, x_shape: tuple, b_shape: tuple, chunk_size: int, device: torch.device
) -> WalkLayout:
    """The walk's layout for x of shape (b, l, h, p) and B of shape (b, l, g, n)."""
    batch, seqlen, nheads = x_shape[:3]
    ngroups, dstate = b_shape[2], b_shape[3]
    nb = min(config.state_block_n, pow2_tile(dstate))
    blocks = -(-dstate // nb)
    hs = config.state_heads if (nheads // ngroups) % config.state_heads == 0 else 1
    walkers = batch * nheads // hs * blocks
    nchunks = -(-seqlen // chunk_size)
    segments, seg_len = _segments(
        config.state_segments, nchunks, walkers, config.state_occupancy, device
    )
    free = max(0, sm_count(device) - walkers)  # CTAs are spread over the SMs first
    return WalkLayout(nb, blocks, hs, segments, seg_len, batch, ngroups, chunk_size, free)


def stores_starts(walk: WalkLayout, final_states: bool) -> bool:
    """Whether the walk stores the segments' true start states itself (DIRECT), so that
    segment_scan is not launched: two segments, and no final states asked for."""
    return walk.segments == 2 and not final_states


def carries_rows(config: SSDConfig, walk: WalkLayout) -> bool:
    """Whether the walk writes each chunk's C·hᵀ rows instead of its states (state_carry): only
    one segment of walkers over whole states, one head each."""
    return bool(config.state_carry) and walk.segments == 1 and walk.blocks == 1 and walk.heads == 1


def finishes_out(config: SSDConfig, walk: WalkLayout) -> bool:
    """Whether compute_out runs before the walk and the walk adds its C·hᵀ rows to out in place
    (state_out): where the walk has those rows (carries_rows) and compute_out is the row-block
    kernel, which can leave them out."""
    return (
        bool(config.state_out)
        and carries_rows(config, walk)
        and not uses_chunk_kernel(config, walk.chunk_size)
    )


def cb_ctas_beside(config: SSDConfig, walk: WalkLayout) -> int:
    """CTAs per batch entry of chunk_cb's strided kernel, which computes compute_out's C·Bᵀ
    beside the walk on the SMs its one wave leaves free (config.state_cb; each such CTA takes a
    whole SM), or 0 where chunk_cb runs after the walk instead. Only beside one segment of
    whole-state walkers, whose steps are long enough; and at least two per group: where a
    walk step takes about as long as one chunk's product (the 128-head walks of whole states at
    dstate 128 and 256, 1-2 µs), each then computes one every other step or less and is done with
    the walk; beside the 32-head walk's 0.7 µs steps four took 1.5x the walk (run 217). C·Bᵀ
    scaled per tile (out_cb=3) needs compute_out's row blocks to be that kernel's."""
    out_rows = compute_out_tiles(config, walk.chunk_size)[0]
    scales_fit = config.out_cb != 3 or out_rows == beside_rows(walk.chunk_size)
    if not (
        config.state_cb
        and reads_chunk_cb(config, walk.chunk_size)
        and walk.segments == 1
        and walk.blocks == 1
        and scales_fit
        and not finishes_out(config, walk)  # compute_out, and so C·Bᵀ, runs before that walk
    ):
        return 0
    spare = walk.free_sms // walk.batch
    return spare if spare >= 2 * walk.ngroups else 0


def _segments(
    requested: int, nchunks: int, walkers: int, occupancy: int, device: torch.device
) -> tuple[int, int]:
    """(segments, chunks per segment). 0 asks for as many walkers as the GPU runs at once (one
    wave: `occupancy` walkers per SM, 0 counted as 1), since a partial second or third wave
    costs a whole walk (H200, chunk 128: 2.9 to 7.1 % of the forward at 16K-64K with dstate 64
    and 128 against 4 walkers per SM, docs/performance.md, change 31); with at least 4 chunks
    per segment so the H_s correction and segment_scan (serial over the segments) stay a small
    share, except that up to one walker per SM is always allowed: on short sequences with few
    walkers that is worth −4 to −7 % (H200, L ≤ 2K, 32 heads), while more segments lose there
    (change 15)."""
    if requested:
        wanted = requested
    else:
        sms = sm_count(device)
        wave = max(1, sms * max(1, occupancy) // walkers)
        wanted = min(wave, max(nchunks // 4, sms // walkers))
    seg_len = -(-nchunks // max(1, min(wanted, nchunks)))
    return -(-nchunks // seg_len), seg_len
