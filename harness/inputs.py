"""Inputs of one benchmark point, drawn the same way on every machine.

Why not `torch.randn`: on the CPU it takes a vectorised Box-Muller path (its own log/sin/cos and
FMAs) when ATen dispatches AVX2/AVX512 and a scalar libm path otherwise, so the same seed gives
different bits on different hosts. `torch.rand` is exact integer arithmetic (24 random bits times
2**-24) on every CPU, and sums and products of such numbers are plain IEEE operations, so every
tensor here is built from `torch.rand` draws with only those operations. The only transcendental
functions touch one value per head (dt's log-uniform time scale and its inverse softplus), in
float64 before rounding to float32, where a last-bit difference between math libraries would very
rarely survive the rounding. Everything is drawn on the CPU in float32, cast to the problem dtype,
and then moved, so a GPU run sees exactly the bits that a CPU test pins.

Each tensor has its own generator, seeded from (seed, tensor name), so switching an option such as
`has_z` does not change any other tensor, and the float16/bfloat16 inputs of a point are the
roundings of its float32 inputs.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

import torch

from harness.problem import Problem

# Mamba2 draws dt log-uniform in [1e-3, 1e-1] per head; the per-token spread below moves dt by up
# to a factor of about 1.65 either way, so the per-head scale is drawn in a band narrowed to keep
# every token's dt inside [1e-3, 1e-1].
DT_SCALE_RANGE = (2e-3, 6e-2)
# With softplus, raw dt is uniform in [-DT_NOISE, DT_NOISE) around its head's bias.
DT_NOISE = 0.5
A_RANGE = (1.0, 16.0)  # Mamba2 A_init_range: A = -uniform(1, 16)
STATE_SCALE = 0.1  # initial states: the states the sequence builds are of this order (RMS ~0.05)


@dataclass(frozen=True)
class SSDInputs:
    """The tensors of one `ssd_forward` call; options the problem switches off are None."""

    problem: Problem
    x: torch.Tensor
    dt: torch.Tensor
    A: torch.Tensor
    B: torch.Tensor
    C: torch.Tensor
    D: torch.Tensor | None = None
    z: torch.Tensor | None = None
    dt_bias: torch.Tensor | None = None
    initial_states: torch.Tensor | None = None

    def tensors(self) -> dict[str, torch.Tensor | None]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "problem"}

    def kwargs(self) -> dict:
        """Keyword arguments of the provider contract (docs/architecture.md)."""
        p = self.problem
        return {
            **self.tensors(),
            "chunk_size": p.chunk_size,
            "dt_softplus": p.dt_softplus,
            "dt_limit": p.dt_limit,
            "return_final_states": p.return_final_states,
        }

    def to(self, device: str | torch.device, copy: bool = True) -> SSDInputs:
        """These inputs on `device`; by default a copy, so no provider writes into another's."""
        moved = {
            name: None if t is None else t.to(device, copy=copy)
            for name, t in self.tensors().items()
        }
        return replace(self, **moved)


