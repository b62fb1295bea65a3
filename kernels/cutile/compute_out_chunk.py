"""compute_out over whole chunks: the same output as compute_out.py's kernel, one CTA per (HL
heads of one group, whole chunk, batch). The chunk's C·Bᵀ is computed once for all HL heads, and
the heads are walked in a loop, so that one head's state and x loads can be in flight during the
previous head's products. The causal decay is one exponential per element of the (Q, Q) tile:
splitting it into half-chunk blocks with a row times column factor below the diagonal, as
compute_out.py's kernel does, was slower (H200, run 44). The carried state's product and the
intra-chunk product go into separate accumulators, summed once both are done: scaling the first
by exp(dA) before the second made each head wait for its C·hᵀ mma in mid-chain (this kernel
−3 to −6 % with two, H200, run 187, although the second accumulator costs 64 B of spills a
thread on sm_90). The launch is compute_out.py's `compute_out_launch`.
"""

from __future__ import annotations

import cuda.tile as ct

from kernels.cutile.decay import exp2
from kernels.cutile.indices import group_of
from kernels.cutile.out_tiles import (
    c_slice,
    c_times_b,
    carried_state,
    causal_weight,
    finish,
    k_decays,
    x_tile,
)

ConstInt = ct.Constant[int]
ConstBool = ct.Constant[bool]


@ct.kernel
def compute_out_chunk_kernel(
    x,  # (b, l, h, p)
    B,  # (b, l, g, n)
    C,  # (b, l, g, n)
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
    HL: ConstInt,
    D_MODE: ConstInt,
    HAS_Z: ConstBool,
    SEGMENTED: ConstBool,
    LAT: ConstInt,
    HINT: ConstBool,
    FOLD: ConstBool,
    CARRY: ConstBool,
):
    head0 = ct.bid(0) * HL
    chunk = ct.bid(1)
    batch = ct.bid(2)
    group = group_of(head0, heads_per_group, B.shape[2])
    slices = N // NS
    mma_dtype = ct.tfloat32 if x.dtype == ct.float32 else x.dtype

    c_first = c_slice(C, batch, chunk, group, 0, Q, NS, mma_dtype)
    cb = c_times_b(C, B, c_first, batch, chunk, group, chunk, Q, Q, NS, slices, mma_dtype)
    rows = ct.arange(Q, dtype=ct.int32)
    causal = rows[:, None] >= rows[None, :]
    for i in range(HL):
        head = head0 + i
        dA, dt = k_decays(dA_cumsum, dt_out, batch, head, chunk, 0, Q, LAT, HINT)
        carried = carried_state(
            C, states, seg_start, seg_decay, c_first, batch, chunk, head, chunk, group, seg_len,
            Q, P, NS, slices, mma_dtype, SEGMENTED, FOLD, CARRY,
        )  # fmt: skip
        x_c = x_tile(x, batch, chunk, head, Q, P, ct.float32, LAT)
        weight = causal_weight(cb, dA, dA, dt, causal, mma_dtype)
        intra = ct.mma(weight, x_c.astype(mma_dtype), ct.zeros((Q, P), dtype=ct.float32))
        acc = carried * exp2(dA)[:, None] + intra
        finish(acc, x_c, D, z, out, batch, chunk, head, Q, P, D_MODE, HAS_Z)


# Two warpgroups for the chunk kernel's (Q, Q) tiles: with one, 128-row chunks spill 750-1040
# bytes a thread at 255 or 128 registers; with two, 168 registers (CPU builds, sm_90).
compute_out_chunk_kernel_8_warps = compute_out_chunk_kernel.replace_hints(num_worker_warps=8)
