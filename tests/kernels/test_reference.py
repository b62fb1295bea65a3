"""The float64 chunked reference against the token recurrence and mamba_ssm's own references."""

from __future__ import annotations

import math

import pytest
import torch

from harness.inputs import make_inputs
from harness.problem import Problem
from kernels.reference import effective_dt, ssd_forward, ssd_recurrent
from kernels.triton_ssd import import_mamba_module

TIGHT = dict(rtol=1e-10, atol=1e-10)
SMALL = dict(batch=2, seqlen=100, nheads=4, headdim=8, dstate=16, ngroups=1, chunk_size=32)

CASES = {
    "defaults": {},
    "seqlen1": {"seqlen": 1, "chunk_size": 16},
    "seqlen7": {"seqlen": 7, "chunk_size": 16},
    "seqlen100_q16_g2": {"chunk_size": 16, "ngroups": 2},
    "one_chunk_exact": {"seqlen": 32},
    "groups_eq_heads": {"ngroups": 4},
    "D_hp": {"D_has_hdim": True},
    "no_D": {"has_D": False},
    "z": {"has_z": True},
    "bare_dt": {"has_dt_bias": False, "dt_softplus": False},
    "softplus_no_bias": {"has_dt_bias": False},
    "bias_no_softplus": {"dt_softplus": False},
    "clamped": {"dt_limit": (0.01, 0.05)},
    "initial_states": {"has_initial_states": True},
    "everything": {
        "seqlen": 77,
        "chunk_size": 16,
        "ngroups": 2,
        "D_has_hdim": True,
        "has_z": True,
        "dt_limit": (0.002, 0.08),
        "has_initial_states": True,
    },  # fmt: skip
}


def _kwargs(problem: Problem, seed: int = 0) -> dict:
    kwargs = make_inputs(problem, seed).kwargs()
    kwargs["return_final_states"] = True
    return kwargs


