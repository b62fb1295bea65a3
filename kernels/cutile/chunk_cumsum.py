"""chunk_cumsum: per chunk, the processed dt and the log-space cumulative decay cumsum(dt·A).

Computed once and stored, so the two later kernels read it instead of recomputing softplus/exp.
The state walk can compute the same thing itself (`SSDConfig.state_cumsum`), sparing this
launch; both share `dt_and_cumsum`, so the two paths give the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cuda.tile as ct
import torch

ConstInt = ct.Constant[int]
ConstBool = ct.Constant[bool]


@dataclass(frozen=True)
class DtInput:
    """Raw dt and how it becomes the step size: + dt_bias, softplus, clamp to dt_limit."""

    dt: torch.Tensor  # (b, l, h)
    A: torch.Tensor  # (h,) float32
    dt_bias: torch.Tensor | None  # (h,) float32
    softplus: bool
    limit: tuple[float, float]

    def kernel_args(self) -> tuple:
        """(dt, A, dt_bias, seqlen, dt_min, dt_max): the arguments both kernels take."""
        bias = self.dt_bias
        if bias is None:
            bias = torch.empty(1, device=self.dt.device, dtype=torch.float32)
        return (
            self.dt, self.A, bias, self.dt.shape[1], float(self.limit[0]), float(self.limit[1])
        )  # fmt: skip


def dt_and_cumsum(
    dt, A, dt_bias, batch, chunk, hblock, seqlen, dt_min, dt_max,
    Q: int, HB: int, HAS_BIAS: bool, SOFTPLUS: bool,
):  # fmt: skip
    """(processed dt, inclusive cumsum of dt·A), both (Q, HB) float32, for HB heads of a chunk."""
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
    return d, ct.cumsum(d * a[None, :], axis=0)


@ct.kernel
def chunk_cumsum_kernel(
    dt,  # (b, l, h) any float dtype
    A,  # (h,) float32
    dt_bias,  # (h,) float32 (unused when HAS_BIAS is False)
    seqlen: int,
    dt_min: float,
    dt_max: float,
    dt_out,  # (b, h, nchunks, Q) float32: dt after bias/softplus/clamp, 0 past seqlen
    dA_cumsum,  # (b, h, nchunks, Q) float32: inclusive cumsum of dt·A within the chunk
    Q: ConstInt,
    HB: ConstInt,
    HAS_BIAS: ConstBool,
    SOFTPLUS: ConstBool,
):
    chunk = ct.bid(0)
    hblock = ct.bid(1)
    batch = ct.bid(2)
    d, cs = dt_and_cumsum(
        dt, A, dt_bias, batch, chunk, hblock, seqlen, dt_min, dt_max, Q, HB, HAS_BIAS, SOFTPLUS
    )
    # (Q, HB) tiles go to (b, h, nchunks, Q): tile axis 1 is array axis 3, tile axis 3 is axis 1;
    # the index is given in the tile's (permuted) axis order.
    index = (batch, 0, chunk, hblock)
    ct.store(dt_out, index=index, tile=d.reshape((1, Q, 1, HB)), order=(0, 3, 2, 1))
    ct.store(dA_cumsum, index=index, tile=cs.reshape((1, Q, 1, HB)), order=(0, 3, 2, 1))


def cumsum_buffers(dt: torch.Tensor, chunk_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Empty (dt_out, dA_cumsum), both (b, h, nchunks, chunk_size) float32."""
    batch, seqlen, nheads = dt.shape
    nchunks = math.ceil(seqlen / chunk_size)
    dt_out = torch.empty(batch, nheads, nchunks, chunk_size, device=dt.device, dtype=torch.float32)
    return dt_out, torch.empty_like(dt_out)


def chunk_cumsum(
    dt_in: DtInput, chunk_size: int, heads_per_block: int = 8
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch chunk_cumsum; returns (dt_out, dA_cumsum), both (b, h, nchunks, chunk_size) fp32."""
    batch, _, nheads = dt_in.dt.shape
    dt_out, dA_cumsum = cumsum_buffers(dt_in.dt, chunk_size)
    hb = min(heads_per_block, 1 << (nheads - 1).bit_length())
    grid = (dt_out.shape[2], math.ceil(nheads / hb), batch)
    args = (*dt_in.kernel_args(), dt_out, dA_cumsum, chunk_size, hb)
    flags = (dt_in.dt_bias is not None, dt_in.softplus)
    ct.launch(torch.cuda.current_stream(), grid, chunk_cumsum_kernel, args + flags)
    return dt_out, dA_cumsum
