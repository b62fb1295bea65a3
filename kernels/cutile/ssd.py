"""Host entry point of the cuTile SSD forward: validation, then the kernel launches (chunk_cumsum,
fwd_pass_state, segment_scan when the state walk is split, chunk_cb where compute_out reads C·Bᵀ,
compute_out). With `SSDConfig.state_cb`, in a forward captured into a CUDA graph, chunk_cb's
strided kernel runs beside the walk on a second stream, forked before chunk_cumsum, launched after
the walk and joined before compute_out (the graph captures both); an eager forward runs chunk_cb
after the walk. With `SSDConfig.state_out` (where `finishes_out`), compute_out runs before the
walk, which completes out; then with `SSDConfig.cumsum_cb`, chunk_cb runs beside chunk_cumsum on
the second stream, joined before compute_out.

`ssd_forward` has the forward contract of mamba_ssm's `mamba_chunk_scan_combined` (no seq_idx /
cu_seqlens). Numerics policy, the same as Triton's defaults: matmul operands in the input dtype
(TF32 for float32 inputs), fp32 accumulation, dt/dA/states-in-flight fp32, the states passed
between kernels in the input dtype, final states fp32 (`kernels.cutile.MATMUL_POLICY`).
"""

from __future__ import annotations

import math

import torch

from kernels.cutile.config import (
    SSDConfig,
    compute_out_tiles,
    forward_default_config,
    reads_chunk_cb,
)

INPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_HEADDIM = 128
MAX_DSTATE = 256
CHUNK_SIZES = (16, 32, 64, 128, 256)


def unsupported_reason(headdim: int, dstate: int, chunk_size: int, dtype: str) -> str | None:
    """Why these sizes are outside what the cuTile kernels support, or None if supported."""
    if headdim > MAX_HEADDIM:
        return f"headdim {headdim} > {MAX_HEADDIM}"
    if dstate > MAX_DSTATE:
        return f"dstate {dstate} > {MAX_DSTATE}"
    if chunk_size not in CHUNK_SIZES:
        return f"chunk_size {chunk_size} not in {CHUNK_SIZES}"
    if dtype not in ("float32", "float16", "bfloat16"):
        return f"dtype {dtype} not float32/float16/bfloat16"
    return None


def ssd_forward(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, math.inf),
    return_final_states: bool = False,
    config: SSDConfig | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Mamba-2 SSD forward with cuTile; returns out, or (out, final_states) when asked.

    `config` picks tile sizes and occupancy (kernels/cutile/config.py); None takes
    `default_config` for this dstate and size.
    """
    _check_inputs(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states)
    with torch.cuda.device(x.device):  # the launches go to the stream of x's GPU, not the current
        out, final = launch_forward(
            x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, dt_softplus, dt_limit,
            config, return_final_states,
        )  # fmt: skip
    return (out, final) if return_final_states else out


def launch_forward_of(kwargs: dict, config: SSDConfig) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`launch_forward` on ssd_forward's keyword arguments (the provider contract's dict)."""
    names = ("x", "dt", "A", "B", "C", "chunk_size", "D", "z", "dt_bias", "initial_states")
    return launch_forward(
        *(kwargs.get(n) for n in names), kwargs["dt_softplus"], kwargs["dt_limit"], config,
        bool(kwargs.get("return_final_states")),
    )  # fmt: skip


