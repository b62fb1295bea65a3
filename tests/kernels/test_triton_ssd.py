"""mamba_ssm's Triton forward through our adapter, against the float64 reference.

On CPU the kernels run in Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET), which
costs 0.3-2 s per call, so shapes are tiny. Tolerances are relative L2 errors ‖out−ref‖/‖ref‖.
Both sides see the same rounded inputs, so the error is the kernels' own rounding:
- fp32: the interpreter's dots are exact fp32 (numpy); measured 5e-7 (out) and 2e-6 (final_states:
  the fp32 cumsum of dt·A, about -50 at a chunk's end here, puts ~1e-6 into the decays). 1e-5
  still catches any algorithmic slip (a decay term, D, the state carry), which costs 1e-3 or more.
- fp16 and bf16: the kernels round the decay-weighted B and C·Bᵀ tiles to the input dtype before
  their dots, the carried states to C's dtype, and out to x's dtype. Measured 2e-4 (fp16, unit
  roundoff 4.9e-4) and 4e-3 (bf16, unit roundoff 3.9e-3); the bounds are about 20x and 5x those.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from harness.correctness import TOLERANCE, poisoned_allocations, relative_error
from harness.inputs import make_inputs
from harness.problem import Problem, working_set_bytes
from kernels import reference, triton_ssd

REPO = Path(__file__).parents[2]
# The harness's limits, except float32: the interpreter multiplies in true float32 (no TF32), so
# its error is ~1e-6 (2026-12-05: fp16 2.3e-4, bf16 4.1e-3 at worst over CASES).
REL_TOL = {**TOLERANCE, "float32": 1e-5}

TINY = Problem(
    batch=1,
    seqlen=128,
    nheads=2,
    headdim=16,
    dstate=16,
    ngroups=1,
    chunk_size=64,
    dtype="float32",
    has_D=True,
    has_z=True,
    has_dt_bias=True,
    dt_softplus=True,
    has_initial_states=True,
    return_final_states=True,
)
CASES = {
    "all-options": TINY,
    # Batch 2, three chunks the last of them ragged, two groups, D per (head, headdim), and a
    # dt_limit that clamps at both ends.
    "ragged-g2": replace(
        TINY, batch=2, seqlen=150, nheads=4, ngroups=2, D_has_hdim=True, dt_limit=(4e-3, 5e-2)
    ),
}


def assert_close(actual: torch.Tensor, expected: torch.Tensor, tol: float, what: str) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    err = relative_error(actual, expected)
    # `err <= tol` is False for NaN, so a NaN anywhere fails here.
    assert err <= tol, f"{what}: relative error {err:.3g} > {tol:g}"


def check_against_reference(problem: Problem, device: str) -> None:
    kwargs = make_inputs(problem, seed=0, device=device).kwargs()
    out, final_states = triton_ssd.ssd_forward(**kwargs)
    ref_out, ref_states = reference.ssd_forward(**kwargs)
    assert out.dtype == kwargs["x"].dtype and final_states.dtype == torch.float32
    tol = REL_TOL[problem.dtype]
    assert_close(out, ref_out, tol, "out")
    assert_close(final_states, ref_states, tol, "final_states")


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", CASES)
def test_matches_reference_on_cpu(case: str, dtype: str) -> None:
    check_against_reference(replace(CASES[case], dtype=dtype), "cpu")


@pytest.mark.interpreter
def test_bare_call_returns_out_only() -> None:
    problem = replace(
        TINY,
        has_D=False,
        has_z=False,
        has_dt_bias=False,
        dt_softplus=False,
        has_initial_states=False,
        return_final_states=False,
    )
    kwargs = make_inputs(problem, seed=1, device="cpu").kwargs()
    out = triton_ssd.ssd_forward(**kwargs)
    assert isinstance(out, torch.Tensor)
    assert_close(out, reference.ssd_forward(**kwargs), REL_TOL["float32"], "out")


def test_assert_close_rejects_nan() -> None:
    expected = torch.ones(4, dtype=torch.float64)
    actual = expected.clone()
    actual[2] = math.nan
    with pytest.raises(AssertionError, match="relative error nan"):
        assert_close(actual, expected, 1.0, "out")


def test_a_c_compiler_that_is_not_there_is_refused_before_any_launch() -> None:
    with pytest.raises(RuntimeError, match="CC='/no/such/cc' is not an executable"):
        triton_ssd.check_c_compiler({"CC": "/no/such/cc"})
    triton_ssd.check_c_compiler({})  # unset: Triton finds gcc or clang itself
    triton_ssd.check_c_compiler({"CC": sys.executable})  # any executable passes


def test_loader_skips_the_package_init() -> None:
    module = triton_ssd.import_mamba_module("mamba_ssm.ops.triton.ssd_combined")
    assert hasattr(module, "_mamba_chunk_scan_combined_fwd")
    # mamba_ssm/__init__.py would have set __version__ and imported the CUDA extension.
    assert not hasattr(sys.modules["mamba_ssm"], "__version__")
    assert "selective_scan_cuda" not in sys.modules
    with pytest.raises(ValueError, match="not a mamba_ssm module"):
        triton_ssd.import_mamba_module("triton")


def test_reset_autotuning_clears_every_kernel() -> None:
    tuners = [
        getattr(triton_ssd.import_mamba_module(f"mamba_ssm.ops.triton.{module}"), name)
        for name, module in triton_ssd._KERNEL_MODULES.items()
    ]
    assert [t.fn.__name__ for t in tuners] == list(triton_ssd.KERNEL_NAMES)
    for tuner in tuners:
        tuner.cache[("stale-key",)] = tuner.configs[0]
    triton_ssd.reset_autotuning()
    assert all(not tuner.cache for tuner in tuners)


def test_autotune_state_restores_the_picks_it_took() -> None:
    """triton_autotune=twice keeps the first tuning's picks in a snapshot while Triton tunes
    again, and puts the faster set back before timing. (With one config per kernel, as under the
    interpreter, Triton caches nothing, so the picks here are planted.)"""
    tuners = triton_ssd._autotuners()
    triton_ssd.reset_autotuning()
    for tuner in tuners.values():
        tuner.cache[("first",)] = tuner.configs[0]
    state = triton_ssd.autotune_state()
    assert list(state) == list(triton_ssd.KERNEL_NAMES)
    for tuner in tuners.values():
        tuner.cache[("second",)] = tuner.configs[-1]  # a later tuning leaves the snapshot alone
    assert all(list(picks) == [("first",)] for picks in state.values())
    triton_ssd.reset_autotuning()
    triton_ssd.restore_autotuning(state)
    assert all(tuner.cache == state[name] for name, tuner in tuners.items())
    triton_ssd.reset_autotuning()


@pytest.mark.gpu
def test_restored_picks_run_without_tuning_on_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the GPU Triton benchmarks its configs: a forward after restore_autotuning runs with the
    restored picks and tunes nothing new. In mamba_ssm's deterministic mode (on for GPU tests,
    tests/conftest.py) each kernel has one config and tunes nothing, so each list is doubled
    here: a tuner with two configs tunes."""
    for tuner in triton_ssd._autotuners().values():
        if len(tuner.configs) == 1:
            monkeypatch.setattr(tuner, "configs", tuner.configs * 2)
    kwargs = make_inputs(TINY, seed=3, device="cuda").kwargs()
    triton_ssd.reset_autotuning()
    triton_ssd.ssd_forward(**kwargs)
    state, picks = triton_ssd.autotune_state(), triton_ssd.autotune_picks()
    assert all(state.values())
    triton_ssd.reset_autotuning()
    triton_ssd.restore_autotuning(state)
    triton_ssd.ssd_forward(**kwargs)
    assert triton_ssd.autotune_state() == state and triton_ssd.autotune_picks() == picks


