"""chunk_cb: C·Bᵀ within each chunk, once per group, for compute_out to read.

Every head of a group uses the same (Q × Q) product C[m]·B[k], so computing it inside compute_out
repeats it once per head (or per head pair); at dstate 256 it costs four times the x product.
Here it is computed once per (chunk, group), stored in fp32 (as Triton keeps it), with `out_cb=2`
in the input dtype, or with `out_cb=3` in fp16 scaled per tile (`scaled`), only the tiles on or
below the diagonal that compute_out reads with the same (TM, TK) tiling, so nothing unwritten is
ever read. The heads of a group read it back from L2 (compute_out orders its grid heads fastest).

Where a one-wave walk leaves SMs idle, `chunk_cb_beside` computes the same product there during
the walk instead: a few CTAs taking turns over the chunks, on a second stream (SSDConfig.state_cb).
Where compute_out runs before the walk, chunk_cb itself can run beside chunk_cumsum on that stream
(SSDConfig.cumsum_cb).
"""

from __future__ import annotations

from typing import NamedTuple

import cuda.tile as ct
import torch

from kernels.cutile.config import with_occupancy
from kernels.cutile.indices import split_index
from kernels.cutile.launch import follow_previous, launch
from kernels.cutile.tiles import pow2_tile

ConstInt = ct.Constant[int]
ConstBool = ct.Constant[bool]

# out_cb=3: each tile's largest magnitude is scaled to CB_PEAK, a power of two well inside fp16's
# 65504, so that no C·Bᵀ overflows fp16 and small ones keep fp16's 11 significant bits instead of
# falling into its subnormals; the scale's inverse is stored per tile for compute_out.
CB_PEAK = 16384.0
CB_TINY = 1e-30  # the floor of a tile's peak: an all-zero tile keeps a finite scale


def scaled(acc):
    """(acc scaled to a peak magnitude of CB_PEAK, the inverse scale as a 0-d tile). A NaN
    element stays NaN; an infinite one makes the whole tile NaN, never a finite answer."""
    scale = CB_PEAK / ct.maximum(ct.max(ct.abs(acc)), CB_TINY)
    return acc * scale, 1.0 / scale


class ChunkCB(NamedTuple):
    """chunk_cb's output as compute_out reads it."""

    values: torch.Tensor  # (b, nchunks, g, Q, Q)
    inv_scale: torch.Tensor  # (b, nchunks, g, Q/TM, Q/TK) float32 (out_cb=3), else a placeholder


