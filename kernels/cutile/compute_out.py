"""compute_out: per chunk, the output from the carried state plus the causal intra-chunk part.

out[m] = exp(dA[m])·C[m]·h_chunkᵀ + Σ_{k≤m} (C[m]·B[k]) · exp(dA[m] − dA[k]) · dt[k] · x[k]
         + D·x[m], then optionally · silu(z[m]).
One CTA per (head, TM rows of a chunk, batch), heads fastest so neighbouring CTAs share C/B tiles
in L2. The C·Bᵀ tile lives only in registers: it is masked, decayed, rounded to the input dtype
(as Triton does) and fed straight into the next mma. The causal mask is applied to the exponent
(−inf above the diagonal), so no exponential of a positive number is ever taken.
"""

from __future__ import annotations

import cuda.tile as ct
import torch

from kernels.cutile.tiles import pow2_tile

ConstInt = ct.Constant[int]
ConstBool = ct.Constant[bool]

D_NONE, D_PER_HEAD, D_PER_HEAD_DIM = 0, 1, 2


@ct.kernel
def compute_out_kernel(
    x,  # (b, l, h, p)
    B,  # (b, l, g, n)
    C,  # (b, l, g, n)
    states,  # (b, nchunks, h, p, n): state entering each chunk
    dt_out,  # (b, h, nchunks, Q) float32
    dA_cumsum,  # (b, h, nchunks, Q) float32
    D,  # (h,) or (h, p) float32 (unused when D_MODE is D_NONE)
    z,  # (b, l, h, p) (unused unless HAS_Z)
    out,  # (b, l, h, p)
    heads_per_group: int,
    Q: ConstInt,
    P: ConstInt,
    N: ConstInt,
    TM: ConstInt,
    TK: ConstInt,
    D_MODE: ConstInt,
    HAS_Z: ConstBool,
):
    head = ct.bid(0)
    row_block = ct.bid(1)  # TM-row block along the sequence
    batch = ct.bid(2)
    group = head // heads_per_group
    blocks_per_chunk = Q // TM
    chunk = row_block // blocks_per_chunk
    m_block = row_block % blocks_per_chunk
    zero = ct.PaddingMode.ZERO
    mma_dtype = ct.tfloat32 if x.dtype == ct.float32 else x.dtype

    c_m = (
        ct.load(C, index=(batch, row_block, group, 0), shape=(1, TM, 1, N), padding_mode=zero)
        .reshape((TM, N))
        .astype(mma_dtype)
    )
    dA_m = ct.load(dA_cumsum, index=(batch, head, chunk, m_block), shape=(1, 1, 1, TM)).reshape(
        (TM,)
    )

    # Carried state: C[m]·hᵀ, the state loaded transposed as an (N, P) tile.
    state_t = ct.load(
        states,
        index=(batch, chunk, head, 0, 0),
        shape=(1, 1, 1, N, P),
        order=(0, 1, 2, 4, 3),
        padding_mode=zero,
    ).reshape((N, P))
    acc = ct.mma(c_m, state_t.astype(mma_dtype), ct.zeros((TM, P), dtype=ct.float32))
    acc = acc * ct.exp(dA_m)[:, None]

    # Causal intra-chunk part, k-tiles up to and including the diagonal.
    rows = m_block * TM + ct.arange(TM, dtype=ct.int32)
    k_blocks_per_chunk = Q // TK
    for k_block in range((m_block + 1) * (TM // TK)):
        b_k = ct.load(
            B,
            index=(batch, 0, group, chunk * k_blocks_per_chunk + k_block),
            shape=(1, N, 1, TK),
            order=(0, 3, 2, 1),
            padding_mode=zero,
            latency=2,
        ).reshape((N, TK))
        cb = ct.mma(c_m, b_k.astype(mma_dtype), ct.zeros((TM, TK), dtype=ct.float32))
        dA_k = ct.load(dA_cumsum, index=(batch, head, chunk, k_block), shape=(1, 1, 1, TK)).reshape(
            (TK,)
        )
        dt_k = ct.load(dt_out, index=(batch, head, chunk, k_block), shape=(1, 1, 1, TK)).reshape(
            (TK,)
        )
        cols = k_block * TK + ct.arange(TK, dtype=ct.int32)
        exponent = ct.where(
            rows[:, None] >= cols[None, :], dA_m[:, None] - dA_k[None, :], -float("inf")
        )
        weight = (cb * ct.exp(exponent) * dt_k[None, :]).astype(mma_dtype)
        x_k = ct.load(
            x,
            index=(batch, chunk * k_blocks_per_chunk + k_block, head, 0),
            shape=(1, TK, 1, P),
            padding_mode=zero,
            latency=4,
        ).reshape((TK, P))
        acc = ct.mma(weight, x_k.astype(mma_dtype), acc)

    if D_MODE != D_NONE:
        x_m = (
            ct.load(x, index=(batch, row_block, head, 0), shape=(1, TM, 1, P), padding_mode=zero)
            .reshape((TM, P))
            .astype(ct.float32)
        )
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


def compute_out(
    x: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    states: torch.Tensor,
    dt_out: torch.Tensor,
    dA_cumsum: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    block_m: int = 64,
    block_k: int = 64,
) -> torch.Tensor:
    """Launch compute_out; returns out (b, l, h, p) in x's dtype."""
    batch, seqlen, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    device = x.device
    out = torch.empty(batch, seqlen, nheads, headdim, device=device, dtype=x.dtype)
    tm = min(block_m, chunk_size)
    tk = min(block_k, tm)
    d_mode = D_NONE if D is None else (D_PER_HEAD if D.dim() == 1 else D_PER_HEAD_DIM)
    d_arg = D if D is not None else torch.empty(1, device=device)
    z_arg = z if z is not None else torch.empty(1, 1, 1, 1, device=device, dtype=x.dtype)
    grid = (nheads, nchunks * (chunk_size // tm), batch)
    ct.launch(
        torch.cuda.current_stream(),
        grid,
        compute_out_kernel,
        (
            x,
            B,
            C,
            states,
            dt_out,
            dA_cumsum,
            d_arg,
            z_arg,
            out,
            nheads // ngroups,
            chunk_size,
            pow2_tile(headdim),
            pow2_tile(dstate),
            tm,
            tk,
            d_mode,
            z is not None,
        ),
    )
    return out
