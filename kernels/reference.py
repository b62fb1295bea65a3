"""Float64 PyTorch SSD forward: the gold reference that every provider is compared with.

`ssd_forward` is the chunked algorithm of mamba_ssm's `_mamba_chunk_scan_combined_fwd` (same
contract, same dt preprocessing, same ragged last chunk), written for clarity and run in float64
on whatever device the inputs are on, so a GPU can check large problems quickly. `ssd_recurrent`
is the token-by-token recurrence the chunked form must equal; it is slow and exists for tests and
as the definition of what is computed.

Triton clamps intra-chunk decay exponents to <= 0 (`exp(min(dA_i - dA_j, 0))`). With A <= 0 and
dt >= 0, which every benchmark input satisfies, that is a no-op, so the reference leaves it out.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

F64 = torch.float64


def effective_dt(
    dt: torch.Tensor,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, math.inf),
) -> torch.Tensor:
    """The step the SSM uses, in float64: dt + dt_bias, softplus where <= 20, clamped to dt_limit.

    Same order as mamba_ssm's `_chunk_cumsum_fwd_kernel`; the default limit (0, inf) turns
    negative steps into 0.
    """
    dt = dt.to(F64)
    if dt_bias is not None:
        dt = dt + dt_bias.to(F64)
    if dt_softplus:
        dt = F.softplus(dt, threshold=20.0)  # identity above 20, as in the Triton kernel
    return dt.clamp(*dt_limit)


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
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Chunked SSD forward in float64; out (b, l, h, p) and final_states (b, h, p, n) are float64.

    Heads are viewed as (group, head within group) so B and C are never repeated per head. Chunks
    are processed one at a time, carrying the state between them: at most one chunk's
    (b, q, q, h) decay matrix exists at once.
    """
    b, seqlen, h, p = x.shape
    g, n = B.shape[2:]
    _check_shapes(x, dt, A, B, C, D, z, dt_bias, initial_states)
    r = h // g
    xs = x.to(F64).reshape(b, seqlen, g, r, p)
    dts = effective_dt(dt, dt_bias, dt_softplus, dt_limit).reshape(b, seqlen, g, r)
    dA = dts * A.to(F64).reshape(g, r)
    Bs, Cs = B.to(F64), C.to(F64)
    if initial_states is None:
        state = x.new_zeros((b, g, r, p, n), dtype=F64)
    else:
        state = initial_states.to(F64).reshape(b, g, r, p, n)

    out = torch.empty_like(xs)
    for start in range(0, seqlen, chunk_size):
        c = slice(start, min(start + chunk_size, seqlen))
        out[:, c], state = _chunk(xs[:, c], dts[:, c], dA[:, c], Bs[:, c], Cs[:, c], state)

    if D is not None:
        out = out + xs * D.to(F64).reshape(g, r, -1)  # D (h,) or (h, p)
    if z is not None:
        out = out * F.silu(z.to(F64).reshape(b, seqlen, g, r, p))
    out = out.reshape(b, seqlen, h, p)
    return (out, state.reshape(b, h, p, n)) if return_final_states else out


def _chunk(
    x: torch.Tensor,
    dt: torch.Tensor,
    dA: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk of q <= chunk_size tokens: its output and the state after its last token.

    x (b, q, g, r, p); dt, dA (b, q, g, r); B, C (b, q, g, n); state (b, g, r, p, n) entering.
    """
    q = x.shape[1]
    cum = dA.cumsum(dim=1)  # log of the decay from the chunk start through token i
    causal = torch.ones(q, q, dtype=torch.bool, device=x.device).tril()[:, :, None, None]
    # decay[i, j] = exp(cum_i - cum_j) for j <= i: what is left at i of token j's input.
    decay = torch.exp((cum[:, :, None] - cum[:, None, :]).masked_fill(~causal, -math.inf))
    scores = torch.einsum("bign,bjgn->bijg", C, B)[..., None] * decay * dt[:, None]
    y = torch.einsum("bijgr,bjgrp->bigrp", scores, x)
    y = y + torch.einsum("bign,bgrpn->bigrp", C, state) * torch.exp(cum)[..., None]

    to_end = torch.exp(cum[:, -1:] - cum) * dt  # weight of token j in the chunk's final state
    state = state * torch.exp(cum[:, -1])[..., None, None]
    state = state + torch.einsum("bjgn,bjgrp->bgrpn", B, x * to_end[..., None])
    return y, state


def ssd_recurrent(
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
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The SSM one token at a time, float64 (chunk_size is unused; the signature is shared):

        h_t = exp(dt_t·A) h_{t-1} + dt_t · x_t ⊗ B_t,   y_t = h_t · C_t + D·x_t,   out = y·silu(z)

    with h_{-1} = initial_states, head k reading group k // (nheads / ngroups) of B and C.
    """
    b, seqlen, h, p = x.shape
    n = B.shape[3]
    _check_shapes(x, dt, A, B, C, D, z, dt_bias, initial_states)
    xs = x.to(F64)
    dts = effective_dt(dt, dt_bias, dt_softplus, dt_limit)
    decay = torch.exp(dts * A.to(F64))
    Bh = B.to(F64).repeat_interleave(h // B.shape[2], dim=2)
    Ch = C.to(F64).repeat_interleave(h // C.shape[2], dim=2)
    state = x.new_zeros((b, h, p, n), dtype=F64)
    if initial_states is not None:
        state = initial_states.to(F64)

    ys = []
    for t in range(seqlen):
        inp = (dts[:, t, :, None] * xs[:, t])[..., None] * Bh[:, t, :, None, :]
        state = decay[:, t, :, None, None] * state + inp
        ys.append(torch.einsum("bhpn,bhn->bhp", state, Ch[:, t]))
    out = torch.stack(ys, dim=1)

    if D is not None:
        out = out + xs * (D.to(F64)[:, None] if D.dim() == 1 else D.to(F64))
    if z is not None:
        out = out * F.silu(z.to(F64))
    return (out, state) if return_final_states else out


def _check_shapes(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    initial_states: torch.Tensor | None,
) -> None:
    """The shape asserts of `_mamba_chunk_scan_combined_fwd`, as ValueErrors."""
    b, seqlen, h, p = x.shape
    g, n = B.shape[2:]
    expected = {
        "B": (B, [(b, seqlen, g, n)]),
        "C": (C, [(b, seqlen, g, n)]),
        "dt": (dt, [(b, seqlen, h)]),
        "A": (A, [(h,)]),
        "D": (D, [(h,), (h, p)]),
        "z": (z, [(b, seqlen, h, p)]),
        "dt_bias": (dt_bias, [(h,)]),
        "initial_states": (initial_states, [(b, h, p, n)]),
    }
    for name, (t, shapes) in expected.items():
        if t is not None and tuple(t.shape) not in shapes:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected one of {shapes}")
    if h % g:
        raise ValueError(f"nheads ({h}) must be divisible by ngroups ({g})")
