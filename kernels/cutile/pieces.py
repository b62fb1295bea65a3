"""The walk and compute_out in pieces of the chunks, so that compute_out overlaps the walk.

compute_out of a chunk needs only that chunk's state (or C·hᵀ rows), yet launched after the walk
it waits for the whole of it, and the walk's one wave leaves much of each SM unused (its steps
are a serial chain of loads and small products). With `SSDConfig.pieces` = K the chunks are cut
into K runs: the walk of run k starts from run k−1's final state, on a stream of higher priority
than the current one, and compute_out of run k is launched on the current stream once run k's
walk is done, so it runs beside the walk of run k+1 wherever the SMs have room for its CTAs. The
priority lets each walk piece take its SMs first as compute_out's CTAs retire (a CUDA graph
captures the streams' priorities with the launches).

The pieces are views of the inputs and of the output: nothing is copied.
"""

from __future__ import annotations

import functools

import torch

from kernels.cutile.config import SSDConfig
from kernels.cutile.launch import is_recording


def piece_bounds(pieces: int, nchunks: int) -> list[tuple[int, int]]:
    """[first, last) chunk of each piece: `pieces` runs of whole chunks, as even as they come
    (fewer where there are fewer chunks than pieces)."""
    count = max(1, min(pieces, nchunks))
    length = -(-nchunks // count)
    return [(first, min(first + length, nchunks)) for first in range(0, nchunks, length)]


def forward_in_pieces(
    x, B, C, dt_out, dA_cumsum, weight, D, z, initial_states, config: SSDConfig,
    final_states: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
    """The walk and compute_out over `config.pieces` runs of chunks, after chunk_cumsum (whose
    outputs are given): (out, final states or None)."""
    from kernels.cutile.compute_out import compute_out_launch
    from kernels.cutile.fwd_pass_state import fwd_pass_state
    from kernels.cutile.launch import launch

    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    seqlen = x.shape[1]
    out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    bounds = piece_bounds(config.pieces, nchunks)
    current = None if is_recording() else torch.cuda.current_stream(x.device)
    walk_stream = None if current is None else _walk_stream(x.device)
    if walk_stream is not None:
        walk_stream.wait_stream(current)
    state = initial_states
    for index, (first, last) in enumerate(bounds):
        rows = slice(first * chunk_size, min(last * chunk_size, seqlen))
        chunks = slice(first, last)
        x_k, B_k, C_k = x[:, rows], B[:, rows], C[:, rows]
        dt_k, dA_k = dt_out[:, :, chunks], dA_cumsum[:, :, chunks]
        weight_k = None if weight is None else weight[:, :, chunks]
        ask_final = final_states or index + 1 < len(bounds)
        with _on(walk_stream):
            state_pass = fwd_pass_state(
                x_k, B_k, C_k, dt_k, dA_k, weight_k, state, config, ask_final
            )
        if walk_stream is not None:
            current.wait_stream(walk_stream)
        state = state_pass.final
        grid, kernel, args = compute_out_launch(
            x_k, B_k, C_k, state_pass, dt_k, dA_k, D, None if z is None else z[:, rows],
            out[:, rows], config,
        )  # fmt: skip
        launch(grid, kernel, args, dependent=False)
    return out, state if final_states else None


class _on:
    """`torch.cuda.stream(stream)`, or nothing while launches are recorded (no stream then)."""

    def __init__(self, stream: torch.cuda.Stream | None) -> None:
        self.context = None if stream is None else torch.cuda.stream(stream)

    def __enter__(self) -> None:
        if self.context is not None:
            self.context.__enter__()

    def __exit__(self, *exc) -> None:
        if self.context is not None:
            self.context.__exit__(*exc)


@functools.cache
def _walk_stream(device: torch.device) -> torch.cuda.Stream:
    """A stream of the device's highest priority, kept for every forward on it."""
    highest = torch.cuda.Stream.priority_range()[1]
    return torch.cuda.Stream(device, priority=highest)
