"""cuTile kernels of the Mamba-2 SSD forward: chunk_cumsum, fwd_pass_state, compute_out."""
