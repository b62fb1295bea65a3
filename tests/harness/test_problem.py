"""Problem validation, the FLOP/byte model, and key()."""

from __future__ import annotations

import math

import pytest

from harness.problem import (
    Problem,
    ProblemError,
    flops,
    min_bytes,
    output_bytes,
    working_set_bytes,
)

TINY = dict(batch=1, seqlen=48, nheads=2, headdim=4, dstate=8, ngroups=1, chunk_size=32)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"batch": 0}, "batch"),
        ({"seqlen": -5}, "seqlen"),
        ({"headdim": 64.0}, "headdim"),
        ({"nheads": True}, "nheads"),
        ({"dstate": "128"}, "dstate"),
        ({"headdim": 1024}, "headdim"),
        ({"dstate": 513}, "dstate"),
        ({"nheads": 6, "ngroups": 4}, "ngroups"),
        ({"dtype": "float64"}, "dtype"),
        ({"chunk_size": 48}, "chunk_size"),
        ({"chunk_size": 8}, "chunk_size"),
        ({"dt_limit": (0.1, 0.1)}, "dt_limit"),
        ({"dt_limit": (-1.0, 1.0)}, "dt_limit"),
        ({"dt_limit": (math.nan, 1.0)}, "dt_limit"),
        ({"dt_limit": (0.0, 1.0, 2.0)}, "dt_limit"),
        ({"dt_limit": 0.1}, "dt_limit"),
        ({"dt_limit": ("low", "high")}, "dt_limit"),
        ({"has_D": False, "D_has_hdim": True}, "D_has_hdim"),
        ({"has_z": 1}, "has_z"),
        ({"return_final_states": "yes"}, "return_final_states"),
    ],
)
def test_bad_values_are_rejected_naming_the_field(values: dict, field: str) -> None:
    with pytest.raises(ProblemError, match=field):
        Problem(**values)


def test_problem_error_is_a_value_error() -> None:
    assert issubclass(ProblemError, ValueError)


def test_dt_limit_list_accepted() -> None:
    problem = Problem(dt_limit=[0.0, 0.1], has_z=True)  # as a YAML config hands it
    assert problem.dt_limit == (0.0, 0.1)
    assert problem == Problem(dt_limit=(0.0, 0.1), has_z=True)
    assert hash(problem) == hash(Problem(dt_limit=(0.0, 0.1), has_z=True))


def test_points_that_differ_only_in_dt_limit_have_keys_of_their_own() -> None:
    """Keys stay short where `:g` names the value exactly (the keys of runs already recorded),
    and two limits that agree to six digits still get two keys, so no part file replaces
    another's."""
    assert Problem(dt_limit=(0.0, 0.1)).key().endswith("_lim0-0.1")
    assert Problem(dt_limit=(0.001, 100.0)).key().endswith("_lim0.001-100")
    close = [Problem(dt_limit=(0.0, high)).key() for high in (0.1234561, 0.1234564)]
    assert close[0] != close[1] and close[0].endswith("_lim0-0.1234561")


def test_flops_hand_computed() -> None:
    # Chunks of 32 and 16 tokens. Per chunk of q: g·2q²N + h·(q²P + 4qNP).
    # q=32: 2·1024·8 + 2·(1024·4 + 4·32·8·4) = 16384 + 16384; q=16: 4096 + 2·(1024 + 2048).
    assert flops(Problem(**TINY)) == 32768 + 10240


def test_flops_scale_with_batch_and_seqlen() -> None:
    base = Problem(**{**TINY, "seqlen": 64})
    assert flops(Problem(**{**TINY, "seqlen": 64, "batch": 3})) == 3 * flops(base)
    assert flops(Problem(**{**TINY, "seqlen": 128})) == 2 * flops(base)
    # A ragged last chunk counts what it computes: less than a full chunk, more than nothing.
    assert flops(Problem(**{**TINY, "seqlen": 32})) < flops(Problem(**TINY)) < flops(base)


def test_min_bytes_hand_computed() -> None:
    problem = Problem(**TINY, dtype="bfloat16")  # has_D and has_dt_bias by default
    # x + out 48·2·4·2·2, B + C 48·8·2·2, dt 48·2·4, A + dt_bias 2·4·2, D 2·4.
    assert min_bytes(problem) == 1536 + 1536 + 384 + 16 + 8
    state = 2 * 4 * 8 * 4
    extras = Problem(
        **TINY, dtype="bfloat16", has_z=True, has_initial_states=True, return_final_states=True
    )
    assert min_bytes(extras) == min_bytes(problem) + 48 * 2 * 4 * 2 + 2 * state
    assert min_bytes(Problem(**TINY, dtype="float32")) == 2 * 1536 + 2 * 1536 + 384 + 16 + 8


def test_output_bytes_hand_computed() -> None:
    # out 48·2·4 bf16 elements; final states 2·4·8 float32.
    assert output_bytes(Problem(**TINY)) == 768
    assert output_bytes(Problem(**TINY, return_final_states=True)) == 768 + 2 * 4 * 8 * 4
    assert output_bytes(Problem(**TINY, dtype="float32")) == 2 * 768


