"""compute_out: per chunk, the output from the carried state plus the causal intra-chunk part.

out[m] = exp(dA[m])·C[m]·h_chunkᵀ + Σ_{k≤m} (C[m]·B[k]) · exp(dA[m] − dA[k]) · dt[k] · x[k]
         + D·x[m], then optionally · silu(z[m]).
One CTA per (HB heads of one group, TM rows of a chunk, batch), heads fastest so neighbouring CTAs
share C/B tiles in L2; with HB = 2 each C·Bᵀ tile serves two heads, halving its cost. The C·Bᵀ
tile lives only in registers: it is masked, decayed, rounded to the input dtype (as Triton does)
and fed straight into the next mma. The causal mask is applied to the exponent
(−inf above the diagonal), so no exponential of a positive number is ever taken. dstate is
consumed in NS-wide slices so that large states still fit the occupancy hint; the first slice of
C stays resident, the others are reloaded (from L2) per k-tile. With `out_chunk_heads` the launch
takes compute_out_chunk.py's kernel instead (whole chunks, many heads per CTA). Where the walk
stored C·hᵀ itself (fwd_pass_state's CARRY), both kernels read its rows instead of that product;
where the walk adds those rows to out itself (its FINISH), this kernel runs before it without the
carried term (PARTIAL) and leaves the gate by silu(z) to the walk.
"""

from __future__ import annotations

import math

import cuda.tile as ct
import torch

from kernels.cutile.chunk_cb import ChunkCB, chunk_cb
from kernels.cutile.compute_out_chunk import compute_out_chunk_kernel_8_warps
from kernels.cutile.config import (
    DEFAULT_CONFIG,
    SSDConfig,
    compute_out_tiles,
    reads_chunk_cb,
    uses_chunk_kernel,
    with_occupancy,
)
from kernels.cutile.decay import LOG2E, exp2
from kernels.cutile.fwd_pass_state import StatePass
from kernels.cutile.indices import group_of
from kernels.cutile.launch import follow_previous, launch
from kernels.cutile.out_tiles import (
    D_NONE,
    D_PER_HEAD,
    D_PER_HEAD_DIM,
    c_slice,
    c_times_b,
    carried_state,
    causal_weight,
    finish,
    k_decays,
    x_tile,
)
from kernels.cutile.tiles import pow2_tile

ConstInt = ct.Constant[int]
ConstBool = ct.Constant[bool]


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
    dA_k, dt_k = k_decays(dA_cumsum, dt_out, batch, head, chunk, k_block, TK, LAT, HINT)
    weight = causal_weight(cb, dA_m, dA_k, dt_k, causal, mma_dtype)
    return ct.mma(weight, x_tile(x, batch, k_tile, head, TK, P, mma_dtype, LAT), acc)


def _diagonal_weight(
    cb, dt_out, dA_cumsum, dA_m, batch, head, chunk, k_block, TM: int, mma_dtype, LAT: int,
    HINT: bool,
):  # fmt: skip
    """_intra_chunk's weights over the block's own rows (TK = TM), whose x the caller loads once
    for both this product and D·x."""
    dA_k, dt_k = k_decays(dA_cumsum, dt_out, batch, head, chunk, k_block, TM, LAT, HINT)
    rows = ct.arange(TM, dtype=ct.int32)
    return causal_weight(cb, dA_m, dA_k, dt_k, rows[:, None] >= rows[None, :], mma_dtype)


def _below_diagonal(
    acc, cb, x, dt_out, dA_cumsum, anchor, batch, head, chunk, k_block, k_tile, TK: int, P: int,
    mma_dtype, LAT: int, HINT: bool,
):  # fmt: skip
    """acc + (C·Bᵀ ⊙ exp(anchor − dA[k]) ⊙ dt)·x over one k-tile wholly before the row block.
    exp(dA[m] − dA[k]) = exp(dA[m] − anchor)·exp(anchor − dA[k]) with anchor = dA at the block's
    first row: both factors are at most 1 (dA falls along the chunk), so nothing overflows, and the
    row factor is applied once to the sum, leaving TK exponentials per tile instead of TM·TK."""
    dA_k, dt_k = k_decays(dA_cumsum, dt_out, batch, head, chunk, k_block, TK, LAT, HINT)
    column = exp2(anchor - dA_k) * dt_k
    weight = (cb * column[None, :]).astype(mma_dtype)
    return ct.mma(weight, x_tile(x, batch, k_tile, head, TK, P, mma_dtype, LAT), acc)


