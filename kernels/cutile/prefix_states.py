"""prefix_states: the state entering each chunk as one sum over every earlier chunk, in parallel.

The state walk (fwd_pass_state) visits the chunks in order, so a short sequence with few heads
runs a few dozen CTAs along a chain of dependent steps. Here one CTA owns the state entering one
chunk c (a headdim × NB slice of it) and sums the earlier chunks' contributions directly:
h_c = Σ_{j<c} exp(dA_last of chunks j+1..c−1) · Xⱼᵀ·(Bⱼ ⊙ wⱼ) + exp(dA_last of chunks 0..c−1)·h₀,
with wⱼ = exp(dA_last − dA)·dt of chunk j from chunk_cumsum. The decay across the chunks between
j and c is a scalar folded into wⱼ, so the sum is one k-loop of mma into a single accumulator with
nothing between the steps: no state decayed in registers, no state stored. The work grows with
the square of the chunk count (each of the nchunks + 1 states takes its own sum), so it is meant
for short sequences, where the walk's chain, not the GPU's throughput, bounds the time.

It writes what an unsplit walk writes: every chunk's entering state (input dtype) and the final
state (fp32), so compute_out reads it unchanged.
"""

from __future__ import annotations

import cuda.tile as ct
import torch

from kernels.cutile.config import SSDConfig, with_occupancy
from kernels.cutile.decay import LOG2E, exp2
from kernels.cutile.fwd_pass_state import StatePass, _initial_state, _weighted_x_b
from kernels.cutile.launch import follow_previous, launch
from kernels.cutile.tiles import pow2_tile

ConstInt = ct.Constant[int]
ConstBool = ct.Constant[bool]


@ct.kernel
def prefix_states_kernel(
    x,  # (b, l, h, p)
    B,  # (b, l, g, n)
    dA_cumsum,  # (b, h, nchunks, Q) float32
    weight,  # (b, h, nchunks, Q) float32: chunk_cumsum's exp(dA_last − dA)·dt
    initial_states,  # (b, h, p, n) float32 (unused unless HAS_INIT)
    states,  # (b, nchunks, h, p, n): the state entering each chunk
    final,  # (b, 1, h, p, n) float32: the state after the last chunk
    nchunks: int,
    heads_per_group: int,
    Q: ConstInt,
    P: ConstInt,
    NB: ConstInt,
    TQ: ConstInt,
    WEIGHT_X: ConstBool,
    HAS_INIT: ConstBool,
    CHAINED: ConstBool,
    LAT: ConstInt,
):
    follow_previous(CHAINED)
    nblock = ct.bid(0)
    head = ct.bid(1)
    batch = ct.bid(2) // (nchunks + 1)
    # The longest sums (the last chunks' states and the final state) are scheduled first.
    target = nchunks - ct.bid(2) % (nchunks + 1)
    group = head // heads_per_group
    mma_dtype = ct.tfloat32 if x.dtype == ct.float32 else x.dtype
    steps = Q // TQ

    acc = ct.zeros((P, NB), dtype=ct.float32)
    log_decay = ct.zeros((1,), dtype=ct.float32)  # log2 decay from chunk j's end to c's start
    for i in range(target):
        chunk = target - 1 - i
        index = (batch, head, chunk, 0)
        w = ct.load(weight, index=index, shape=(1, 1, 1, Q), latency=LAT).reshape((Q,))
        w = w * exp2(log_decay)
        for step in range(steps):
            b = ct.load(
                B,
                index=(batch, chunk * steps + step, group, nblock),
                shape=(1, TQ, 1, NB),
                padding_mode=ct.PaddingMode.ZERO,
                latency=LAT,
            ).reshape((TQ, NB))
            acc = _weighted_x_b(
                acc, x, b, w, w, log_decay, batch, head, chunk, step, steps,
                Q, P, TQ, WEIGHT_X, mma_dtype, LAT, True,
            )  # fmt: skip
        dA_last = ct.load(dA_cumsum, index=(batch, head, chunk, Q - 1), shape=(1, 1, 1, 1))
        log_decay = log_decay + dA_last.reshape((1,)) * LOG2E
    if HAS_INIT:
        initial = _initial_state(initial_states, batch, head, nblock, 0, P, NB, True)
        acc = acc + initial * exp2(log_decay)

    if target < nchunks:
        ct.store(
            states,
            index=(batch, target, head, 0, nblock),
            tile=acc.reshape((1, 1, 1, P, NB)).astype(states.dtype),
        )
    else:
        ct.store(final, index=(batch, 0, head, 0, nblock), tile=acc.reshape((1, 1, 1, P, NB)))


def prefix_states(
    x: torch.Tensor,
    B: torch.Tensor,
    dA_cumsum: torch.Tensor,
    weight: torch.Tensor,
    initial_states: torch.Tensor | None,
    config: SSDConfig,
) -> StatePass:
    """Launch prefix_states: what an unsplit state walk leaves for compute_out, in one launch."""
    grid, kernel, args = prefix_states_launch(x, B, dA_cumsum, weight, initial_states, config)
    launch(grid, kernel, args, bool(config.dependent_launch))
    states, final, nchunks = args[5], args[6], args[7]
    return StatePass(states, final[:, 0], 1, nchunks, None, None)


def prefix_states_launch(
    x: torch.Tensor,
    B: torch.Tensor,
    dA_cumsum: torch.Tensor,
    weight: torch.Tensor,
    initial_states: torch.Tensor | None,
    config: SSDConfig,
) -> tuple[tuple[int, int, int], object, tuple]:
    """(grid, kernel, arguments) of the launch, outputs allocated."""
    batch, _, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    nb = min(config.state_block_n, pow2_tile(dstate))
    device = x.device
    states = torch.empty(batch, nchunks, nheads, headdim, dstate, device=device, dtype=x.dtype)
    final = torch.empty(batch, 1, nheads, headdim, dstate, device=device, dtype=torch.float32)
    unused = torch.empty(1, 1, 1, 1, device=device)
    grid = (-(-dstate // nb), nheads, batch * (nchunks + 1))
    kernel = with_occupancy(prefix_states_kernel, config.state_occupancy)
    args = (
        x, B, dA_cumsum, weight,
        initial_states if initial_states is not None else unused,
        states, final,
        nchunks, nheads // ngroups, chunk_size, pow2_tile(headdim), nb,
        min(config.state_block_q, chunk_size), bool(config.state_weight_x),
        initial_states is not None, bool(config.dependent_launch), config.state_latency,
    )  # fmt: skip
    return grid, kernel, args
