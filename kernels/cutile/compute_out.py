"""compute_out: per chunk, the output from the carried state plus the causal intra-chunk part.

out[m] = exp(dA[m])·C[m]·h_chunkᵀ + Σ_{k≤m} (C[m]·B[k]) · exp(dA[m] − dA[k]) · dt[k] · x[k]
         + D·x[m], then optionally · silu(z[m]).
One CTA per (HB heads of one group, TM rows of a chunk, batch), heads fastest so neighbouring CTAs
share C/B tiles in L2; with HB = 2 each C·Bᵀ tile serves two heads, halving its cost. The C·Bᵀ
tile lives only in registers: it is masked, decayed, rounded to the input dtype (as Triton does)
and fed straight into the next mma. The causal mask is applied to the exponent
(−inf above the diagonal), so no exponential of a positive number is ever taken. dstate is
consumed in NS-wide slices so that large states still fit the occupancy hint; the first slice of
C stays resident, the others are reloaded (from L2) per k-tile.
"""

from __future__ import annotations

import math

import cuda.tile as ct
import torch

from kernels.cutile.chunk_cb import chunk_cb
from kernels.cutile.config import CHUNK_KERNEL_MAX_Q, DEFAULT_CONFIG, SSDConfig, with_occupancy
from kernels.cutile.decay import LOG2E, exp2
from kernels.cutile.fwd_pass_state import StatePass
from kernels.cutile.launch import launch
from kernels.cutile.tiles import pow2_tile

ConstInt = ct.Constant[int]
ConstBool = ct.Constant[bool]

D_NONE, D_PER_HEAD, D_PER_HEAD_DIM = 0, 1, 2


def _c_slice(C, batch, row_block, group, s, TM: int, NS: int, mma_dtype):
    """The (TM, NS) tile of C at row block `row_block` and dstate slice `s`, as mma operand."""
    return (
        ct.load(
            C,
            index=(batch, row_block, group, s),
            shape=(1, TM, 1, NS),
            padding_mode=ct.PaddingMode.ZERO,
        )
        .reshape((TM, NS))
        .astype(mma_dtype)
    )


def _state_slice(states, batch, slot, head, s, P: int, NS: int):
    """The (NS, P) tile of dstate slice `s` of states[batch, slot, head] (stored (p, n))."""
    return ct.load(
        states,
        index=(batch, slot, head, s, 0),
        shape=(1, 1, 1, NS, P),
        order=(0, 1, 2, 4, 3),
        padding_mode=ct.PaddingMode.ZERO,
    ).reshape((NS, P))


def _c_times_state(
    C,
    states,
    c_first,
    batch,
    slot,
    head,
    row_block,
    group,
    TM: int,
    P: int,
    NS: int,
    slices: int,
    mma_dtype,
):
    """C[m]·hᵀ for one head with h = states[batch, slot, head], loaded as (NS, P) tiles."""
    acc = ct.zeros((TM, P), dtype=ct.float32)
    for s in range(slices):
        c_s = c_first
        if s > 0:
            c_s = _c_slice(C, batch, row_block, group, s, TM, NS, mma_dtype)
        state_t = _state_slice(states, batch, slot, head, s, P, NS)
        acc = ct.mma(c_s, state_t.astype(mma_dtype), acc)
    return acc