def test_working_set_bytes_hand_computed() -> None:
    # outputs 2·768; states at chunk 16: 3 chunks·2·4·8·4 twice; per token 48·2·16; C·Bᵀ 48·32·4.
    assert working_set_bytes(Problem(**TINY)) == 2 * 768 + 2 * 768 + 1536 + 6144


@pytest.mark.parametrize(
    ("seqlen", "nheads", "dstate", "chunk"),
    [(65536, 128, 256, 256), (65536, 128, 256, 128), (16384, 32, 256, 128), (1024, 32, 64, 256),
     (4096, 64, 128, 128), (2048, 128, 64, 128)],
)  # fmt: skip
def _allocated_bytes(forward, kwargs: dict) -> int:
    """Bytes of every tensor `forward` creates by a factory op (empty, zeros, full and their
    _like forms), summed: an upper bound on what it holds at once."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    factories = {
        aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default,
        aten.zeros.default, aten.zeros_like.default, aten.full.default, aten.full_like.default,
        aten.new_empty.default, aten.new_zeros.default,
    }  # fmt: skip

    class Allocations(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func in factories or func._overloadpacket in {aten.clone, aten._to_copy}:
                self.total += out.untyped_storage().nbytes()
            return out

    allocations = Allocations()
    with allocations:
        forward(**kwargs)
    return allocations.total


@pytest.mark.parametrize(
    ("seqlen", "nheads", "dstate", "chunk"),
    [(65536, 128, 256, 256), (65536, 128, 256, 128), (16384, 32, 256, 128), (1024, 32, 64, 256),
     (4096, 64, 128, 128), (2048, 128, 64, 128)],
)  # fmt: skip
def test_working_set_bytes_holds_what_the_cutile_forward_allocates(
    seqlen: int, nheads: int, dstate: int, chunk: int
) -> None:
    """Every tensor cuTile's forward allocates, summed (on meta tensors, as its launches are
    recorded without a GPU), fits the poisoned block, so its output is cut from it."""
    pytest.importorskip("cuda.tile", reason="cuda-tile is not installed")
    import functools

    from harness.inputs import meta_inputs
    from kernels.cutile import launch
    from kernels.cutile.config import inputs_default_config
    from kernels.cutile.ssd import launch_forward_of

    problem = Problem(seqlen=seqlen, nheads=nheads, dstate=dstate, chunk_size=256)
    kwargs = {**meta_inputs(problem).kwargs(), "chunk_size": chunk}
    forward = functools.partial(launch_forward_of, config=inputs_default_config(kwargs))
    with launch.recorded(132):
        total = _allocated_bytes(lambda **kw: forward(kw), kwargs)
    assert output_bytes(problem) < total <= working_set_bytes(problem)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("chunk", [64, 32])
def test_working_set_bytes_holds_what_the_triton_forward_allocates(dtype: str, chunk: int) -> None:
    """Triton too (its interpreter on the CPU; its copies of the arguments are the interpreter's
    own, not factory ops), with every option that adds an output, at the problem's chunk and
    the half that chunk_policy=fastest runs."""
    from harness.inputs import make_inputs
    from kernels import triton_ssd

    problem = Problem(
        seqlen=1024, nheads=8, headdim=16, dstate=32, chunk_size=64, dtype=dtype, has_z=True,
        has_initial_states=True, return_final_states=True,
    )  # fmt: skip
    kwargs = {**make_inputs(problem, seed=0, device="cpu").kwargs(), "chunk_size": chunk}
    total = _allocated_bytes(triton_ssd.ssd_forward, kwargs)
    assert output_bytes(problem) < total <= working_set_bytes(problem)


def test_min_bytes_scale_with_seqlen() -> None:
    one, two = (min_bytes(Problem(**{**TINY, "seqlen": s})) for s in (4096, 8192))
    per_head_constants = 2 * 4 * 2 + 2 * 4  # A, dt_bias, D do not grow with seqlen
    assert two - per_head_constants == 2 * (one - per_head_constants)


def test_key_is_stable() -> None:
    assert Problem().key() == "b1_L4096_H64_P64_N128_G1_Q256_bfloat16_D_bias_sp"
    assert Problem(dt_limit=(0.0, 0.1), D_has_hdim=True, has_dt_bias=False).key() == (
        "b1_L4096_H64_P64_N128_G1_Q256_bfloat16_Dhp_sp_lim0-0.1"
    )


def test_key_distinguishes_every_field() -> None:
    variants = [
        {},
        {"batch": 2},
        {"seqlen": 2048},
        {"nheads": 32},
        {"headdim": 32},
        {"dstate": 64},
        {"ngroups": 2},
        {"chunk_size": 128},
        {"dtype": "float16"},
        {"has_D": False},
        {"D_has_hdim": True},
        {"has_z": True},
        {"has_dt_bias": False},
        {"dt_softplus": False},
        {"dt_limit": (0.0, 0.1)},
        {"dt_limit": (0.001, math.inf)},
        {"has_initial_states": True},
        {"return_final_states": True},
    ]
    keys = [Problem(**v).key() for v in variants]
    assert len(set(keys)) == len(keys)
