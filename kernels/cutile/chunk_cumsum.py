"""chunk_cumsum: per chunk, the processed dt and the log-space cumulative decay cumsum(dt·A).

Computed once and stored, so the two later kernels read it instead of recomputing softplus/exp.
"""

from __future__ import annotations

import math

import cuda.tile as ct
import torch

from kernels.cutile.decay import LOG2E, exp2
from kernels.cutile.launch import follow_previous, launch

ConstInt = ct.Constant[int]
ConstBool = ct.Constant[bool]


@ct.kernel
def chunk_cumsum_kernel(
    dt,  # (b, l, h) any float dtype
    A,  # (h,) float32
    dt_bias,  # (h,) float32 (unused when HAS_BIAS is False)
    dt_out,  # (b, h, nchunks, Q) float32: dt after bias/softplus/clamp, 0 past seqlen
    dA_cumsum,  # (b, h, nchunks, Q) float32: inclusive cumsum of dt·A within the chunk
    weight,  # (b, h, nchunks, Q) float32: exp(dA[Q-1] − dA)·dt, the walk's (unused unless WEIGHTS)
    seqlen: int,
    dt_min: float,
    dt_max: float,
    Q: ConstInt,
    HB: ConstInt,
    HAS_BIAS: ConstBool,
    SOFTPLUS: ConstBool,
    CHAINED: ConstBool,
    WEIGHTS: ConstBool,
):
    follow_previous(CHAINED)
    chunk = ct.bid(0)
    hblock = ct.bid(1)
    batch = ct.bid(2)
    zero = ct.PaddingMode.ZERO

    d = ct.load(dt, index=(batch, chunk, hblock), shape=(1, Q, HB), padding_mode=zero)
    d = d.reshape((Q, HB)).astype(ct.float32)
    if HAS_BIAS:
        bias = ct.load(dt_bias, index=(hblock,), shape=(HB,), padding_mode=zero)
        d = d + bias[None, :]
    if SOFTPLUS:
        # Same threshold as mamba_ssm: above 20, softplus(x) == x in float32.
        d = ct.where(d <= 20.0, ct.log(1.0 + ct.exp(d)), d)
    d = ct.minimum(ct.maximum(d, dt_min), dt_max)
    pos = chunk * Q + ct.arange(Q, dtype=ct.int32)
    d = ct.where(pos[:, None] < seqlen, d, 0.0)  # padded tail: no decay, no input

    a = ct.load(A, index=(hblock,), shape=(HB,), padding_mode=zero)
    cs = ct.cumsum(d * a[None, :], axis=0)

    # (Q, HB) tiles go to (b, h, nchunks, Q): tile axis 1 is array axis 3, tile axis 3 is axis 1;
    # the index is given in the tile's (permuted) axis order.
    index = (batch, 0, chunk, hblock)
    ct.store(dt_out, index=index, tile=d.reshape((1, Q, 1, HB)), order=(0, 3, 2, 1))
    ct.store(dA_cumsum, index=index, tile=cs.reshape((1, Q, 1, HB)), order=(0, 3, 2, 1))
    if WEIGHTS:
        # The state walk's weights, so its serial chain takes no exponential per element: the
        # decay from each position to the chunk's end (at most 1) times dt.
        last = ct.extract(cs, index=(Q - 1, 0), shape=(1, HB))
        w = exp2(ct.minimum((last - cs) * LOG2E, 0.0)) * d
        ct.store(weight, index=index, tile=w.reshape((1, Q, 1, HB)), order=(0, 3, 2, 1))


def chunk_cumsum(
    dt: torch.Tensor,
    A: torch.Tensor,
    dt_bias: torch.Tensor | None,
    chunk_size: int,
    dt_softplus: bool,
    dt_limit: tuple[float, float],
    heads_per_block: int = 8,
    chained: bool = False,
    weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Launch chunk_cumsum; returns (dt_out, dA_cumsum, the walk's weights or None), each
    (b, h, nchunks, chunk_size) fp32. `chained`: the next kernel is launched as its programmatic
    dependent (kernels/cutile/launch.py), so this one releases it."""
    batch, seqlen, nheads = dt.shape
    nchunks = math.ceil(seqlen / chunk_size)
    dt_out = torch.empty(batch, nheads, nchunks, chunk_size, device=dt.device, dtype=torch.float32)
    dA_cumsum = torch.empty_like(dt_out)
    weight = torch.empty_like(dt_out) if weights else torch.empty(1, 1, 1, 1, device=dt.device)
    has_bias = dt_bias is not None
    bias = dt_bias if has_bias else torch.empty(1, device=dt.device, dtype=torch.float32)
    hb = min(heads_per_block, 1 << (nheads - 1).bit_length())
    grid = (nchunks, math.ceil(nheads / hb), batch)
    # The forward's first kernel: launched plainly, so it starts after whatever came before it.
    launch(
        grid,
        chunk_cumsum_kernel,
        (
            dt,
            A,
            bias,
            dt_out,
            dA_cumsum,
            weight,
            seqlen,
            float(dt_limit[0]),
            float(dt_limit[1]),
            chunk_size,
            hb,
            has_bias,
            dt_softplus,
            chained,
            weights,
        ),
        dependent=False,
    )
    return dt_out, dA_cumsum, weight if weights else None