def _carried_state(
    C,
    states,
    seg_start,
    seg_decay,
    c_first,
    batch,
    chunk,
    head,
    row_block,
    group,
    seg_len,
    TM: int,
    P: int,
    NS: int,
    slices: int,
    mma_dtype,
    SEGMENTED: bool,
    FOLD: bool,
):
    """C[m]·h(chunk)ᵀ for one head; with segments, h = h_local + exp(decay since the segment's
    start)·H_segment (see fwd_pass_state). FOLD (only with segments) sums the two in fp32 before
    one mma per slice, the state passing through registers; otherwise the H term is a second
    product whose operands come straight from memory."""
    if FOLD:
        return _folded_state(
            C, states, seg_start, seg_decay, c_first, batch, chunk, head, row_block, group,
            seg_len, TM, P, NS, slices, mma_dtype,
        )  # fmt: skip
    acc = _c_times_state(
        C, states, c_first, batch, chunk, head, row_block, group, TM, P, NS, slices, mma_dtype
    )
    if SEGMENTED:
        seg = chunk // seg_len
        if seg > 0:
            scale = ct.load(seg_decay, index=(batch, head, chunk), shape=(1, 1, 1))
            acc = acc + scale.reshape((1, 1)) * _c_times_state(
                C,
                seg_start,
                c_first,
                batch,
                seg,
                head,
                row_block,
                group,
                TM,
                P,
                NS,
                slices,
                mma_dtype,
            )
    return acc


