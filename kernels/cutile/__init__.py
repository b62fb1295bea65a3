"""cuTile kernels of the Mamba-2 SSD forward: chunk_cumsum, fwd_pass_state (+ segment_scan),
chunk_cb (when compute_out reads C·Bᵀ precomputed), compute_out; `ssd.ssd_forward` launches
them. This module imports neither torch nor cuda-tile."""

# Numerics of every matrix product (the same policy as Triton's defaults, so both are compared
# like for like).
MATMUL_POLICY = "operands in input dtype (tf32 for float32), fp32 accumulate"
# Profiler names of every kernel ssd_forward can launch; cuTile mangles them
# (chunk_cumsum_kernel_Kt2_...), so these are prefixes.
KERNEL_PREFIXES = ("chunk_cumsum", "fwd_pass_state", "segment_scan", "chunk_cb", "compute_out")
