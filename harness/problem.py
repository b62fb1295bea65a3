"""One benchmark point of the Mamba-2 SSD forward, its validation, and its FLOP/byte model.

Everything that describes *what* is computed lives here, so that providers, timing, reports and the
gate agree on one definition. Validation runs before any GPU work and names the field to change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The integer fields of a Problem that give its shape (in field order); the others are dtype and
#: options. Results tables carry them as columns of the same names.
SHAPE_FIELDS = ("batch", "seqlen", "nheads", "headdim", "dstate", "ngroups", "chunk_size")
DTYPES = ("float32", "float16", "bfloat16")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


class ProblemError(ValueError):
    """A problem value outside what ssdbench supports; the message names the field and the range."""


@dataclass(frozen=True)
class Problem:
    """Shapes, dtype and options of one `mamba_chunk_scan_combined` forward call.

    x (batch, seqlen, nheads, headdim); dt (batch, seqlen, nheads); A (nheads,);
    B, C (batch, seqlen, ngroups, dstate). `dtype` is that of x/B/C/z; A, D, dt_bias and the
    states are float32 as in Mamba-2 models, and so is dt here (a model's dt is a slice of its
    in_proj output, in the model's dtype; both providers take either).
    """

    batch: int = 1
    seqlen: int = 4096
    nheads: int = 64
    headdim: int = 64
    dstate: int = 128
    ngroups: int = 1
    chunk_size: int = 256
    dtype: str = "bfloat16"
    has_D: bool = True
    D_has_hdim: bool = False
    has_z: bool = False
    has_dt_bias: bool = True
    dt_softplus: bool = True
    dt_limit: tuple[float, float] = (0.0, math.inf)
    has_initial_states: bool = False
    return_final_states: bool = False

    def __post_init__(self) -> None:
        # Hydra/YAML hand lists; keep the dataclass hashable and comparable.
        try:
            limit = tuple(float(v) for v in self.dt_limit)
        except (TypeError, ValueError) as err:
            msg = f"dt_limit must be two numbers (low, high), got {self.dt_limit!r}"
            raise ProblemError(msg) from err
        object.__setattr__(self, "dt_limit", limit)
        self.validate()

    def validate(self) -> None:
        """Raise ProblemError naming the first field outside its allowed range."""
        for name in SHAPE_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ProblemError(f"{name} must be an integer, got {value!r}")
            if value < 1:
                raise ProblemError(f"{name} must be >= 1, got {value}")
        if self.dtype not in DTYPES:
            raise ProblemError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.nheads % self.ngroups:
            raise ProblemError(
                f"nheads ({self.nheads}) must be divisible by ngroups ({self.ngroups})"
            )
        if self.chunk_size & (self.chunk_size - 1) or not 16 <= self.chunk_size <= 1024:
            raise ProblemError(
                f"chunk_size must be a power of two in [16, 1024], got {self.chunk_size}"
            )
        if not 1 <= self.headdim <= 512:
            raise ProblemError(f"headdim must be in [1, 512], got {self.headdim}")
        if not 1 <= self.dstate <= 512:
            raise ProblemError(f"dstate must be in [1, 512], got {self.dstate}")
        if len(self.dt_limit) != 2:
            raise ProblemError(f"dt_limit must be (low, high), got {self.dt_limit}")
        lo, hi = self.dt_limit
        if math.isnan(lo) or math.isnan(hi) or lo < 0 or lo >= hi:
            raise ProblemError(
                f"dt_limit must be (low, high) with 0 <= low < high, got {self.dt_limit}"
            )
        if self.D_has_hdim and not self.has_D:
            raise ProblemError("D_has_hdim=True needs has_D=True")
        for name in (
            "has_D",
            "D_has_hdim",
            "has_z",
            "has_dt_bias",
            "dt_softplus",
            "has_initial_states",
            "return_final_states",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ProblemError(f"{name} must be true or false, got {getattr(self, name)!r}")

    @property
    def element_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def key(self) -> str:
        """Stable identifier of the point, used to resume sweeps and join runs."""
        parts = [
            f"b{self.batch}",
            f"L{self.seqlen}",
            f"H{self.nheads}",
            f"P{self.headdim}",
            f"N{self.dstate}",
            f"G{self.ngroups}",
            f"Q{self.chunk_size}",
            self.dtype,
        ]
        opts = [
            ("D" + ("hp" if self.D_has_hdim else "")) if self.has_D else "",
            "z" if self.has_z else "",
            "bias" if self.has_dt_bias else "",
            "sp" if self.dt_softplus else "",
            ""
            if self.dt_limit == (0.0, math.inf)
            else f"lim{_number(self.dt_limit[0])}-{_number(self.dt_limit[1])}",
            "h0" if self.has_initial_states else "",
            "hT" if self.return_final_states else "",
        ]
        return "_".join(parts + [o for o in opts if o])


def _number(value: float) -> str:
    """A float for a point's key: short (`:g`) where that names it exactly, else in full, so that
    two points never share a key."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def _chunk_lengths(problem: Problem) -> list[int]:
    full, rest = divmod(problem.seqlen, problem.chunk_size)
    return [problem.chunk_size] * full + ([rest] if rest else [])


def flops(problem: Problem) -> float:
    """Matmul FLOPs of the chunked SSD forward (element-wise work is not counted).

    Per chunk of length q: C·Bᵀ, 2·q²·N per group; the causal intra-chunk product (C·Bᵀ ⊙ decay)·X,
    half of 2·q²·P per head; the chunk state Bᵀ·X and the carried-state output C·hᵀ, 2·q·N·P each
    per head. The H200 baseline of mamba_ssm measured for this project counted the same way, so
    TFLOP/s compare with it.
    """
    p = problem
    per_batch = sum(
        p.ngroups * 2 * q * q * p.dstate
        + p.nheads * (q * q * p.headdim + 4 * q * p.dstate * p.headdim)
        for q in _chunk_lengths(p)
    )
    return float(p.batch * per_batch)


def output_bytes(problem: Problem) -> int:
    """Bytes of what the forward returns: out (batch, seqlen, nheads, headdim) in the problem dtype,
    plus the float32 final states (batch, nheads, headdim, dstate) with return_final_states.
    min_bytes counts them as written once."""
    p = problem
    out = p.batch * p.seqlen * p.nheads * p.headdim * p.element_bytes
    final = p.batch * p.nheads * p.headdim * p.dstate * 4 if p.return_final_states else 0
    return out + final


def working_set_bytes(problem: Problem) -> int:
    """A bound on the device memory one forward allocates: its outputs twice over, float32 chunk
    states twice (Triton's chunk states and their passed form) at half the chunk length
    (chunk_policy=fastest runs it), four float32 values per token and head (dt, decays, weights)
    and a float32 C·Bᵀ per chunk. A checked call allocates from that much poisoned memory
    (correctness.poisoned_allocations), outputs and intermediates alike."""
    p = problem
    chunk = max(1, p.chunk_size // 2)
    states = p.batch * -(-p.seqlen // chunk) * p.nheads * p.headdim * p.dstate * 4
    per_token = p.batch * p.seqlen * p.nheads * 4 * 4
    cb = p.batch * p.seqlen * p.ngroups * p.chunk_size * 4
    return 2 * output_bytes(p) + 2 * states + per_token + cb


def min_bytes(problem: Problem) -> float:
    """Fewest bytes any implementation must move through device memory: each input read once,
    each output written once (output_bytes; intermediates such as chunk states are free in this
    floor)."""
    p = problem
    e = p.element_bytes
    tokens = p.batch * p.seqlen
    total = output_bytes(p)
    total += tokens * p.nheads * p.headdim * e  # x
    total += tokens * p.ngroups * p.dstate * e * 2  # B and C
    total += tokens * p.nheads * 4  # dt
    total += p.nheads * 4 * (1 + p.has_dt_bias)  # A, dt_bias
    if p.has_D:
        total += p.nheads * (p.headdim if p.D_has_hdim else 1) * 4
    if p.has_z:
        total += tokens * p.nheads * p.headdim * e
    if p.has_initial_states:
        total += p.batch * p.nheads * p.headdim * p.dstate * 4
    return float(total)


def reference_gib(p: Problem) -> float:
    """Rough peak memory (GiB) of the float64 reference plus comparing an output with it: token
    tensors in float64 (x, out, the D term, comparison copies) and one chunk's (q, q) matrices."""
    tokens = p.batch * p.seqlen
    elements = (
        6 * tokens * p.nheads * p.headdim
        + 4 * tokens * (p.ngroups * p.dstate + p.nheads)
        + 4 * p.batch * p.chunk_size**2 * p.nheads
        + 3 * p.batch * p.nheads * p.headdim * p.dstate
    )
    return elements * 8 / 2**30