def _folded_state(
    C, states, seg_start, seg_decay, c_first, batch, chunk, head, row_block, group, seg_len,
    TM: int, P: int, NS: int, slices: int, mma_dtype,
):  # fmt: skip
    """C[m]·(h_local + scale·H_segment)ᵀ with the sum in fp32, rounded once to the mma dtype as a
    stored true state would be; H of segment 0 is zero (segment_scan), so no branch."""
    scale = ct.load(seg_decay, index=(batch, head, chunk), shape=(1, 1, 1)).reshape((1, 1))
    acc = ct.zeros((TM, P), dtype=ct.float32)
    for s in range(slices):
        c_s = c_first
        if s > 0:
            c_s = _c_slice(C, batch, row_block, group, s, TM, NS, mma_dtype)
        local = _state_slice(states, batch, chunk, head, s, P, NS).astype(ct.float32)
        start = _state_slice(seg_start, batch, chunk // seg_len, head, s, P, NS)
        acc = ct.mma(c_s, (local + scale * start.astype(ct.float32)).astype(mma_dtype), acc)
    return acc


def _c_times_b(
    C,
    B,
    c_first,
    batch,
    row_block,
    group,
    k_tile,
    TM: int,
    TK: int,
    NS: int,
    slices: int,
    mma_dtype,
):
    """C[m]·B[k]ᵀ for one (TM, TK) tile, dstate consumed in NS-wide slices."""
    cb = ct.zeros((TM, TK), dtype=ct.float32)
    for s in range(slices):
        c_s = c_first
        if s > 0:
            c_s = _c_slice(C, batch, row_block, group, s, TM, NS, mma_dtype)
        b_k = ct.load(
            B,
            index=(batch, s, group, k_tile),
            shape=(1, NS, 1, TK),
            order=(0, 3, 2, 1),
            padding_mode=ct.PaddingMode.ZERO,
            latency=2,
        ).reshape((NS, TK))
        cb = ct.mma(c_s, b_k.astype(mma_dtype), cb)
    return cb


def _x_tile(x, batch, head, k_tile, TK: int, P: int, mma_dtype, LAT: int):
    """One head's (TK, P) tile of x at sequence tile k_tile, LAT its load's latency hint."""
    return (
        ct.load(
            x,
            index=(batch, k_tile, head, 0),
            shape=(1, TK, 1, P),
            padding_mode=ct.PaddingMode.ZERO,
            latency=LAT,
        )
        .reshape((TK, P))
        .astype(mma_dtype)
    )


def _intra_chunk(
    acc,
    cb,
    x,
    dt_out,
    dA_cumsum,
    dA_m,
    causal,
    batch,
    head,
    chunk,
    k_block,
    k_tile,
    TK: int,
    P: int,
    mma_dtype,
    LAT: int,
    HINT: bool,
):
    """acc + (C·Bᵀ ⊙ decay ⊙ dt)·x over one k-tile for one head; exponent −inf off the mask."""
    dA_k, dt_k = _k_decays(dA_cumsum, dt_out, batch, head, chunk, k_block, TK, LAT, HINT)
    weight = _causal_weight(cb, dA_m, dA_k, dt_k, causal, mma_dtype)
    return ct.mma(weight, _x_tile(x, batch, head, k_tile, TK, P, mma_dtype, LAT), acc)


def _causal_weight(cb, dA_m, dA_k, dt_k, causal, mma_dtype):
    """C·Bᵀ ⊙ exp(dA[m] − dA[k]) ⊙ dt[k] as mma operand, exponent −inf off the causal mask."""
    exponent = ct.where(causal, dA_m[:, None] - dA_k[None, :], -float("inf"))
    return (cb * exp2(exponent) * dt_k[None, :]).astype(mma_dtype)


def _below_diagonal(
    acc, cb, x, dt_out, dA_cumsum, anchor, batch, head, chunk, k_block, k_tile, TK: int, P: int,
    mma_dtype, LAT: int, HINT: bool,
):  # fmt: skip
    """acc + (C·Bᵀ ⊙ exp(anchor − dA[k]) ⊙ dt)·x over one k-tile wholly before the row block.
    exp(dA[m] − dA[k]) = exp(dA[m] − anchor)·exp(anchor − dA[k]) with anchor = dA at the block's
    first row: both factors are at most 1 (dA falls along the chunk), so nothing overflows, and the
    row factor is applied once to the sum, leaving TK exponentials per tile instead of TM·TK."""
    dA_k, dt_k = _k_decays(dA_cumsum, dt_out, batch, head, chunk, k_block, TK, LAT, HINT)
    column = exp2(anchor - dA_k) * dt_k
    weight = (cb * column[None, :]).astype(mma_dtype)
    return ct.mma(weight, _x_tile(x, batch, head, k_tile, TK, P, mma_dtype, LAT), acc)


def _cb_tile(
    C, B, cb_chunks, c_first, batch, chunk, row_block, group, m_block, k_block, k_tile, TM: int,
    TK: int, NS: int, slices: int, mma_dtype, CB_PRE: bool,
):  # fmt: skip
    """The fp32 (TM, TK) tile of C·Bᵀ: read from chunk_cb's output or computed here."""
    if CB_PRE:
        return (
            ct.load(
                cb_chunks,
                index=(batch, chunk, group, m_block, k_block),
                shape=(1, 1, 1, TM, TK),
                latency=2,
            )
            .reshape((TM, TK))
            .astype(ct.float32)
        )
    return _c_times_b(C, B, c_first, batch, row_block, group, k_tile, TM, TK, NS, slices, mma_dtype)


def _x_rows(x, batch, row_block, head, TM: int, P: int, latency=None):
    """One head's (TM, P) rows of x at row block `row_block`, in fp32 for the D·x term."""
    return (
        ct.load(
            x,
            index=(batch, row_block, head, 0),
            shape=(1, TM, 1, P),
            padding_mode=ct.PaddingMode.ZERO,
            latency=latency,
        )
        .reshape((TM, P))
        .astype(ct.float32)
    )


def _finish(
    acc, x_m, D, z, out, batch, row_block, head, TM: int, P: int, D_MODE: int, HAS_Z: bool
):  # fmt: skip
    """Add D·x (x_m: the block's x rows in fp32, unused without D), gate with silu(z), store one
    head's (TM, P) output tile."""
    zero = ct.PaddingMode.ZERO
    if D_MODE != D_NONE:
        if D_MODE == D_PER_HEAD:
            d = ct.load(D, index=(head,), shape=(1,)).reshape((1, 1))
        else:
            d = ct.load(D, index=(head, 0), shape=(1, P), padding_mode=zero)
        acc = acc + d * x_m
    if HAS_Z:
        z_m = (
            ct.load(z, index=(batch, row_block, head, 0), shape=(1, TM, 1, P), padding_mode=zero)
            .reshape((TM, P))
            .astype(ct.float32)
        )
        acc = acc * z_m / (1.0 + ct.exp(-z_m))
    ct.store(
        out, index=(batch, row_block, head, 0), tile=acc.astype(out.dtype).reshape((1, TM, 1, P))
    )


def _log2_decay(dA_cumsum, batch, head, chunk, block, T: int):
    """dA at the T positions of one block of a chunk, in log2 units (kernels/cutile/decay.py)."""
    dA = ct.load(dA_cumsum, index=(batch, head, chunk, block), shape=(1, 1, 1, T))
    return dA.reshape((T,)) * LOG2E


def _k_decays(dA_cumsum, dt_out, batch, head, chunk, k_block, TK: int, LAT: int, HINT: bool):
    """dA (log2 units) and dt of one k-tile; HINT loads them with the loop's latency hint, as x
    is loaded. At dstate 256 with four CTAs per SM the compiler then builds a different kernel
    (64 registers and 54 KB of shared memory instead of 96 and 33 KB): −3 to −6 % in all,
    against +10 to +13 % unhinted (docs/performance.md, change 29)."""
    index = (batch, head, chunk, k_block)
    latency = LAT if HINT else None
    dA = ct.load(dA_cumsum, index=index, shape=(1, 1, 1, TK), latency=latency)
    dt = ct.load(dt_out, index=index, shape=(1, 1, 1, TK), latency=latency)
    return dA.reshape((TK,)) * LOG2E, dt.reshape((TK,))


def _anchor(dA_cumsum, batch, head, chunk, m_block, TM: int):
    """dA at the row block's first row in log2 units, shape (1,)."""
    return _log2_decay(dA_cumsum, batch, head, chunk, m_block * TM, 1)


def _start_scale(dA_m, anchor, TM: int, RANK1: bool):
    """What the carried state's product is scaled by before the intra-chunk sum: exp(dA[m]), or
    with RANK1 exp(anchor), the row factor exp(dA[m] − anchor) following after the sum."""
    scale = exp2(dA_m)
    if RANK1:
        scale = ct.broadcast_to(exp2(anchor), (TM,))
    return scale


@ct.kernel
def compute_out_kernel(
    x,  # (b, l, h, p)
    B,  # (b, l, g, n)
    C,  # (b, l, g, n)
    cb_chunks,  # (b, nchunks, g, Q, Q) from chunk_cb, fp32 or x's dtype (unused unless CB_PRE)
    states,  # (b, nchunks, h, p, n): state entering each chunk, local to its segment
    seg_start,  # (b, S, h, p, n): true state at each segment's start (unused unless SEGMENTED)
    seg_decay,  # (b, h, nchunks) float32: exp(decay from segment start to chunk start)
    dt_out,  # (b, h, nchunks, Q) float32
    dA_cumsum,  # (b, h, nchunks, Q) float32
    D,  # (h,) or (h, p) float32 (unused when D_MODE is D_NONE)
    z,  # (b, l, h, p) (unused unless HAS_Z)
    out,  # (b, l, h, p)
    heads_per_group: int,
    seg_len: int,
    Q: ConstInt,
    P: ConstInt,
    N: ConstInt,
    NS: ConstInt,
    TM: ConstInt,
    TK: ConstInt,
    HB: ConstInt,
    D_MODE: ConstInt,
    HAS_Z: ConstBool,
    SEGMENTED: ConstBool,
    CB_PRE: ConstBool,
    RANK1: ConstBool,
    LAT: ConstInt,
    HINT: ConstBool,
    FOLD: ConstBool,
):
    head = ct.bid(0) * HB  # HB (1 or 2) heads of one group share each C·Bᵀ tile
    row_block = ct.bid(1)  # TM-row block along the sequence
    batch = ct.bid(2)
    group = head // heads_per_group
    blocks_per_chunk = Q // TM
    chunk = row_block // blocks_per_chunk
    m_block = row_block % blocks_per_chunk
    slices = N // NS
    mma_dtype = ct.tfloat32 if x.dtype == ct.float32 else x.dtype

    c_first = _c_slice(C, batch, row_block, group, 0, TM, NS, mma_dtype)
    # Per head: the decay of its rows, and (RANK1) the anchor, dA at the block's first row, both
    # in log2 units.
    dA_m0 = _log2_decay(dA_cumsum, batch, head, chunk, m_block, TM)
    anchor0 = _anchor(dA_cumsum, batch, head, chunk, m_block, TM)
    acc0 = _carried_state(
        C, states, seg_start, seg_decay, c_first, batch, chunk, head, row_block, group, seg_len,
        TM, P, NS, slices, mma_dtype, SEGMENTED, FOLD,
    ) * _start_scale(dA_m0, anchor0, TM, RANK1)[:, None]  # fmt: skip
    dA_m1 = dA_m0
    anchor1 = anchor0
    acc1 = acc0
    if HB == 2:
        dA_m1 = _log2_decay(dA_cumsum, batch, head + 1, chunk, m_block, TM)
        anchor1 = _anchor(dA_cumsum, batch, head + 1, chunk, m_block, TM)
        acc1 = _carried_state(
            C, states, seg_start, seg_decay, c_first, batch, chunk, head + 1, row_block, group,
            seg_len, TM, P, NS, slices, mma_dtype, SEGMENTED, FOLD,
        ) * _start_scale(dA_m1, anchor1, TM, RANK1)[:, None]  # fmt: skip

    # Causal intra-chunk part, k-tiles up to and including the diagonal; with RANK1 the tiles
    # wholly before the row block first, their decay split into a row and a column factor.
    k_blocks_per_chunk = Q // TK
    diagonal = m_block * (TM // TK)
    below = 0
    if RANK1:
        below = diagonal
    for k_block in range(below):
        k_tile = chunk * k_blocks_per_chunk + k_block
        cb = _cb_tile(
            C, B, cb_chunks, c_first, batch, chunk, row_block, group, m_block, k_block, k_tile,
            TM, TK, NS, slices, mma_dtype, CB_PRE,
        )  # fmt: skip
        acc0 = _below_diagonal(
            acc0, cb, x, dt_out, dA_cumsum, anchor0, batch, head, chunk, k_block, k_tile, TK, P,
            mma_dtype, LAT, HINT,
        )  # fmt: skip
        if HB == 2:
            acc1 = _below_diagonal(
                acc1, cb, x, dt_out, dA_cumsum, anchor1, batch, head + 1, chunk, k_block, k_tile,
                TK, P, mma_dtype, LAT, HINT,
            )  # fmt: skip
    if RANK1:
        acc0 = acc0 * exp2(dA_m0 - anchor0)[:, None]
        acc1 = acc1 * exp2(dA_m1 - anchor1)[:, None]

    rows = m_block * TM + ct.arange(TM, dtype=ct.int32)
    for k_block in range(below, diagonal + TM // TK):
        k_tile = chunk * k_blocks_per_chunk + k_block
        cb = _cb_tile(
            C, B, cb_chunks, c_first, batch, chunk, row_block, group, m_block, k_block, k_tile,
            TM, TK, NS, slices, mma_dtype, CB_PRE,
        )  # fmt: skip
        causal = rows[:, None] >= (k_block * TK + ct.arange(TK, dtype=ct.int32))[None, :]
        acc0 = _intra_chunk(
            acc0, cb, x, dt_out, dA_cumsum, dA_m0, causal, batch, head, chunk, k_block, k_tile,
            TK, P, mma_dtype, LAT, HINT,
        )  # fmt: skip
        if HB == 2:
            acc1 = _intra_chunk(
                acc1, cb, x, dt_out, dA_cumsum, dA_m1, causal, batch, head + 1, chunk, k_block,
                k_tile, TK, P, mma_dtype, LAT, HINT,
            )  # fmt: skip

    x_m0 = acc0
    if D_MODE != D_NONE:
        x_m0 = _x_rows(x, batch, row_block, head, TM, P)
    _finish(acc0, x_m0, D, z, out, batch, row_block, head, TM, P, D_MODE, HAS_Z)
    if HB == 2:
        x_m1 = acc1
        if D_MODE != D_NONE:
            x_m1 = _x_rows(x, batch, row_block, head + 1, TM, P)
        _finish(acc1, x_m1, D, z, out, batch, row_block, head + 1, TM, P, D_MODE, HAS_Z)


@ct.kernel
def compute_out_chunk_kernel(
    x,  # (b, l, h, p)
    B,  # (b, l, g, n)
    C,  # (b, l, g, n)
    states,  # (b, nchunks, h, p, n): state entering each chunk, local to its segment
    seg_start,  # (b, S, h, p, n): true state at each segment's start (unused unless SEGMENTED)
    seg_decay,  # (b, h, nchunks) float32: exp(decay from segment start to chunk start)
    dt_out,  # (b, h, nchunks, Q) float32
    dA_cumsum,  # (b, h, nchunks, Q) float32
    D,  # (h,) or (h, p) float32 (unused when D_MODE is D_NONE)
    z,  # (b, l, h, p) (unused unless HAS_Z)
    out,  # (b, l, h, p)
    heads_per_group: int,
    seg_len: int,
    Q: ConstInt,
    P: ConstInt,
    N: ConstInt,
    NS: ConstInt,
    HL: ConstInt,
    D_MODE: ConstInt,
    HAS_Z: ConstBool,
    SEGMENTED: ConstBool,
    LAT: ConstInt,
    HINT: ConstBool,
    FOLD: ConstBool,
):
    """The same output as compute_out_kernel, one CTA per (HL heads of one group, whole chunk,
    batch): the chunk's C·Bᵀ is computed once for all HL heads, and the heads are walked in a
    loop, so that one head's state and x loads can be in flight during the previous head's
    products. The causal decay is one exponential per element of the (Q, Q) tile: splitting it
    into half-chunk blocks with a row times column factor below the diagonal, as
    compute_out_kernel does, was slower (H200, run 44)."""
    head0 = ct.bid(0) * HL
    chunk = ct.bid(1)
    batch = ct.bid(2)
    group = head0 // heads_per_group
    slices = N // NS
    mma_dtype = ct.tfloat32 if x.dtype == ct.float32 else x.dtype

    c_first = _c_slice(C, batch, chunk, group, 0, Q, NS, mma_dtype)
    cb = _c_times_b(C, B, c_first, batch, chunk, group, chunk, Q, Q, NS, slices, mma_dtype)
    rows = ct.arange(Q, dtype=ct.int32)
    causal = rows[:, None] >= rows[None, :]
    for i in range(HL):
        head = head0 + i
        dA, dt = _k_decays(dA_cumsum, dt_out, batch, head, chunk, 0, Q, LAT, HINT)
        acc = _carried_state(
            C, states, seg_start, seg_decay, c_first, batch, chunk, head, chunk, group, seg_len,
            Q, P, NS, slices, mma_dtype, SEGMENTED, FOLD,
        ) * exp2(dA)[:, None]  # fmt: skip
        x_c = _x_rows(x, batch, chunk, head, Q, P, LAT)
        weight = _causal_weight(cb, dA, dA, dt, causal, mma_dtype)
        acc = ct.mma(weight, x_c.astype(mma_dtype), acc)
        _finish(acc, x_c, D, z, out, batch, chunk, head, Q, P, D_MODE, HAS_Z)


# Two warpgroups for the chunk kernel's (Q, Q) tiles: with one, 128-row chunks spill 750-1040
# bytes a thread at 255 or 128 registers; with two, 168 registers (CPU builds, sm_90).
compute_out_chunk_kernel_8_warps = compute_out_chunk_kernel.replace_hints(num_worker_warps=8)


def compute_out(
    x: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    state_pass: StatePass,
    dt_out: torch.Tensor,
    dA_cumsum: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    config: SSDConfig = DEFAULT_CONFIG,
) -> torch.Tensor:
    """Launch compute_out; returns out (b, l, h, p) in x's dtype."""
    out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    grid, kernel, args = compute_out_launch(
        x, B, C, state_pass, dt_out, dA_cumsum, D, z, out, config
    )
    # Launched plainly, after its predecessor has finished: the wait a programmatic dependent must
    # make costs compute_out's many short CTAs more than the launch gap it saves (change 18).
    launch(grid, kernel, args, dependent=False)
    return out


def compute_out_tiles(config: SSDConfig, chunk_size: int) -> tuple[int, int]:
    """(rows per CTA, causal k-tile) of compute_out, clamped to the chunk; chunk_cb tiles alike."""
    tm = min(config.out_block_m, chunk_size)
    return tm, min(config.out_block_k, tm)


def cb_dtype(config: SSDConfig, input_dtype: torch.dtype) -> torch.dtype:
    """dtype chunk_cb stores C·Bᵀ in under `config.out_cb`."""
    return torch.float32 if config.out_cb == 1 else input_dtype


def compute_out_launch(
    x: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    state_pass: StatePass,
    dt_out: torch.Tensor,
    dA_cumsum: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    out: torch.Tensor,
    config: SSDConfig,
) -> tuple[tuple[int, int, int], object, tuple]:
    """(grid, kernel, arguments) of one launch: shared by the wrapper and the autotuner. With
    `config.out_cb` this also launches chunk_cb, whose output the arguments hold."""
    batch, _, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    tm, tk = compute_out_tiles(config, chunk_size)
    n_tile = pow2_tile(dstate)
    ns = min(config.out_slice_n, n_tile)
    d_mode = D_NONE if D is None else (D_PER_HEAD if D.dim() == 1 else D_PER_HEAD_DIM)
    d_arg = D if D is not None else torch.empty(1, device=x.device)
    z_arg = z if z is not None else torch.empty(1, 1, 1, 1, device=x.device, dtype=x.dtype)
    heads_per_group = nheads // ngroups
    sp = state_pass
    segmented = sp.segments > 1
    unused = torch.empty(1, 1, 1, device=x.device)
    seg_args = (
        sp.seg_start if segmented else unused.view(1, 1, 1, 1, 1),
        sp.seg_decay if segmented else torch.empty_like(unused),
    )
    fold = segmented and bool(config.out_fold_segments)
    if config.out_chunk_heads and chunk_size <= CHUNK_KERNEL_MAX_Q:
        hl = math.gcd(config.out_chunk_heads, heads_per_group)
        grid = (nheads // hl, nchunks, batch)
        kernel = with_occupancy(compute_out_chunk_kernel_8_warps, config.out_occupancy)
        args = (
            x, B, C, sp.states, *seg_args, dt_out, dA_cumsum, d_arg, z_arg, out,
            heads_per_group, sp.seg_len, chunk_size, pow2_tile(headdim), n_tile, ns, hl, d_mode,
            z is not None, segmented, config.out_latency, bool(config.out_hint_decays), fold,
        )  # fmt: skip
        return grid, kernel, args
    hb = config.out_heads if heads_per_group % config.out_heads == 0 else 1
    grid = (nheads // hb, nchunks * (chunk_size // tm), batch)
    kernel = with_occupancy(compute_out_kernel, config.out_occupancy)
    cb_pre = bool(config.out_cb)
    cb = (
        chunk_cb(C, B, chunk_size, tm, tk, cb_dtype(config, x.dtype), bool(config.dependent_launch))
        if cb_pre
        else torch.empty(1, 1, 1, 1, 1, device=x.device)
    )
    args = (
        x, B, C, cb, sp.states, *seg_args, dt_out, dA_cumsum, d_arg, z_arg, out, heads_per_group,
        sp.seg_len, chunk_size, pow2_tile(headdim), n_tile, ns, tm, tk, hb, d_mode, z is not None,
        segmented, cb_pre, bool(config.out_rank1), config.out_latency,
        bool(config.out_hint_decays), fold,
    )  # fmt: skip
    return grid, kernel, args
