"""compute_out_direct: the forward's output with no state walk, for short sequences.

One CTA per (head, chunk, batch) sums the state entering its chunk straight from the chunks
before it:
    h(c) = Σ_{j<c} exp(decay from the end of chunk j to the start of c) · X_jᵀ·(B_j ⊙ w_j)
           (+ exp(decay from the sequence's start to c) · h0),
with w = chunk_cumsum's weights exp(dA_last − dA)·dt. Chunk c redoes c chunk products where the
walk does one, so the work grows with the square of the chunk count; in return every chunk's CTA
runs at once, the walk's serial chain and its launch (and segment_scan's) are gone, and no state
round-trips through memory. The sum runs from the nearest chunk back, its decay a scalar carried
along, so the products accumulate into one accumulator without waiting on each other. CTAs of the
last chunks, the longest sums, are launched first. The CTA of the last chunk adds its own chunk
for the final state. The chunk's own part is compute_out_chunk's for one head.
"""

from __future__ import annotations

import cuda.tile as ct
import torch

from kernels.cutile.compute_out import epilogue_args
from kernels.cutile.config import CHUNK_KERNEL_MAX_Q, SSDConfig, with_occupancy
from kernels.cutile.decay import LOG2E, exp2
from kernels.cutile.indices import group_of
from kernels.cutile.launch import follow_previous, launch
from kernels.cutile.out_tiles import (
    c_slice,
    c_times_b,
    causal_weight,
    finish,
    k_decays,
    x_tile,
)
from kernels.cutile.tiles import pow2_tile

ConstInt = ct.Constant[int]
ConstBool = ct.Constant[bool]


def _chunk_product(acc, x, B, w, batch, head, group, chunk, s, Q: int, P: int, NS: int,
                   mma_dtype, LAT: int):  # fmt: skip
    """acc + X_chunkᵀ·(B_chunk ⊙ w) over dstate slice s, the weights on x (the operand computed
    in registers is the mma's left one, as in the walk)."""
    xt = ct.load(
        x,
        index=(batch, 0, head, chunk),
        shape=(1, P, 1, Q),
        order=(0, 3, 2, 1),
        padding_mode=ct.PaddingMode.ZERO,
        latency=LAT,
    ).reshape((P, Q))
    b = ct.load(
        B,
        index=(batch, chunk, group, s),
        shape=(1, Q, 1, NS),
        padding_mode=ct.PaddingMode.ZERO,
        latency=LAT,
    ).reshape((Q, NS))
    xw = (xt.astype(ct.float32) * w[None, :]).astype(mma_dtype)
    return ct.mma(xw, b.astype(mma_dtype), acc)


def _chunk_weights(dA_cumsum, weight, batch, head, chunk, Q: int, LAT: int):
    """chunk_cumsum's weights of one chunk and its total decay dA_last in log2 units (taken from
    the dA tile, as the walk does)."""
    index = (batch, head, chunk, 0)
    dA = ct.load(dA_cumsum, index=index, shape=(1, 1, 1, Q), latency=LAT).reshape((Q,))
    w = ct.load(weight, index=index, shape=(1, 1, 1, Q), latency=LAT).reshape((Q,))
    return w, ct.extract(dA, index=(Q - 1,), shape=(1,)) * LOG2E