def launch_forward(
    x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, dt_softplus, dt_limit, config,
    final_states: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
    """The kernel launches of `ssd_forward`, without its checks: (out, final states, None when
    `final_states` is off and no launch computed them). Also run on meta tensors inside
    `launch.recorded()`, to see what a forward launches without a GPU."""
    # Imported here so that validation and `unsupported_reason` work without cuda-tile.
    from kernels.cutile.chunk_cb import chunk_cb, chunk_cb_beside
    from kernels.cutile.chunk_cumsum import chunk_cumsum
    from kernels.cutile.compute_out import compute_out
    from kernels.cutile.fwd_pass_state import (
        cb_ctas_beside,
        finishes_out,
        fwd_pass_state,
        walk_layout,
    )
    from kernels.cutile.launch import capturing, fork, join

    A, D, dt_bias, initial_states = (
        t if t is None else t.float() for t in (A, D, dt_bias, initial_states)
    )
    config = config or forward_default_config(x.shape, B.shape[3], chunk_size)
    walk = walk_layout(config, x.shape, B.shape, chunk_size, x.device)
    block_m, block_k = compute_out_tiles(config, chunk_size)
    finishing = finishes_out(config, walk)
    cb_beside_cumsum = finishing and bool(config.cumsum_cb) and reads_chunk_cb(config, chunk_size)
    ctas_beside = 0
    if config.state_cb and capturing():
        # In CUDA graphs only: in an eager forward its kernel starts once the host has launched
        # the walk, and delays compute_out (runs 220-224). Graph mode checks a replay's answer
        # before timing it, so the captured path is checked too.
        ctas_beside = cb_ctas_beside(config, walk)
    if ctas_beside or cb_beside_cumsum:
        # Forked before chunk_cumsum and launched after it (or after the walk): launched first,
        # the second stream's kernel delayed what followed it by its host work, tens of µs (run
        # 220).
        fork()
    dt_out, dA_cumsum, weight = chunk_cumsum(
        dt,
        A,
        dt_bias,
        chunk_size,
        dt_softplus,
        dt_limit,
        config.cumsum_heads,
        bool(config.dependent_launch),
        bool(config.state_weights),
    )
    if finishing:
        cb = None
        if cb_beside_cumsum:
            cb = chunk_cb(
                C, B, chunk_size, block_m, block_k, config.out_cb, aside=True,
                occupancy=config.cb_occupancy,
            )  # fmt: skip
            join()
        out = compute_out(x, B, C, None, dt_out, dA_cumsum, D, None, config, cb)
        state_pass = fwd_pass_state(
            x, B, C, dt_out, dA_cumsum, weight, initial_states, config, walk, final_states, out, z
        )
        return out, state_pass.final
    state_pass = fwd_pass_state(
        x, B, C, dt_out, dA_cumsum, weight, initial_states, config, walk, final_states
    )
    cb = None
    if ctas_beside:
        cb = chunk_cb_beside(C, B, chunk_size, ctas_beside, config.out_cb, block_k)
        join()
    out = compute_out(x, B, C, state_pass, dt_out, dA_cumsum, D, z, config, cb)
    return out, state_pass.final


def _check_inputs(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states) -> None:
    """Raise ValueError, naming the argument and what to change, before anything is launched."""
    if x.dim() != 4:
        raise ValueError(f"x must be (batch, seqlen, nheads, headdim), got shape {tuple(x.shape)}")
    b, seqlen, h, p = x.shape
    if B.dim() != 4 or B.shape[:2] != (b, seqlen):
        raise ValueError(
            f"B must be (batch={b}, seqlen={seqlen}, ngroups, dstate), got {tuple(B.shape)}"
        )
    g, n = B.shape[2], B.shape[3]
    empty = {"batch": b, "seqlen": seqlen, "nheads": h, "headdim": p, "ngroups": g, "dstate": n}
    for name, size in empty.items():
        if size < 1:
            raise ValueError(f"{name} must be at least 1, got {size}")
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool):
        raise ValueError(f"chunk_size must be an int, got {chunk_size!r}")
    expected = {
        "dt": (dt, (b, seqlen, h)),
        "A": (A, (h,)),
        "C": (C, (b, seqlen, g, n)),
        "z": (z, (b, seqlen, h, p)),
        "dt_bias": (dt_bias, (h,)),
        "initial_states": (initial_states, (b, h, p, n)),
    }
    for name, (tensor, shape) in expected.items():
        if tensor is not None and tuple(tensor.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(tensor.shape)}")
    if D is not None and tuple(D.shape) not in ((h,), (h, p)):
        raise ValueError(f"D must have shape ({h},) or ({h}, {p}), got {tuple(D.shape)}")
    if h % g:
        raise ValueError(f"nheads ({h}) must be divisible by ngroups ({g})")
    if x.dtype not in INPUT_DTYPES:
        raise ValueError(f"x dtype must be float32, float16 or bfloat16, got {x.dtype}")
    for name, tensor in (("B", B), ("C", C), ("z", z)):
        if tensor is not None and tensor.dtype != x.dtype:
            raise ValueError(f"{name} must have x's dtype {x.dtype}, got {tensor.dtype}")
    reason = unsupported_reason(p, n, chunk_size, str(x.dtype).removeprefix("torch."))
    if reason:
        raise ValueError(f"cuTile SSD does not support this problem: {reason}")
    tensors = [t for t in (x, dt, A, B, C, D, z, dt_bias, initial_states) if t is not None]
    if any(not t.is_cuda or t.device != x.device for t in tensors):
        raise ValueError(f"all inputs must be CUDA tensors on one device (x is on {x.device})")
    if any(not t.is_floating_point() for t in tensors):
        raise ValueError("all inputs must be floating-point tensors")
