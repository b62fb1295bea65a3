"""fwd_pass_state: each chunk's state contribution and the state jump across chunks, fused.

One CTA owns a (headdim × NB) slice of one head's state and walks the chunks in order:
h_next = exp(dA_last)·h + Xᵀ·(B ⊙ exp(dA_last − dA) ⊙ dt), the decay folded into the tensor-core
accumulator. Only the state entering each chunk is written (in the input dtype, as Triton does),
so the fp32 per-chunk contributions never round-trip through global memory.
"""

from __future__ import annotations

import cuda.tile as ct
import torch

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
    HAS_INIT: ConstBool,
    RETURN_FINAL: ConstBool,
):
    nblock = ct.bid(0)
    head = ct.bid(1)
    batch = ct.bid(2)
    group = head // heads_per_group
    zero = ct.PaddingMode.ZERO
    mma_dtype = ct.tfloat32 if x.dtype == ct.float32 else x.dtype

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
        dA = ct.load(dA_cumsum, index=(batch, head, chunk, 0), shape=(1, 1, 1, Q)).reshape((Q,))
        dt = ct.load(dt_out, index=(batch, head, chunk, 0), shape=(1, 1, 1, Q)).reshape((Q,))
        dA_last = ct.load(dA_cumsum, index=(batch, head, chunk, Q - 1), shape=(1, 1, 1, 1)).reshape(
            (1,)
        )
        # Decay from each position to the chunk end; min(…, 0) keeps exp() bounded by 1.
        weight = ct.exp(ct.minimum(dA_last - dA, 0.0)) * dt
        # Xᵀ as a (P, Q) tile: tile axis 1 is x's headdim axis, tile axis 3 its seqlen axis.
        xt = ct.load(
            x,
            index=(batch, 0, head, chunk),
            shape=(1, P, 1, Q),
            order=(0, 3, 2, 1),
            padding_mode=zero,
            latency=4,
        ).reshape((P, Q))
        b = ct.load(
            B,
            index=(batch, chunk, group, nblock),
            shape=(1, Q, 1, NB),
            padding_mode=zero,
            latency=4,
        ).reshape((Q, NB))
        b_weighted = (b.astype(ct.float32) * weight[:, None]).astype(mma_dtype)
        state = ct.mma(xt.astype(mma_dtype), b_weighted, state * ct.exp(dA_last))

    if RETURN_FINAL:
        ct.store(final_states, index=(batch, head, 0, nblock), tile=state.reshape((1, 1, P, NB)))


def fwd_pass_state(
    x: torch.Tensor,
    B: torch.Tensor,
    dt_out: torch.Tensor,
    dA_cumsum: torch.Tensor,
    initial_states: torch.Tensor | None,
    return_final_states: bool,
    state_block: int = 64,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Launch fwd_pass_state; returns (states entering each chunk, final states or None).

    states is (b, nchunks, h, p, n) in x's dtype (float32 for float32 inputs); final fp32.
    """
    batch, _, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    device = x.device
    states = torch.empty(batch, nchunks, nheads, headdim, dstate, device=device, dtype=x.dtype)
    final = (
        torch.empty(batch, nheads, headdim, dstate, device=device, dtype=torch.float32)
        if return_final_states
        else torch.empty(1, 1, 1, 1, device=device)
    )
    init = initial_states if initial_states is not None else torch.empty(1, 1, 1, 1, device=device)
    nb = min(state_block, pow2_tile(dstate))
    grid = (-(-dstate // nb), nheads, batch)
    ct.launch(
        torch.cuda.current_stream(),
        grid,
        fwd_pass_state_kernel,
        (
            x,
            B,
            dt_out,
            dA_cumsum,
            init,
            states,
            final,
            nchunks,
            nheads // ngroups,
            chunk_size,
            pow2_tile(headdim),
            nb,
            initial_states is not None,
            return_final_states,
        ),
    )
    return states, (final if return_final_states else None)