def _cb_tile(
    C, B, cb_chunks, cb_scale, c_first, batch, chunk, row_block, group, m_block, k_block, k_tile,
    TM: int, TK: int, NS: int, slices: int, mma_dtype, CB_PRE: bool, CB_SCALED: bool,
):  # fmt: skip
    """The fp32 (TM, TK) tile of C·Bᵀ: read from chunk_cb's output (CB_SCALED: times the tile's
    inverse scale) or computed here."""
    if CB_PRE:
        index = (batch, chunk, group, m_block, k_block)
        cb = (
            ct.load(cb_chunks, index=index, shape=(1, 1, 1, TM, TK), latency=2)
            .reshape((TM, TK))
            .astype(ct.float32)
        )
        if CB_SCALED:
            cb = cb * ct.load(cb_scale, index=index, shape=(1, 1, 1, 1, 1)).reshape((1, 1))
        return cb
    return c_times_b(C, B, c_first, batch, row_block, group, k_tile, TM, TK, NS, slices, mma_dtype)


def _log2_decay(dA_cumsum, batch, head, chunk, block, T: int):
    """dA at the T positions of one block of a chunk, in log2 units (kernels/cutile/decay.py).
    Loaded plainly, not by TMA: tileiras put a TMA load of these few bytes in the shared-memory
    slot the carried state's tile takes next, so the state's load waited until the workers had
    read them, two memory round trips at each CTA's start instead of one (H200: −3.5 to −5.4 % in
    all at dstate 128 and at 128 heads with dstate 64; docs/performance.md, change 68)."""
    index = (batch, head, chunk, block)
    dA = ct.load(dA_cumsum, index=index, shape=(1, 1, 1, T), allow_tma=False)
    return dA.reshape((T,)) * LOG2E


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
    cb_chunks,  # (b, nchunks, g, Q, Q) from chunk_cb, fp32, x's dtype or fp16 (CB_SCALED);
    # unused unless CB_PRE
    cb_scale,  # (b, nchunks, g, Q/TM, Q/TK) float32: chunk_cb's inverse scales (if CB_SCALED)
    states,  # (b, nchunks, h, p, n): state entering each chunk, local to its segment; with
    # CARRY (b, l, h, p): the walk's C[m]·h(chunk)ᵀ rows, read in place of that product
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
    CB_SCALED: ConstBool,
    RANK1: ConstBool,
    LAT: ConstInt,
    HINT: ConstBool,
    FOLD: ConstBool,
    CHAINED: ConstBool,
    CARRY: ConstBool,
    PARTIAL: ConstBool,
):
    follow_previous(CHAINED)
    head = ct.bid(0) * HB  # HB (1 or 2) heads of one group share each C·Bᵀ tile
    row_block = ct.bid(1)  # TM-row block along the sequence
    batch = ct.bid(2)
    group = group_of(head, heads_per_group, B.shape[2])
    blocks_per_chunk = Q // TM
    chunk = row_block // blocks_per_chunk
    m_block = row_block % blocks_per_chunk
    slices = N // NS
    mma_dtype = ct.tfloat32 if x.dtype == ct.float32 else x.dtype

    c_first = c_slice(C, batch, row_block, group, 0, TM, NS, mma_dtype)
    # Per head: the decay of its rows, and (RANK1) the anchor, dA at the block's first row, both
    # in log2 units.
    dA_m0 = _log2_decay(dA_cumsum, batch, head, chunk, m_block, TM)
    anchor0 = _anchor(dA_cumsum, batch, head, chunk, m_block, TM)
    acc0 = ct.zeros((TM, P), dtype=ct.float32)
    if not PARTIAL:
        acc0 = carried_state(
            C, states, seg_start, seg_decay, c_first, batch, chunk, head, row_block, group,
            seg_len, TM, P, NS, slices, mma_dtype, SEGMENTED, FOLD, CARRY,
        ) * _start_scale(dA_m0, anchor0, TM, RANK1)[:, None]  # fmt: skip
    dA_m1 = dA_m0
    anchor1 = anchor0
    acc1 = acc0
    if HB == 2:
        dA_m1 = _log2_decay(dA_cumsum, batch, head + 1, chunk, m_block, TM)
        anchor1 = _anchor(dA_cumsum, batch, head + 1, chunk, m_block, TM)
        if not PARTIAL:
            acc1 = carried_state(
                C, states, seg_start, seg_decay, c_first, batch, chunk, head + 1, row_block,
                group, seg_len, TM, P, NS, slices, mma_dtype, SEGMENTED, FOLD, CARRY,
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
            C, B, cb_chunks, cb_scale, c_first, batch, chunk, row_block, group, m_block, k_block,
            k_tile, TM, TK, NS, slices, mma_dtype, CB_PRE, CB_SCALED,
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

    # With RANK1 and TM = TK the one k-tile left is the block's own rows, whose x D·x needs too:
    # peeled out of the loop, those rows are loaded once (H200: −3 to −9 % in all with segments
    # or pairs of heads, −1 % over chunks of four blocks). Unsegmented single heads over chunks
    # of two blocks lost (128 heads, dstate 64: +3 to +7 % from 2K to 64K; change 54): under
    # Nsight Compute both builds run four CTAs per SM there, and the peeled one waits on the
    # diagonal's x tile (docs/performance.md, "After v27"). With the x rows first (below) they
    # are level with the unpeeled code (run 127), so they still load the rows twice.
    peel = RANK1 and TM == TK and (SEGMENTED or HB == 2 or Q > 2 * TM)
    end = diagonal + TM // TK
    if peel:
        end = diagonal
    rows = m_block * TM + ct.arange(TM, dtype=ct.int32)
    for k_block in range(below, end):
        k_tile = chunk * k_blocks_per_chunk + k_block
        cb = _cb_tile(
            C, B, cb_chunks, cb_scale, c_first, batch, chunk, row_block, group, m_block, k_block,
            k_tile, TM, TK, NS, slices, mma_dtype, CB_PRE, CB_SCALED,
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
    x_m1 = acc1
    if peel:
        # A single head requests the diagonal's x rows before its C·Bᵀ tile, so that the load
        # overlaps that product (H200, dstate 64: −1.9 to −5.3 % in all, run 128). Pairs of heads
        # lost that way (+0.6 to +10.8 %, dstate 128 and 256) and load each head's rows after
        # its weights.
        if HB == 1:
            x_m0 = x_tile(x, batch, row_block, head, TM, P, x.dtype, LAT)
        cb = _cb_tile(
            C, B, cb_chunks, cb_scale, c_first, batch, chunk, row_block, group, m_block, diagonal,
            row_block, TM, TK, NS, slices, mma_dtype, CB_PRE, CB_SCALED,
        )  # fmt: skip
        weight = _diagonal_weight(
            cb, dt_out, dA_cumsum, dA_m0, batch, head, chunk, diagonal, TM, mma_dtype, LAT, HINT
        )
        if HB == 2:
            x_m0 = x_tile(x, batch, row_block, head, TM, P, x.dtype, LAT)
        acc0 = ct.mma(weight, x_m0.astype(mma_dtype), acc0)
        x_m0 = x_m0.astype(ct.float32)
        if HB == 2:
            weight = _diagonal_weight(
                cb, dt_out, dA_cumsum, dA_m1, batch, head + 1, chunk, diagonal, TM, mma_dtype,
                LAT, HINT,
            )  # fmt: skip
            x_m1 = x_tile(x, batch, row_block, head + 1, TM, P, x.dtype, LAT)
            acc1 = ct.mma(weight, x_m1.astype(mma_dtype), acc1)
            x_m1 = x_m1.astype(ct.float32)
    elif D_MODE != D_NONE:
        x_m0 = x_tile(x, batch, row_block, head, TM, P, ct.float32)
    finish(acc0, x_m0, D, z, out, batch, row_block, head, TM, P, D_MODE, HAS_Z)
    if HB == 2:
        if not peel and D_MODE != D_NONE:
            x_m1 = x_tile(x, batch, row_block, head + 1, TM, P, ct.float32)
        finish(acc1, x_m1, D, z, out, batch, row_block, head + 1, TM, P, D_MODE, HAS_Z)


def compute_out(
    x: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    state_pass: StatePass | None,
    dt_out: torch.Tensor,
    dA_cumsum: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    config: SSDConfig = DEFAULT_CONFIG,
    cb: ChunkCB | None = None,
) -> torch.Tensor:
    """Launch compute_out; returns out (b, l, h, p) in x's dtype. `cb`: C·Bᵀ computed already
    (chunk_cb's strided kernel beside the walk), else chunk_cb is launched where it is read.
    `state_pass` None: out without the carried term, which the walk adds after (its `out`; the
    row-block kernel only, and z is then the walk's to apply)."""
    out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    grid, kernel, args = compute_out_launch(
        x, B, C, state_pass, dt_out, dA_cumsum, D, z, out, config, cb
    )
    launch(grid, kernel, args, dependent=chained(config, dA_cumsum.shape[3]))
    return out


def compute_out_launch(
    x: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    state_pass: StatePass | None,
    dt_out: torch.Tensor,
    dA_cumsum: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    out: torch.Tensor,
    config: SSDConfig,
    cb: ChunkCB | None = None,
) -> tuple[tuple[int, int, int], object, tuple]:
    """(grid, kernel, arguments) of compute_out's launch. With `config.out_cb` and no `cb` given
    this also launches chunk_cb, whose output the arguments hold."""
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
    unused = torch.empty(1, 1, 1, device=x.device)
    partial = state_pass is None
    if partial and (z is not None or uses_chunk_kernel(config, chunk_size)):
        raise ValueError("out without the carried term is the row-block kernel's, ungated")
    sp = StatePass(unused.view(1, 1, 1, 1), None, 1, 1, None, None) if partial else state_pass
    segmented = sp.segments > 1
    seg_args = (
        sp.seg_start if segmented else unused.view(1, 1, 1, 1, 1),
        sp.seg_decay if segmented else torch.empty_like(unused),
    )
    fold = segmented and bool(config.out_fold_segments)
    if uses_chunk_kernel(config, chunk_size):
        hl = math.gcd(config.out_chunk_heads, heads_per_group)
        grid = (nheads // hl, nchunks, batch)
        kernel = with_occupancy(compute_out_chunk_kernel_8_warps, config.out_occupancy)
        args = (
            x, B, C, sp.states, *seg_args, dt_out, dA_cumsum, d_arg, z_arg, out,
            heads_per_group, sp.seg_len, chunk_size, pow2_tile(headdim), n_tile, ns, hl, d_mode,
            z is not None, segmented, config.out_latency, bool(config.out_hint_decays), fold,
            sp.carry,
        )  # fmt: skip
        return grid, kernel, args
    hb = config.out_heads if heads_per_group % config.out_heads == 0 else 1
    grid = (nheads // hb, nchunks * (chunk_size // tm), batch)
    kernel = with_occupancy(compute_out_kernel, config.out_occupancy)
    cb_pre = reads_chunk_cb(config, chunk_size)
    if cb is None and cb_pre:  # not computed beside the walk (config.state_cb)
        cb = chunk_cb(
            C, B, chunk_size, tm, tk, config.out_cb, bool(config.dependent_launch),
            occupancy=config.cb_occupancy,
        )  # fmt: skip
    elif cb is None:
        placeholder = torch.empty(1, 1, 1, 1, 1, device=x.device)
        cb = ChunkCB(placeholder, placeholder)
    args = (
        x, B, C, *cb, sp.states, *seg_args, dt_out, dA_cumsum, d_arg, z_arg, out, heads_per_group,
        sp.seg_len, chunk_size, pow2_tile(headdim), n_tile, ns, tm, tk, hb, d_mode, z is not None,
        segmented, cb_pre, cb_pre and config.out_cb == 3, bool(config.out_rank1),
        config.out_latency, bool(config.out_hint_decays), fold, chained(config, chunk_size),
        sp.carry, partial,
    )  # fmt: skip
    return grid, kernel, args


def chained(config: SSDConfig, chunk_size: int) -> bool:
    """Whether compute_out is launched as a programmatic dependent of the kernel before it: where
    the config chains the launches (short problems, and up to CHAIN_SEQLEN and CHAIN_POSITIONS), for
    the row-block kernel. Long problems launch it plainly: the wait costs their many short CTAs
    more than the launch gap it saves (+11 to +12 % at 64K/128/128 and 16K/64/64, change 18); the
    chunk kernel is launched plainly wherever it runs (where a dstate-256 problem chains beyond
    SHORT_POSITIONS, only the kernels before it are chained; changes 41 and 42)."""
    return bool(config.dependent_launch) and not uses_chunk_kernel(config, chunk_size)
