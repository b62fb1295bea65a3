"""mamba_ssm 2.3.2.post1's Triton SSD forward behind the provider contract (docs/architecture.md).

The adapter calls `_mamba_chunk_scan_combined_fwd` directly, so the timed work is the five Triton
launches plus mamba's host code, without the autograd wrapper that saves tensors for backward.
Importing this module imports neither triton nor mamba_ssm (the registry stays light); both load on
first use. On CPU the same kernels run under Triton's interpreter, with the shims of
`enable_cpu_interpreter`; TRITON_INTERPRET=1 must be set before triton is imported.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import shutil
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# The forward kernels in launch order, with the mamba_ssm.ops.triton module that defines each.
# Profilers report Triton kernels by these function names.
_KERNEL_MODULES = {
    "_chunk_cumsum_fwd_kernel": "ssd_chunk_state",
    "_chunk_state_fwd_kernel": "ssd_chunk_state",
    "_state_passing_fwd_kernel": "ssd_state_passing",
    "_bmm_chunk_fwd_kernel": "ssd_bmm",
    "_chunk_scan_fwd_kernel": "ssd_chunk_scan",
}
KERNEL_NAMES: tuple[str, ...] = tuple(_KERNEL_MODULES)
# tl.dot without input_precision: TF32 for float32 operands on NVIDIA GPUs (mamba_ssm passes none).
MATMUL_POLICY = "operands in input dtype (tf32 for float32, Triton's default), fp32 accumulate"

# Values Triton's TRITON_INTERPRET knob reads as true (checked against triton 3.9's getenv_bool).
_TRUE_VALUES = frozenset({"1", "true", "on", "yes"})


def interpreter_requested() -> bool:
    """Whether TRITON_INTERPRET asks for Triton's interpreter, read without importing triton."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in _TRUE_VALUES


def check_c_compiler(environ: dict[str, str] | None = None) -> None:
    """Refuse a CC that names no executable. Triton builds a small C launcher for each kernel
    signature with $CC when it is set (triton.runtime.build); a wrong one fails only then, inside
    the first launch, as a FileNotFoundError naming it (a shell variable called CC did that)."""
    cc = (os.environ if environ is None else environ).get("CC")
    if cc is not None and shutil.which(cc) is None:
        raise RuntimeError(
            f"CC={cc!r} is not an executable, and Triton builds its kernel launchers with $CC: "
            "unset CC or point it at a C compiler (gcc or clang)"
        )


def load() -> Callable[..., Any]:
    """The provider's forward, once the environment Triton compiles in is checked."""
    check_c_compiler()
    return ssd_forward


def import_mamba_module(name: str) -> types.ModuleType:
    """Import a mamba_ssm submodule without running mamba_ssm/__init__.py.

    That __init__ imports the CUDA extension selective_scan_cuda (not built: only Mamba-1 needs it)
    and then huggingface_hub/transformers; the SSD Triton modules need none of them. A bare package
    object carrying the real __path__ lets the submodules import normally.
    """
    if name != "mamba_ssm" and not name.startswith("mamba_ssm."):
        raise ValueError(f"not a mamba_ssm module: {name!r}")
    if "mamba_ssm" not in sys.modules:
        spec = importlib.util.find_spec("mamba_ssm")  # locates the package without executing it
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError(
                "mamba_ssm is not installed; scripts/setup_venv.sh installs mamba-ssm==2.3.2.post1"
            )
        package = types.ModuleType("mamba_ssm")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec  # importlib.util.find_spec("mamba_ssm") raises on a None spec
        sys.modules["mamba_ssm"] = package
    return importlib.import_module(name)


@functools.cache
def _autotuners() -> dict[str, Any]:
    """The triton Autotuner object wrapping each forward kernel, by kernel name."""
    return {
        name: getattr(import_mamba_module(f"mamba_ssm.ops.triton.{module}"), name)
        for name, module in _KERNEL_MODULES.items()
    }


@functools.cache
def _combined_fwd() -> Callable[..., tuple]:
    return import_mamba_module("mamba_ssm.ops.triton.ssd_combined")._mamba_chunk_scan_combined_fwd


