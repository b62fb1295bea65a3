"""fwd_pass_state: each chunk's state contribution and the state jump across chunks, fused.

One CTA owns a (headdim × NB) slice of one head's state and walks the chunks in order:
h_next = exp(dA_last)·h + Xᵀ·(B ⊙ exp(dA_last − dA) ⊙ dt). The decayed state is the initial
accumulator of the tensor-core mma, so the jump costs no extra pass. Only the state entering each
chunk is written (in the input dtype, as Triton does); the fp32 per-chunk contributions never
round-trip through global memory.
"""

from __future__ import annotations

import cuda.tile as ct
import torch

from kernels.cutile.config import DEFAULT_CONFIG, SSDConfig, with_occupancy
from kernels.cutile.tiles import pow2_tile

ConstInt = ct.Constant[int]
ConstBool = ct.Constant[bool]


@ct.kernel
def fwd_pass_state_kernel(
    x,  # (b, l, h, p)
    B,  # (b, l, g, n)
    dt_out,  # (b, h, nchunks, Q) float32
    dA_cumsum,  # (b, h, nchunks, Q) float32
    initial_states,  # (b, h, p, n) float32 (unused unless HAS_INIT)
    states,  # (b, nchunks, h, p, n): state entering each chunk
    final_states,  # (b, h, p, n) float32 (unused unless RETURN_FINAL)
    nchunks: int,
    heads_per_group: int,
    Q: ConstInt,
    P: ConstInt,
    NB: ConstInt,
    TQ: ConstInt,
    HAS_INIT: ConstBool,
    RETURN_FINAL: ConstBool,
):
    nblock = ct.bid(0)
    head = ct.bid(1)
    batch = ct.bid(2)
    group = head // heads_per_group
    zero = ct.PaddingMode.ZERO
    mma_dtype = ct.tfloat32 if x.dtype == ct.float32 else x.dtype
    steps = Q // TQ

    if HAS_INIT:
        state = ct.load(
            initial_states, index=(batch, head, 0, nblock), shape=(1, 1, P, NB), padding_mode=zero
        ).reshape((P, NB))
    else:
        state = ct.zeros((P, NB), dtype=ct.float32)

    for chunk in range(nchunks):
        ct.store(
            states,
            index=(batch, chunk, head, 0, nblock),
            tile=state.reshape((1, 1, 1, P, NB)).astype(states.dtype),
        )
        dA_last = ct.load(dA_cumsum, index=(batch, head, chunk, Q - 1), shape=(1, 1, 1, 1)).reshape(
            (1,)
        )
        acc = state * ct.exp(dA_last)
        for step in range(steps):
            dA = ct.load(dA_cumsum, index=(batch, head, chunk, step), shape=(1, 1, 1, TQ)).reshape(
                (TQ,)
            )
            dt = ct.load(dt_out, index=(batch, head, chunk, step), shape=(1, 1, 1, TQ)).reshape(
                (TQ,)
            )
            # Decay from each position to the chunk end; min(…, 0) keeps exp() at most 1.
            weight = ct.exp(ct.minimum(dA_last - dA, 0.0)) * dt
            # Xᵀ as a (P, TQ) tile: tile axis 1 is x's headdim axis, tile axis 3 its seqlen axis.
            xt = ct.load(
                x,
                index=(batch, 0, head, chunk * steps + step),
                shape=(1, P, 1, TQ),
                order=(0, 3, 2, 1),
                padding_mode=zero,
                latency=4,
            ).reshape((P, TQ))
            b = ct.load(
                B,
                index=(batch, chunk * steps + step, group, nblock),
                shape=(1, TQ, 1, NB),
                padding_mode=zero,
                latency=4,
            ).reshape((TQ, NB))
            b_weighted = (b.astype(ct.float32) * weight[:, None]).astype(mma_dtype)
            acc = ct.mma(xt.astype(mma_dtype), b_weighted, acc)
        state = acc

    if RETURN_FINAL:
        ct.store(final_states, index=(batch, head, 0, nblock), tile=state.reshape((1, 1, P, NB)))


def fwd_pass_state(
    x: torch.Tensor,
    B: torch.Tensor,
    dt_out: torch.Tensor,
    dA_cumsum: torch.Tensor,
    initial_states: torch.Tensor | None,
    return_final_states: bool,
    config: SSDConfig = DEFAULT_CONFIG,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Launch fwd_pass_state; returns (states entering each chunk, final states or None).

    states is (b, nchunks, h, p, n) in x's dtype (float32 for float32 inputs); final fp32.
    """
    batch, _, nheads, headdim = x.shape
    dstate = B.shape[3]
    nchunks = dA_cumsum.shape[2]
    device = x.device
    states = torch.empty(batch, nchunks, nheads, headdim, dstate, device=device, dtype=x.dtype)
    final = (
        torch.empty(batch, nheads, headdim, dstate, device=device, dtype=torch.float32)
        if return_final_states
        else None
    )
    grid, kernel, args = fwd_pass_state_launch(
        x, B, dt_out, dA_cumsum, initial_states, states, final, config
    )
    ct.launch(torch.cuda.current_stream(), grid, kernel, args)
    return states, final


def fwd_pass_state_launch(
    x: torch.Tensor,
    B: torch.Tensor,
    dt_out: torch.Tensor,
    dA_cumsum: torch.Tensor,
    initial_states: torch.Tensor | None,
    states: torch.Tensor,
    final: torch.Tensor | None,
    config: SSDConfig,
) -> tuple[tuple[int, int, int], object, tuple]:
    """(grid, kernel, arguments) of one launch: shared by the wrapper and the autotuner."""
    batch, _, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    unused = torch.empty(1, 1, 1, 1, device=x.device)
    nb = min(config.state_block_n, pow2_tile(dstate))
    tq = min(config.state_block_q, chunk_size)
    grid = (-(-dstate // nb), nheads, batch)
    kernel = with_occupancy(fwd_pass_state_kernel, config.state_occupancy)
    args = (
        x, B, dt_out, dA_cumsum,
        initial_states if initial_states is not None else unused,
        states,
        final if final is not None else torch.empty_like(unused),
        nchunks, nheads // ngroups, chunk_size, pow2_tile(headdim), nb, tq,
        initial_states is not None, final is not None,
    )  # fmt: skip
    return grid, kernel, args