@pytest.mark.interpreter
def test_autotune_picks_name_the_config_of_every_kernel() -> None:
    triton_ssd.ssd_forward(**make_inputs(TINY, seed=3).kwargs())
    picks = triton_ssd.autotune_picks()
    assert list(picks) == list(triton_ssd.KERNEL_NAMES)
    assert all("num_warps" in pick for pick in picks.values())


def test_cpu_shims_refuse_compiled_kernels() -> None:
    """Without the interpreter the shims must not be applied: they would alter a GPU process."""
    code = "from kernels import triton_ssd; triton_ssd.enable_cpu_interpreter()"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "set TRITON_INTERPRET=1 before triton is imported" in result.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_matches_reference_on_gpu(dtype: str) -> None:
    """A Mamba2-1.3B-like layer (L=4096, H=64, P=64, N=128, chunk 256) on the GPU, with the
    harness's limits and its poisoned allocator: Triton is the fallback that judges the others
    past the reference's memory budget, so it meets the same standard."""
    problem = Problem(has_initial_states=True, return_final_states=True, dtype=dtype)
    kwargs = make_inputs(problem, seed=0, device="cuda").kwargs()
    ref_out, ref_states = reference.ssd_forward(**kwargs)
    triton_ssd.ssd_forward(**kwargs)  # Triton tunes at its first call, writing out per config
    with poisoned_allocations("cuda", working_set_bytes(problem)):
        out, final_states = triton_ssd.ssd_forward(**kwargs)
    assert_close(out, ref_out, TOLERANCE[dtype], "out")
    assert_close(final_states, ref_states, TOLERANCE[dtype], "final_states")
