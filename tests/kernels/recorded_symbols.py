"""The kernel names the H200 launched (scripts/kernel_symbols.py, SYMBOLS), read against today's
kernels: the parameters the kernels took on since that recording, and the values every launch it
recorded would pass them. Changes 81 and 83 (the walk completing out, `state_out`, and reading
out's rows through their own parameter) came while no H200 was lent to record the names again;
once they are, SYMBOLS names the new file and ADDED is empty."""

from __future__ import annotations

import inspect
from pathlib import Path

import torch
from cuda.tile.compilation import ConstantConstraint, KernelSignature

from kernels.cutile.signatures import from_symbol, tensor_constraint

RUNS = Path(__file__).resolve().parents[2] / "results/nvidia-h200/config-comparisons"
SYMBOLS = RUNS / "symbols-c6dbfe2.jsonl"

_PLACEHOLDER = torch.empty(1, 1, 1, 1, device="meta")  # an unused tensor argument, as launched
ADDED = {
    "fwd_pass_state_kernel": {
        "z": tensor_constraint(_PLACEHOLDER),
        "FINISH": ConstantConstraint(False),
        "HAS_Z": ConstantConstraint(False),
        "partial": tensor_constraint(_PLACEHOLDER),
    },
    "compute_out_kernel": {"PARTIAL": ConstantConstraint(False)},
}


def _parameters(kernel) -> list[str]:
    return list(inspect.signature(kernel._pyfunc).parameters)


def as_recorded(name: str, kernel, signature: KernelSignature) -> KernelSignature:
    """Today's `signature` without the parameters ADDED since the recording."""
    added = ADDED.get(name, {})
    names = _parameters(kernel)
    assert set(added) <= set(names), f"{name} has no parameter among {sorted(added)}"
    kept = [p for n, p in zip(names, signature.parameters, strict=True) if n not in added]
    return KernelSignature(kept, signature.calling_convention)


def as_launched_now(symbol: str) -> tuple[str, object, KernelSignature]:
    """(name, kernel, signature) of a recorded name as today's kernel takes it: the parameters
    ADDED since, at the values the recorded launches would pass, put in their places."""
    name, kernel, recorded = from_symbol(symbol)
    added = ADDED.get(name, {})
    given = iter(recorded.parameters)
    parameters = [added[n] if n in added else next(given) for n in _parameters(kernel)]
    assert next(given, None) is None, f"{symbol[:60]} has more parameters than {name} takes"
    return name, kernel, KernelSignature(parameters, recorded.calling_convention)
