"""Tile helpers of compute_out's two kernels (compute_out.py: blocks of a chunk's rows;
compute_out_chunk.py: whole chunks): the loads of C, B, x, the states and the decays, the
products with C, the causal decay weights and the output's epilogue.

Each product over dstate slices picks its slice of C in place (`c_first` for slice 0, else a
load). The same choice as a helper returning from inside the branch builds other machine code at
dstate 256: the chunk kernel at 16K/64/256 spills 128 B, the row-block kernel at 2K/32/256 takes
40 % more instructions (CPU build, sm_90, `scripts/kernel_resources.py --sass`).
"""

from __future__ import annotations

import cuda.tile as ct

from kernels.cutile.decay import LOG2E, exp2

D_NONE, D_PER_HEAD, D_PER_HEAD_DIM = 0, 1, 2


def c_slice(C, batch, row_block, group, s, TM: int, NS: int, mma_dtype):
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


def state_slice(states, batch, slot, head, s, P: int, NS: int):
    """The (NS, P) tile of dstate slice `s` of states[batch, slot, head] (stored (p, n))."""
    return ct.load(
        states,
        index=(batch, slot, head, s, 0),
        shape=(1, 1, 1, NS, P),
        order=(0, 1, 2, 4, 3),
        padding_mode=ct.PaddingMode.ZERO,
    ).reshape((NS, P))


def c_times_state(
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
            c_s = c_slice(C, batch, row_block, group, s, TM, NS, mma_dtype)
        state_t = state_slice(states, batch, slot, head, s, P, NS)
        acc = ct.mma(c_s, state_t.astype(mma_dtype), acc)
    return acc


def carried_state(
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
    CARRY: bool,
):
    """C[m]·h(chunk)ᵀ for one head; with segments, h = h_local + exp(decay since the segment's
    start)·H_segment (see fwd_pass_state). FOLD (only with segments) sums the two in fp32 before
    one mma per slice, the state passing through registers; otherwise the H term is a second
    product whose operands come straight from memory. CARRY: the walk stored these rows
    themselves (`states` is then (b, l, h, p))."""
    if CARRY:
        return x_tile(states, batch, row_block, head, TM, P, ct.float32)
    if FOLD:
        return folded_state(
            C, states, seg_start, seg_decay, c_first, batch, chunk, head, row_block, group,
            seg_len, TM, P, NS, slices, mma_dtype,
        )  # fmt: skip
    acc = c_times_state(
        C, states, c_first, batch, chunk, head, row_block, group, TM, P, NS, slices, mma_dtype
    )
    if SEGMENTED:
        seg = chunk // seg_len
        if seg > 0:
            scale = ct.load(seg_decay, index=(batch, head, chunk), shape=(1, 1, 1))
            acc = acc + scale.reshape((1, 1)) * c_times_state(
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


def folded_state(
    C, states, seg_start, seg_decay, c_first, batch, chunk, head, row_block, group, seg_len,
    TM: int, P: int, NS: int, slices: int, mma_dtype,
):  # fmt: skip
    """C[m]·(h_local + scale·H_segment)ᵀ, the sum taken in the states' stored dtype (packed bf16
    FMAs for bf16 inputs: against an fp32 sum −0.2 to −1.7 % at segmented dstate-64 points, the
    same errors; docs/performance.md, change 38); H of segment 0 is zero (segment_scan), so no
    branch."""
    scale = ct.load(seg_decay, index=(batch, head, chunk), shape=(1, 1, 1)).reshape((1, 1))
    acc = ct.zeros((TM, P), dtype=ct.float32)
    for s in range(slices):
        c_s = c_first
        if s > 0:
            c_s = c_slice(C, batch, row_block, group, s, TM, NS, mma_dtype)
        local = state_slice(states, batch, chunk, head, s, P, NS)
        start = state_slice(seg_start, batch, chunk // seg_len, head, s, P, NS)
        folded = local + scale.astype(local.dtype) * start
        acc = ct.mma(c_s, folded.astype(mma_dtype), acc)
    return acc


def c_times_b(
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
            c_s = c_slice(C, batch, row_block, group, s, TM, NS, mma_dtype)
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


def causal_weight(cb, dA_m, dA_k, dt_k, causal, mma_dtype):
    """C·Bᵀ ⊙ exp(dA[m] − dA[k]) ⊙ dt[k] as mma operand, exponent −inf off the causal mask."""
    exponent = ct.where(causal, dA_m[:, None] - dA_k[None, :], -float("inf"))
    return (cb * exp2(exponent) * dt_k[None, :]).astype(mma_dtype)


def x_tile(x, batch, block, head, T: int, P: int, dtype, latency=None):
    """One head's (T, P) rows of x at sequence block `block` (in units of T), cast to `dtype`:
    the mma operand, or fp32 for the D·x term."""
    return (
        ct.load(
            x,
            index=(batch, block, head, 0),
            shape=(1, T, 1, P),
            padding_mode=ct.PaddingMode.ZERO,
            latency=latency,
        )
        .reshape((T, P))
        .astype(dtype)
    )


def finish(
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


def k_decays(dA_cumsum, dt_out, batch, head, chunk, k_block, TK: int, LAT: int, HINT: bool):
    """dA (log2 units) and dt of one k-tile; HINT loads them with the loop's latency hint, as x
    is loaded. At dstate 256 with four CTAs per SM of compute_out.py's kernel the compiler then
    builds a different kernel
    (64 registers and 54 KB of shared memory instead of 96 and 33 KB): −3 to −6 % in all,
    against +10 to +13 % unhinted (docs/performance.md, change 29)."""
    index = (batch, head, chunk, k_block)
    latency = LAT if HINT else None
    dA = ct.load(dA_cumsum, index=index, shape=(1, 1, 1, TK), latency=latency)
    dt = ct.load(dt_out, index=index, shape=(1, 1, 1, TK), latency=latency)
    return dA.reshape((TK,)) * LOG2E, dt.reshape((TK,))