def make_inputs(problem: Problem, seed: int, device: str | torch.device = "cpu") -> SSDInputs:
    """Realistic inputs of `problem` for `seed`, bit-identical on every machine (module docstring).

    x, B, C, z: zero-mean, unit-variance and bell-shaped (sum of four uniforms). The conv1d+SiLU
    outputs a real layer feeds the SSD are about this size but skewed positive; a common mean in
    B and C would make C·Bᵀ, and so the outputs and their absolute errors, grow with dstate and
    chunk length, so we keep them symmetric. dt, A, D, dt_bias and initial_states are float32, as
    Mamba2 keeps them: A = -uniform(1, 16); D = 1 + uniform(-0.25, 0.25) (Mamba2 initialises D
    to ones); initial_states = 0.1 * unit-variance values; dt as in `_dt_and_bias`.
    """
    p = problem
    dtype = getattr(torch, p.dtype)
    h = p.nheads
    tokens = (p.batch, p.seqlen)
    rng = functools.partial(_generator, seed)

    dt, dt_bias = _dt_and_bias(p, rng)
    tensors = {
        "x": _unit_bell(rng("x"), (*tokens, h, p.headdim)).to(dtype),
        "dt": dt,
        "A": -_uniform(rng("A"), (h,), *A_RANGE),
        "B": _unit_bell(rng("B"), (*tokens, p.ngroups, p.dstate)).to(dtype),
        "C": _unit_bell(rng("C"), (*tokens, p.ngroups, p.dstate)).to(dtype),
        "dt_bias": dt_bias,
    }
    if p.has_D:
        tensors["D"] = _uniform(rng("D"), (h, p.headdim) if p.D_has_hdim else (h,), 0.75, 1.25)
    if p.has_z:
        tensors["z"] = _unit_bell(rng("z"), (*tokens, h, p.headdim)).to(dtype)
    if p.has_initial_states:
        shape = (p.batch, h, p.headdim, p.dstate)
        tensors["initial_states"] = STATE_SCALE * _unit_bell(rng("initial_states"), shape)
    return SSDInputs(problem=p, **tensors).to(device, copy=False)


def meta_inputs(problem: Problem) -> SSDInputs:
    """The shapes and dtypes of make_inputs(problem), as meta tensors: no numbers are drawn, so
    what a forward would launch (kernels/cutile/signatures.py, `forward_launches`) can be seen on
    any machine in a second, whatever the problem's size."""
    with torch.device("meta"):
        return make_inputs(problem, seed=0, device="meta")


def _dt_and_bias(
    p: Problem, rng: Callable[[str], torch.Generator]
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Raw dt (b, l, h) and dt_bias (h,) such that the dt the kernels use lies in [1e-3, 1e-1].

    Each head gets a time scale s, log-uniform in DT_SCALE_RANGE. With softplus, as in Mamba2,
    dt_bias = softplus⁻¹(s) and raw dt is noise around 0 (folded into raw dt if there is no bias),
    so softplus(dt + dt_bias) is about s·exp(noise). Without softplus the total is s·uniform(0.5,
    1.5), half of s carried by dt_bias when there is one.
    """
    shape = (p.batch, p.seqlen, p.nheads)
    lo, hi = (math.log(v) for v in DT_SCALE_RANGE)
    scale = torch.exp(_uniform(rng("dt_scale"), (p.nheads,), lo, hi).double())
    if p.dt_softplus:
        bias = scale + torch.log(-torch.expm1(-scale))  # inverse softplus, float64
        raw = _uniform(rng("dt"), shape, -DT_NOISE, DT_NOISE)
    else:
        bias = scale / 2
        raw = _uniform(rng("dt"), shape, 0.0, 1.0) * scale.float()
    if p.has_dt_bias:
        return raw, bias.float()
    return (raw.double() + bias).float(), None


def _generator(seed: int, name: str) -> torch.Generator:
    """The CPU generator of one tensor, seeded from (seed, name)."""
    digest = hashlib.sha256(f"ssdbench:{seed}:{name}".encode()).digest()
    # The CPU generator (mt19937) keeps only 32 bits of its seed.
    return torch.Generator(device="cpu").manual_seed(int.from_bytes(digest[:4], "little"))


def _uniform(gen: torch.Generator, shape: tuple[int, ...], lo: float, hi: float) -> torch.Tensor:
    return torch.rand(shape, generator=gen, dtype=torch.float32) * (hi - lo) + lo


def _unit_bell(gen: torch.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    """Zero mean, unit variance, within ±2√3: a sum of four uniforms (Irwin-Hall), rescaled."""
    total = torch.rand(shape, generator=gen, dtype=torch.float32)
    for _ in range(3):
        total += torch.rand(shape, generator=gen, dtype=torch.float32)
    return (total - 2.0) * math.sqrt(3.0)