@ct.kernel
def compute_out_direct_kernel(
    x,  # (b, l, h, p)
    B,  # (b, l, g, n)
    C,  # (b, l, g, n)
    dt_out,  # (b, h, nchunks, Q) float32
    dA_cumsum,  # (b, h, nchunks, Q) float32
    weight,  # (b, h, nchunks, Q) float32: chunk_cumsum's exp(dA_last − dA)·dt
    initial_states,  # (b, h, p, n) float32 (unused unless HAS_INIT)
    D,  # (h,) or (h, p) float32 (unused when D_MODE is D_NONE)
    z,  # (b, l, h, p) (unused unless HAS_Z)
    out,  # (b, l, h, p)
    final,  # (b, h, p, n) float32: the state after the last chunk
    nchunks: int,
    heads_per_group: int,
    Q: ConstInt,
    P: ConstInt,
    N: ConstInt,
    NS: ConstInt,
    D_MODE: ConstInt,
    HAS_Z: ConstBool,
    HAS_INIT: ConstBool,
    LAT: ConstInt,
    CHAINED: ConstBool,
):
    follow_previous(CHAINED)
    head = ct.bid(0)
    chunk = nchunks - 1 - ct.bid(1)  # the longest sums first
    batch = ct.bid(2)
    group = group_of(head, heads_per_group, B.shape[2])
    slices = N // NS
    mma_dtype = ct.tfloat32 if x.dtype == ct.float32 else x.dtype

    c_first = c_slice(C, batch, chunk, group, 0, Q, NS, mma_dtype)
    acc = ct.zeros((Q, P), dtype=ct.float32)
    for s in range(slices):
        c_s = c_first
        if s > 0:
            c_s = c_slice(C, batch, chunk, group, s, Q, NS, mma_dtype)
        state = ct.zeros((P, NS), dtype=ct.float32)
        decay = ct.zeros((1,), dtype=ct.float32)  # log2, from the end of chunk j to this chunk
        for i in range(chunk):
            j = chunk - 1 - i
            w, dA_last = _chunk_weights(dA_cumsum, weight, batch, head, j, Q, LAT)
            state = _chunk_product(
                state, x, B, w * exp2(decay), batch, head, group, j, s, Q, P, NS, mma_dtype, LAT
            )
            decay = decay + dA_last
        if HAS_INIT:
            start = ct.load(
                initial_states,
                index=(batch, head, 0, s),
                shape=(1, 1, P, NS),
                padding_mode=ct.PaddingMode.ZERO,
            ).reshape((P, NS))
            state = state + exp2(decay) * start
        if chunk == nchunks - 1:
            w, dA_last = _chunk_weights(dA_cumsum, weight, batch, head, chunk, Q, LAT)
            after = _chunk_product(
                state * exp2(dA_last), x, B, w, batch, head, group, chunk, s, Q, P, NS,
                mma_dtype, LAT,
            )  # fmt: skip
            ct.store(final, index=(batch, head, 0, s), tile=after.reshape((1, 1, P, NS)))
        acc = ct.mma(c_s, ct.transpose(state.astype(mma_dtype)), acc)

    dA, dt = k_decays(dA_cumsum, dt_out, batch, head, chunk, 0, Q, LAT, True)
    acc = acc * exp2(dA)[:, None]
    cb = c_times_b(C, B, c_first, batch, chunk, group, chunk, Q, Q, NS, slices, mma_dtype)
    rows = ct.arange(Q, dtype=ct.int32)
    x_c = x_tile(x, batch, chunk, head, Q, P, ct.float32, LAT)
    acc = ct.mma(causal_weight(cb, dA, dA, dt, rows[:, None] >= rows[None, :], mma_dtype),
                 x_c.astype(mma_dtype), acc)  # fmt: skip
    finish(acc, x_c, D, z, out, batch, chunk, head, Q, P, D_MODE, HAS_Z)


# Two warpgroups for the (Q, Q) tiles, as compute_out_chunk's kernel takes.
compute_out_direct_kernel_8_warps = compute_out_direct_kernel.replace_hints(num_worker_warps=8)


def uses_direct_states(config: SSDConfig, chunk_size: int) -> bool:
    """Whether the forward runs this kernel in place of the walk and compute_out."""
    return bool(config.out_direct) and chunk_size <= CHUNK_KERNEL_MAX_Q


def compute_out_direct(
    x: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    dt_out: torch.Tensor,
    dA_cumsum: torch.Tensor,
    weight: torch.Tensor,
    initial_states: torch.Tensor | None,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    config: SSDConfig,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch compute_out_direct; returns (out in x's dtype, final states in fp32)."""
    batch, _, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    final = torch.empty(batch, nheads, headdim, dstate, device=x.device, dtype=torch.float32)
    n_tile = pow2_tile(dstate)
    d_mode, d_arg, z_arg = epilogue_args(D, z, x)
    unused = torch.empty(1, 1, 1, 1, device=x.device)
    init = initial_states if initial_states is not None else unused
    args = (
        x, B, C, dt_out, dA_cumsum, weight, init, d_arg, z_arg, out, final, nchunks,
        nheads // ngroups, chunk_size, pow2_tile(headdim), n_tile,
        min(config.out_slice_n, n_tile), d_mode, z is not None, initial_states is not None,
        config.out_latency, bool(config.dependent_launch),
    )  # fmt: skip
    kernel = with_occupancy(compute_out_direct_kernel_8_warps, config.out_occupancy)
    launch((nheads, nchunks, batch), kernel, args, bool(config.dependent_launch))
    return out, final
