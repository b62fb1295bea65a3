"""walk_out: the state walk and the output in one kernel, one walker per head over its whole state.

With the walk's CARRY (fwd_pass_state.py) each walker already multiplies its step's C rows by the
state entering the chunk and stores them for compute_out, which reads them back beside x and writes
the output: at 64K/128/256 those rows are 1 GiB written and read again. Here the walker finishes
its step's output rows itself, out[m] = exp(dA[m])·C[m]·hᵀ + Σ_{k≤m} (C[m]·B[k])·exp(dA[m] − dA[k])
·dt[k]·x[k] + D·x[m], gated by silu(z[m]), with C·Bᵀ read in (TQ, TQ) tiles from chunk_cb's fp32
product, and compute_out is not launched. The intra-chunk and output work hangs off the walk's
chain (only the state update feeds the next chunk), so it can overlap the next step's loads.
Tiles wholly before the step's rows take their decay as a row times a column factor about the
step's first row (compute_out.py's RANK1), both at most 1; the diagonal tile one exponential per
element, masked in the exponent.
"""

from __future__ import annotations

import cuda.tile as ct
import torch

from kernels.cutile.chunk_cb import chunk_cb
from kernels.cutile.config import SSDConfig, with_occupancy
from kernels.cutile.decay import LOG2E, exp2
from kernels.cutile.fwd_pass_state import (
    _chunk_weights,
    _initial_state,
    _step_rows,
    _step_tile,
    _weighted_x_b,
)
from kernels.cutile.indices import group_of
from kernels.cutile.launch import follow_previous, launch
from kernels.cutile.out_tiles import (
    D_NONE,
    D_PER_HEAD,
    D_PER_HEAD_DIM,
    causal_weight,
    finish,
    x_tile,
)
from kernels.cutile.tiles import pow2_tile

ConstInt = ct.Constant[int]
ConstBool = ct.Constant[bool]


def _cb_tile(cb, batch, chunk, group, m_block, k_block, TQ: int):
    """The fp32 (TQ, TQ) tile of chunk_cb's C·Bᵀ at row block m_block, column block k_block."""
    return ct.load(
        cb, index=(batch, chunk, group, m_block, k_block), shape=(1, 1, 1, TQ, TQ), latency=2
    ).reshape((TQ, TQ))