def _c_times_b_block(C, B, batch, group, row_block, k_tile, TM: int, TK: int, NS: int, N: int):
    """C[row_block]·B[k_tile]ᵀ, (TM, TK) (the blocks counted along the sequence), summed over
    NS-wide dstate slices."""
    mma_dtype = ct.tfloat32 if C.dtype == ct.float32 else C.dtype
    zero = ct.PaddingMode.ZERO
    acc = ct.zeros((TM, TK), dtype=ct.float32)
    for s in range(N // NS):
        c = ct.load(C, index=(batch, row_block, group, s), shape=(1, TM, 1, NS), padding_mode=zero)
        b = ct.load(
            B, index=(batch, s, group, k_tile), shape=(1, NS, 1, TK), order=(0, 3, 2, 1),
            padding_mode=zero,
        )  # fmt: skip
        acc = ct.mma(
            c.reshape((TM, NS)).astype(mma_dtype), b.reshape((NS, TK)).astype(mma_dtype), acc
        )
    return acc


def _store_block(cb, cb_scale, index, acc, SCALED: bool):
    """Store one (TM, TK) block of C·Bᵀ in cb's dtype at `index` (batch, chunk, group, m, k);
    SCALED: scaled first (`scaled`), its inverse scale stored in cb_scale at the same index."""
    if SCALED:
        acc, inverse = scaled(acc)
        ct.store(cb_scale, index=index, tile=inverse.reshape((1, 1, 1, 1, 1)))
    ct.store(cb, index=index, tile=acc.astype(cb.dtype).reshape((1, 1, 1, *acc.shape)))


@ct.kernel
def chunk_cb_kernel(
    C,  # (b, l, g, n)
    B,  # (b, l, g, n)
    cb,  # (b, nchunks, g, Q, Q) float32, C's dtype or float16 (SCALED); tiles above the
    # diagonal left unwritten
    cb_scale,  # (b, nchunks, g, Q/TM, Q/TK) float32: each tile's inverse scale (if SCALED)
    ngroups: int,
    Q: ConstInt,
    NS: ConstInt,
    N: ConstInt,
    TM: ConstInt,
    TK: ConstInt,
    CHAINED: ConstBool,
    SCALED: ConstBool,
):
    follow_previous(CHAINED)
    row_block = ct.bid(0)  # TM-row block along the sequence
    batch, group = split_index(ct.bid(1), ngroups, C.shape[0])
    blocks_per_chunk = Q // TM
    chunk = row_block // blocks_per_chunk
    m_block = row_block % blocks_per_chunk
    k_blocks_per_chunk = Q // TK
    for k_block in range((m_block + 1) * (TM // TK)):
        k_tile = chunk * k_blocks_per_chunk + k_block
        acc = _c_times_b_block(C, B, batch, group, row_block, k_tile, TM, TK, NS, N)
        _store_block(cb, cb_scale, (batch, chunk, group, m_block, k_block), acc, SCALED)


# The strided kernel's blocks: (STRIDED_ROWS, Q) rows of a chunk's C·Bᵀ over STRIDED_SLICE-wide
# dstate slices (over chunks of 128: C's 16 KB and B's 32 KB tiles, a 32-register accumulator).
STRIDED_ROWS = 64
STRIDED_SLICE = 128


@ct.kernel
def chunk_cb_strided_kernel(
    C,  # (b, l, g, n)
    B,  # (b, l, g, n)
    cb,  # (b, nchunks, g, Q, Q) float32 or C's dtype, every tile written; with SCALED float16,
    # the tiles on or below the diagonal
    cb_scale,  # (b, nchunks, g, Q/TM, Q/TK) float32: inverse scales (if SCALED)
    nchunks: int,
    Q: ConstInt,
    TM: ConstInt,
    TK: ConstInt,
    NS: ConstInt,
    N: ConstInt,
    SCALED: ConstBool,
):
    """A few CTAs beside a one-wave walk, on the SMs it leaves free (SSDConfig.state_cb): CTA
    `first` takes (chunk, group) items first, first + num_blocks(0), …, each whole, in (TM, Q)
    row blocks summed over NS-wide dstate slices as chunk_cb_kernel sums them. SCALED: in
    compute_out's (TM, TK) tiles up to the diagonal, each scaled as chunk_cb_kernel scales it
    (a (TM, Q) block scaled per tile through a 3-D view made the kernel slower than the walk,
    run 231)."""
    first, stride, batch = ct.bid(0), ct.num_blocks(0), ct.bid(1)
    groups = B.shape[2]
    for i in range((nchunks * groups - first + stride - 1) // stride):
        item = first + i * stride
        chunk = item // groups
        group = item - chunk * groups
        for m in range(Q // TM):
            row_block = chunk * (Q // TM) + m
            if SCALED:
                for k in range((m + 1) * (TM // TK)):
                    k_tile = chunk * (Q // TK) + k
                    acc = _c_times_b_block(C, B, batch, group, row_block, k_tile, TM, TK, NS, N)
                    _store_block(cb, cb_scale, (batch, chunk, group, m, k), acc, True)
            else:
                acc = _c_times_b_block(C, B, batch, group, row_block, chunk, TM, Q, NS, N)
                _store_block(cb, cb_scale, (batch, chunk, group, m, 0), acc, False)


def cb_dtype(out_cb: int, input_dtype: torch.dtype) -> torch.dtype:
    """dtype C·Bᵀ is stored in under `SSDConfig.out_cb`: fp32, (2) the input dtype, or (3)
    fp16, scaled per tile."""
    return {1: torch.float32, 2: input_dtype, 3: torch.float16}[out_cb]


def _allocate(C: torch.Tensor, chunk_size: int, out_cb: int, block_m: int, block_k: int) -> ChunkCB:
    """Empty outputs of either chunk_cb kernel, `out_cb`'s dtype, scales per (block_m, block_k)."""
    batch, seqlen, ngroups, _ = C.shape
    nchunks = -(-seqlen // chunk_size)
    values = torch.empty(
        batch, nchunks, ngroups, chunk_size, chunk_size, device=C.device,
        dtype=cb_dtype(out_cb, C.dtype),
    )  # fmt: skip
    scale_shape = (
        (batch, nchunks, ngroups, chunk_size // block_m, chunk_size // block_k)
        if out_cb == 3
        else (1, 1, 1, 1, 1)
    )
    return ChunkCB(values, torch.empty(scale_shape, device=C.device, dtype=torch.float32))


def chunk_cb(
    C: torch.Tensor,
    B: torch.Tensor,
    chunk_size: int,
    block_m: int,
    block_k: int,
    out_cb: int = 1,
    dependent: bool = False,
    aside: bool = False,
    occupancy: int = 0,
) -> ChunkCB:
    """Launch chunk_cb; returns C·Bᵀ (b, nchunks, g, Q, Q) stored as `out_cb` says (fp32 as
    Triton keeps it, C's dtype, or fp16 scaled per tile, the latter two half the traffic), valid
    on and below the diagonal in (block_m, block_k) tiles (the tiling compute_out reads it with).
    `dependent`: launched as a programmatic dependent of the kernel before it; `aside`: on the
    second stream, after `launch.fork` and before `launch.join` (kernels/cutile/launch.py);
    `occupancy`: CTAs per SM (0: the compiler's choice)."""
    batch, _, ngroups, dstate = C.shape
    n_tile = pow2_tile(dstate)
    ns = min(128, n_tile)
    cb = _allocate(C, chunk_size, out_cb, block_m, block_k)
    grid = (cb.values.shape[1] * (chunk_size // block_m), batch * ngroups, 1)
    args = (
        C, B, *cb, ngroups, chunk_size, ns, n_tile, block_m, block_k, dependent, out_cb == 3
    )  # fmt: skip
    launch(grid, with_occupancy(chunk_cb_kernel, occupancy), args, dependent, aside)
    return cb


def beside_rows(chunk_size: int) -> int:
    """Rows of chunk_cb_strided_kernel's blocks, clamped to the chunk: with `out_cb=3` it runs only
    where compute_out's tiles have as many (one scale per block)."""
    return min(STRIDED_ROWS, chunk_size)


def chunk_cb_beside(
    C: torch.Tensor, B: torch.Tensor, chunk_size: int, ctas: int, out_cb: int, block_k: int
) -> ChunkCB:
    """Launch chunk_cb_strided_kernel, `ctas` CTAs per batch entry, on the second stream
    (`launch.fork` first), so that it runs beside what the current stream runs since; returns
    C·Bᵀ (b, nchunks, g, Q, Q) stored as `out_cb` says, scaled (3) per block of compute_out's
    k-tiles `block_k`. Call `launch.join` before anything reads it."""
    batch, seqlen, ngroups, dstate = C.shape
    nchunks = -(-seqlen // chunk_size)
    n_tile = pow2_tile(dstate)
    tm, ns = beside_rows(chunk_size), min(STRIDED_SLICE, n_tile)
    cb = _allocate(C, chunk_size, out_cb, tm, block_k)
    args = (C, B, *cb, nchunks, chunk_size, tm, block_k, ns, n_tile, out_cb == 3)
    launch((ctas, batch, 1), chunk_cb_strided_kernel, args, False, aside=True)
    return cb