def reset_autotuning() -> None:
    """Forget every autotuning pick, so the next call of each kernel benchmarks its configs again.

    Lets the harness retune per benchmark point instead of reusing picks made at another shape with
    the same key. The picks live in `Autotuner.cache` (tuning key -> Config) in triton 3.6 and 3.9.
    """
    for name, tuner in _autotuners().items():
        if tuner.cache_results:
            # The on-disk results would hand the old pick straight back, without benchmarking.
            raise RuntimeError(
                f"{name} caches autotuning on disk (TRITON_CACHE_AUTOTUNING=1); unset it to retune"
            )
        tuner.cache.clear()


def autotune_state() -> dict[str, dict]:
    """A copy of every kernel's picks so far (tuning key -> Config), for restore_autotuning."""
    return {name: dict(tuner.cache) for name, tuner in _autotuners().items()}


def restore_autotuning(state: dict[str, dict]) -> None:
    """Put back the picks of an autotune_state: shapes it holds run with them, untuned."""
    for name, tuner in _autotuners().items():
        tuner.cache.clear()
        tuner.cache.update(state[name])


def autotune_picks() -> dict[str, str]:
    """The config each forward kernel ran with in its latest call, by kernel name.

    Triton's picks can differ from one process to the next at the same shape (its benchmarks are
    noisy), which moves Triton's time by up to ~15 %; recording them makes such runs explicable.
    """
    return {
        name: str(tuner.best_config)
        for name, tuner in _autotuners().items()
        if getattr(tuner, "best_config", None) is not None
    }


@functools.cache
def enable_cpu_interpreter() -> None:
    """Make the kernels runnable on CPU tensors under Triton's interpreter (runs once per process).

    Refuses unless the kernels were built by the interpreter, so a compiled (GPU) process is never
    changed. The shims: one autotune config per kernel (benchmarking configs needs a GPU driver; the
    last config is the fastest in the interpreter), torch.cuda.device(None) made a no-op (CPU torch
    raises on it), and bf16 tl.dot operands widened to fp32 (the interpreter otherwise multiplies
    the raw uint16 bit patterns; triton-lang/triton#11584).
    """
    from triton.runtime.interpreter import InterpretedFunction

    tuners = _autotuners()
    if not all(isinstance(tuner.fn, InterpretedFunction) for tuner in tuners.values()):
        raise RuntimeError(
            "mamba_ssm's Triton kernels on CPU tensors need Triton's interpreter: set "
            "TRITON_INTERPRET=1 before triton is imported (tests/conftest.py does so without a GPU)"
        )
    for tuner in tuners.values():
        tuner.configs = tuner.configs[-1:]
    _guard_cuda_device_none()
    _widen_bf16_dots()


def _guard_cuda_device_none() -> None:
    import torch

    exchange = torch.cuda._exchange_device

    def exchange_or_skip(device: int | None) -> int:
        return -1 if device is None or device < 0 else exchange(device)

    torch.cuda._exchange_device = exchange_or_skip


def _widen_bf16_dots() -> None:
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import InterpreterBuilder, TensorHandle

    create_dot = InterpreterBuilder.create_dot

    def widen(handle: TensorHandle) -> TensorHandle:
        if handle.dtype != tl.bfloat16:
            return handle
        # bf16 is the top half of an fp32: shift the uint16 bits up and reinterpret.
        bits = handle.data.astype(np.uint32) << np.uint32(16)
        return TensorHandle(bits.view(np.float32), tl.float32)

    def create_dot_widened(self, a, b, d, input_precision, max_num_imprecise_acc):
        return create_dot(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    InterpreterBuilder.create_dot = create_dot_widened


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
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    return_final_states: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """mamba_chunk_scan_combined's forward: out (x.dtype), plus final_states (fp32) if asked."""
    if x.device.type == "cpu":
        enable_cpu_interpreter()
    out, _, _, _, _, final_states = _combined_fwd()(
        x,
        dt,
        A,
        B,
        C,
        chunk_size,
        D=D,
        z=z,
        dt_bias=dt_bias,
        initial_states=initial_states,
        dt_softplus=dt_softplus,
        dt_limit=dt_limit,
    )
    return (out, final_states) if return_final_states else out