def _float64(kwargs: dict) -> dict:
    return {k: v.double() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_chunked_matches_recurrence(case: str) -> None:
    kwargs = _kwargs(Problem(**{**SMALL, "dtype": "float32", **CASES[case]}))
    out, final = ssd_forward(**kwargs)
    out_rec, final_rec = ssd_recurrent(**kwargs)
    assert out.dtype == final.dtype == torch.float64
    torch.testing.assert_close(out, out_rec, **TIGHT)
    torch.testing.assert_close(final, final_rec, **TIGHT)


def test_clamp_case_clamps() -> None:
    kwargs = _kwargs(Problem(**{**SMALL, **CASES["clamped"]}))
    unclamped = effective_dt(kwargs["dt"], kwargs["dt_bias"], dt_softplus=True)
    assert (unclamped < 0.01).any() and (unclamped > 0.05).any()


def test_effective_dt_by_hand() -> None:
    raw = torch.tensor([[[-0.3, 0.0, 19.5, 20.5]]], dtype=torch.float64)
    bias = torch.tensor([0.0, 0.1, 0.0, 0.0], dtype=torch.float64)
    assert effective_dt(raw).tolist() == [[[0.0, 0.0, 19.5, 20.5]]]  # default limit: max(dt, 0)
    softplus = [math.log1p(math.exp(-0.3)), math.log1p(math.exp(0.1)), math.log1p(math.exp(19.5))]
    got = effective_dt(raw, bias, dt_softplus=True)
    torch.testing.assert_close(got, torch.tensor([[[*softplus, 20.5]]], dtype=torch.float64))
    clamped = effective_dt(raw, bias, dt_softplus=True, dt_limit=(0.7, 20.0))
    assert clamped.tolist() == [[[0.7, softplus[1], softplus[2], 20.0]]]


def test_result_independent_of_chunk_size() -> None:
    kwargs = _kwargs(Problem(**{**SMALL, "has_initial_states": True}))
    out, final = ssd_forward(**{**kwargs, "chunk_size": 16})
    for chunk_size in (7, 64, 1000):
        other_out, other_final = ssd_forward(**{**kwargs, "chunk_size": chunk_size})
        torch.testing.assert_close(other_out, out, **TIGHT)
        torch.testing.assert_close(other_final, final, **TIGHT)


def test_low_precision_inputs_upcast_and_out_only() -> None:
    problem = Problem(**{**SMALL, "dtype": "bfloat16", "has_z": True})
    inputs = make_inputs(problem, 0)
    out = ssd_forward(**inputs.kwargs())
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64
    torch.testing.assert_close(out, ssd_forward(**_float64(inputs.kwargs())), rtol=0, atol=0)


def test_full_decay_underflows_without_nan() -> None:
    kwargs = _kwargs(Problem(**{**SMALL, "has_initial_states": True}))
    kwargs["dt"] = torch.full_like(kwargs["dt"], 30.0)  # dA = -30·|A| per token: exp underflows
    out, final = ssd_forward(**kwargs)
    assert torch.isfinite(out).all() and torch.isfinite(final).all()
    torch.testing.assert_close(out, ssd_recurrent(**kwargs)[0], **TIGHT)


def test_bad_shape_names_the_argument() -> None:
    kwargs = _kwargs(Problem(**SMALL))
    with pytest.raises(ValueError, match="dt_bias"):
        ssd_forward(**{**kwargs, "dt_bias": kwargs["dt_bias"][:2]})


# mamba_ssm's own pure-PyTorch references (importing them imports Triton: tests/conftest.py sets
# TRITON_INTERPRET=1 first on machines without a GPU).


@pytest.mark.parametrize("ngroups", [1, 2])
@pytest.mark.parametrize("initial_states", [False, True])
def test_matches_ssd_minimal_discrete(ngroups: int, initial_states: bool) -> None:
    """Listing 1 of the Mamba-2 paper: no D, z, bias or ragged chunks; dt is handed over final."""
    problem = Problem(
        **{**SMALL, "seqlen": 96, "ngroups": ngroups, "has_D": False, "has_dt_bias": False},
        has_initial_states=initial_states,
    )
    kwargs = _float64(_kwargs(problem))
    dt = effective_dt(kwargs["dt"], dt_softplus=True)
    heads_per_group = problem.nheads // ngroups
    B, C = (kwargs[k].repeat_interleave(heads_per_group, dim=2) for k in ("B", "C"))
    h0 = kwargs["initial_states"]
    minimal = import_mamba_module("mamba_ssm.modules.ssd_minimal")
    y, final = minimal.ssd_minimal_discrete(
        kwargs["x"] * dt[..., None], kwargs["A"] * dt, B, C, problem.chunk_size,
        initial_states=None if h0 is None else h0[:, None],
    )  # fmt: skip
    out, final_ref = ssd_forward(**{**kwargs, "dt": dt, "dt_softplus": False})
    torch.testing.assert_close(out, y, **TIGHT)
    torch.testing.assert_close(final_ref, final, **TIGHT)


@pytest.mark.parametrize("case", ["defaults", "D_hp", "z", "bare_dt", "bias_no_softplus"])
def test_matches_ssd_chunk_scan_combined_ref(case: str) -> None:
    """mamba_ssm's einsum version of the chunked forward, with D, z, dt_bias and softplus."""
    problem = Problem(**{**SMALL, "seqlen": 96, "ngroups": 2, **CASES[case]})
    inputs = make_inputs(problem, 0)
    double = _float64(inputs.kwargs())
    for unsupported in ("initial_states", "dt_limit", "return_final_states"):
        del double[unsupported]
    combined = import_mamba_module("mamba_ssm.ops.triton.ssd_combined")
    expected = combined.ssd_chunk_scan_combined_ref(**double)
    torch.testing.assert_close(ssd_forward(**inputs.kwargs()), expected, **TIGHT)