@ct.kernel
def walk_out_kernel(
    x,  # (b, l, h, p)
    B,  # (b, l, g, n)
    C,  # (b, l, g, n)
    cb,  # (b, nchunks, g, Q, Q) float32 from chunk_cb in (TQ, TQ) tiles, valid on/below diagonal
    dt_out,  # (b, h, nchunks, Q) float32
    dA_cumsum,  # (b, h, nchunks, Q) float32
    weight,  # (b, h, nchunks, Q) float32: chunk_cumsum's exp(dA_last − dA)·dt
    initial_states,  # (b, h, p, n) float32 (unused unless HAS_INIT)
    D,  # (h,) or (h, p) float32 (unused when D_MODE is D_NONE)
    z,  # (b, l, h, p) (unused unless HAS_Z)
    out,  # (b, l, h, p)
    final,  # (b, h, p, n) float32: the state after the last chunk (unused unless FINAL)
    nchunks: int,
    heads_per_group: int,
    Q: ConstInt,
    P: ConstInt,
    N: ConstInt,
    TQ: ConstInt,
    LAT: ConstInt,
    D_MODE: ConstInt,
    HAS_Z: ConstBool,
    HAS_INIT: ConstBool,
    FINAL: ConstBool,
    CHAINED: ConstBool,
):
    follow_previous(CHAINED)
    head = ct.bid(0)
    batch = ct.bid(1)
    group = group_of(head, heads_per_group, B.shape[2])
    mma_dtype = ct.tfloat32 if x.dtype == ct.float32 else x.dtype
    steps = Q // TQ
    rows = ct.arange(TQ, dtype=ct.int32)
    diagonal = rows[:, None] >= rows[None, :]

    state = _initial_state(initial_states, batch, head, 0, 0, P, N, HAS_INIT)
    for chunk in range(nchunks):
        h_t = ct.transpose(state.astype(mma_dtype))  # rounded as a stored state would be
        dA, w, dA_last = _chunk_weights(dA_cumsum, dt_out, weight, batch, head, chunk, Q, LAT, True)
        dt = ct.load(dt_out, index=(batch, head, chunk, 0), shape=(1, 1, 1, Q), latency=LAT)
        dt = dt.reshape((Q,))
        dA2 = dA * LOG2E
        acc = state * exp2(dA_last)
        for step in range(steps):
            row_block = chunk * steps + step
            b = _step_tile(B, batch, row_block, group, 0, TQ, N, LAT)
            c = _step_tile(C, batch, row_block, group, 0, TQ, N, LAT)
            dA_m = _step_rows(dA2, step, Q, TQ)
            anchor = ct.extract(dA2, index=(step * TQ,), shape=(1,))
            # C·hᵀ scaled to the anchor, then the tiles before the step's rows at their column
            # factor, then the row factor exp(dA[m] − anchor) over both.
            o = ct.mma(c.astype(mma_dtype), h_t, ct.zeros((TQ, P), dtype=ct.float32))
            o = o * exp2(anchor)
            for k_block in range(step):
                column = exp2(anchor - _step_rows(dA2, k_block, Q, TQ)) * _step_rows(
                    dt, k_block, Q, TQ
                )
                w_k = _cb_tile(cb, batch, chunk, group, step, k_block, TQ) * column[None, :]
                x_k = x_tile(x, batch, chunk * steps + k_block, head, TQ, P, mma_dtype, LAT)
                o = ct.mma(w_k.astype(mma_dtype), x_k, o)
            o = o * exp2(dA_m - anchor)[:, None]
            x_m = x_tile(x, batch, row_block, head, TQ, P, x.dtype, LAT)
            w_m = causal_weight(
                _cb_tile(cb, batch, chunk, group, step, step, TQ),
                dA_m, dA_m, _step_rows(dt, step, Q, TQ), diagonal, mma_dtype,
            )  # fmt: skip
            o = ct.mma(w_m, x_m.astype(mma_dtype), o)
            x_m = x_m.astype(ct.float32)
            finish(o, x_m, D, z, out, batch, row_block, head, TQ, P, D_MODE, HAS_Z)
            acc = _weighted_x_b(
                acc, x, b, dA, w, dA_last, batch, head, chunk, step, steps,
                Q, P, TQ, True, mma_dtype, LAT, True,
            )  # fmt: skip
        state = acc
    if FINAL:
        ct.store(final, index=(batch, head, 0, 0), tile=state.reshape((1, 1, P, N)))


def walk_out(
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
    final_states: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Launch chunk_cb and walk_out; returns (out, final states or None when not asked for)."""
    batch, _, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    tq = min(config.state_block_q, chunk_size)
    dependent = bool(config.dependent_launch)
    cb = chunk_cb(C, B, chunk_size, tq, tq, torch.float32, dependent)
    device = x.device
    out = torch.empty(x.shape, device=device, dtype=x.dtype)
    final = (
        torch.empty(batch, nheads, headdim, dstate, device=device, dtype=torch.float32)
        if final_states
        else torch.empty(1, 1, 1, 1, device=device)
    )
    d_mode = D_NONE if D is None else (D_PER_HEAD if D.dim() == 1 else D_PER_HEAD_DIM)
    unused = torch.empty(1, 1, 1, 1, device=device)
    args = (
        x, B, C, cb, dt_out, dA_cumsum, weight,
        initial_states if initial_states is not None else unused,
        D if D is not None else torch.empty(1, device=device),
        z if z is not None else torch.empty(1, 1, 1, 1, device=device, dtype=x.dtype),
        out, final, nchunks, nheads // ngroups, chunk_size, pow2_tile(headdim),
        pow2_tile(dstate), tq, config.state_latency, d_mode, z is not None,
        initial_states is not None, final_states, dependent,
    )  # fmt: skip
    kernel = with_occupancy(walk_out_kernel, config.state_occupancy)
    launch((nheads, batch, 1), kernel, args, dependent)
    return out, final if final_states else None
