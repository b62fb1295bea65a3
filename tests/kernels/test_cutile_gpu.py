"""The cuTile SSD forward on a GPU: the whole contract against the float64 reference.

Run on a GPU node: `pytest -m gpu tests/kernels/test_cutile_gpu.py`. Every case draws fresh inputs
(its own seed), poisons the allocator with NaN before the call, checks out and final states by
‖out−ref‖/‖ref‖ against kernels.reference, and cross-checks out against mamba_ssm's Triton.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import replace

import pytest
import torch

from harness.correctness import TOLERANCE, passes, poisoned_allocations, relative_error
from harness.inputs import SSDInputs, make_inputs
from harness.problem import Problem, working_set_bytes
from kernels.cutile.config import SSDConfig

pytestmark = pytest.mark.gpu

BASE = Problem(
    batch=1,
    seqlen=1024,
    nheads=8,
    headdim=64,
    dstate=64,
    ngroups=1,
    chunk_size=256,
    dtype="bfloat16",
    return_final_states=True,
)

CASES = {
    # dtypes (fp32 runs the matmuls in TF32, like Triton's default)
    "fp32": dict(dtype="float32"),
    "fp16": dict(dtype="float16"),
    "bf16": dict(),
    # ragged and tiny sequences, several chunk sizes
    "L1": dict(seqlen=1),
    "L255": dict(seqlen=255),
    "L257": dict(seqlen=257),
    "L3000": dict(seqlen=3000, chunk_size=128),
    "L3000-fp32": dict(seqlen=3000, dtype="float32", chunk_size=64),
    "L100-Q64-fp16": dict(seqlen=100, chunk_size=64, dtype="float16"),
    # groups
    "G2": dict(nheads=8, ngroups=2),
    "G8": dict(nheads=16, ngroups=8),
    "G=H": dict(nheads=8, ngroups=8),
    # head and state sizes
    "P32": dict(headdim=32),
    "P128": dict(headdim=128),
    "N16": dict(dstate=16),
    "N128": dict(dstate=128),
    "N256": dict(dstate=256),
    "N256-fp32": dict(dstate=256, dtype="float32"),
    # options
    "D-hp-z": dict(D_has_hdim=True, has_z=True),
    "noD-nobias-nosoftplus": dict(has_D=False, has_dt_bias=False, dt_softplus=False),
    "dt-limit": dict(dt_limit=(0.005, 0.05)),
    "initial-states": dict(has_initial_states=True),
    "no-final": dict(return_final_states=False, has_z=True),
    "batch3": dict(batch=3, seqlen=600, has_initial_states=True),
    "default-sweep-point": dict(seqlen=4096, nheads=64, dstate=128, return_final_states=False),
    "N256-Q128-chunk-kernel": dict(seqlen=4096, nheads=32, dstate=256, chunk_size=128),
    "N256-Q128-wide-walkers": dict(seqlen=2048, nheads=128, dstate=256, chunk_size=128),
    "N256-Q128-walkers-one-per-sm": dict(seqlen=2048, nheads=32, dstate=256, chunk_size=128),
    "models-codestral": dict(seqlen=2048, nheads=128, ngroups=8, dstate=128),
    # chained by PDL beyond short problems (change 41), with the long problems' other knobs,
    "chained-2K-64-heads": dict(seqlen=2048, nheads=64, dstate=64, chunk_size=128),
    "chained-1K-128-heads-N256": dict(seqlen=1024, nheads=128, dstate=256, chunk_size=128),
    # and by change 42: C·Bᵀ from chunk_cb; walk segments with segment_scan
    "chained-2K-128-heads-N128": dict(seqlen=2048, nheads=128, dstate=128, chunk_size=128),
    "chained-4K-64-heads-N128": dict(seqlen=4096, nheads=64, dstate=128, chunk_size=128),
    # and by change 55: 64-column walkers one per SM, two segments, square k-tiles
    "chained-4K-32-heads-N128": dict(seqlen=4096, nheads=32, dstate=128, chunk_size=128),
    # short over chunks of 128: one segment of 64-column walkers one per SM (change 57), ragged
    "short-N128-Q128-one-segment": dict(
        seqlen=2000, nheads=16, dstate=128, chunk_size=128, has_initial_states=True
    ),
    # beyond CHAIN_SEQLEN, each walk build with change 49's latency hint
    "long-8K-32-heads-N256": dict(seqlen=8192, nheads=32, dstate=256, chunk_size=128),
    "long-8K-64-heads-N256": dict(seqlen=8192, nheads=64, dstate=256, chunk_size=128),
    "long-8K-64-heads-N256-Q256": dict(seqlen=8192, nheads=64, dstate=256),
    "long-8K-128-heads-N128": dict(seqlen=8192, nheads=128, dstate=128, chunk_size=128),
    # dstate 64's walkers one per SM with plain state stores (change 53), ragged and batched
    "walkers-one-per-sm-N64": dict(seqlen=3000, nheads=128, dstate=64, has_initial_states=True),
    "walkers-one-per-sm-N64-batch2": dict(
        batch=2, seqlen=2048, nheads=64, dstate=64, chunk_size=128
    ),
    # dstate 64's segmented walks up to CHAIN_SEQLEN one per SM (change 59), ragged
    "segmented-N64-one-per-sm": dict(
        seqlen=3500, nheads=32, dstate=64, chunk_size=128, has_initial_states=True
    ),
    # and beyond CHAIN_SEQLEN up to twice it, reading their weights, with PDL (change 60), ragged
    "segmented-N64-one-per-sm-pdl": dict(
        seqlen=7000, nheads=24, dstate=64, chunk_size=128, has_initial_states=True
    ),
    # two segments and no final states: the walk stores the segment starts, no segment_scan
    # (folded at dstate 64, ragged, from initial states; a second product at 128)
    "two-segments-direct-N64": dict(
        seqlen=2000, nheads=64, dstate=64, chunk_size=128, has_initial_states=True,
        return_final_states=False,
    ),
    "two-segments-direct-N128": dict(
        seqlen=4096, nheads=32, dstate=128, chunk_size=128, return_final_states=False
    ),
}  # fmt: skip


def _seed(name: str) -> int:
    return zlib.crc32(name.encode())


def _run(fn, inputs: SSDInputs, captured: bool = False, poisoned: bool = True):
    """`fn`'s (out, final states or None) from NaN-filled memory (`poisoned`; after a first
    call outside it, which does whatever is done once: Triton's autotuning); `captured`: the
    call captured into a CUDA graph, its outputs filled with NaN, then replayed (`_replayed`)."""
    if captured:  # the graph allocates from its own pool; its outputs are filled before replay
        result = _replayed(fn, inputs.kwargs())
    elif poisoned:
        fn(**inputs.kwargs())
        with poisoned_allocations("cuda", working_set_bytes(inputs.problem)):
            result = fn(**inputs.kwargs())
    else:
        result = fn(**inputs.kwargs())
    torch.cuda.synchronize()
    return result if isinstance(result, tuple) else (result, None)


def _check(
    name: str,
    problem: Problem,
    inputs: SSDInputs,
    config: SSDConfig | None = None,
    captured: bool = False,
) -> None:
    """cuTile's forward (eager, or `captured` into a CUDA graph and replayed) against float64
    and against mamba_ssm's Triton."""
    from kernels.cutile.ssd import ssd_forward as cutile_forward
    from kernels.reference import ssd_forward as reference_forward
    from kernels.triton_ssd import ssd_forward as triton_forward

    out, final = _run(functools.partial(cutile_forward, config=config), inputs, captured)
    ref_out, ref_final = _run(reference_forward, inputs, poisoned=False)
    err = relative_error(out, ref_out)
    mode = "graph" if captured else "eager"
    print(f"[cutile-vs-float64] {name} {mode} dtype={problem.dtype} out={err:.3e}", end="")
    assert out.dtype == inputs.x.dtype and out.shape == inputs.x.shape
    assert passes(err, problem.dtype), f"out rel err {err} > {TOLERANCE[problem.dtype]}"
    if problem.return_final_states:
        final_err = relative_error(final, ref_final)
        print(f" final={final_err:.3e}", end="")
        assert final.dtype == torch.float32
        assert passes(final_err, problem.dtype), f"final rel err {final_err}"
    tri_out, _ = _run(triton_forward, inputs)
    cross = relative_error(out, tri_out)
    print(f" vs-triton={cross:.3e} triton-vs-float64={relative_error(tri_out, ref_out):.3e}")
    assert passes(cross, problem.dtype), f"cuTile vs Triton rel err {cross}"


@pytest.mark.parametrize("name", list(CASES))
def test_matches_reference(name: str) -> None:
    problem = replace(BASE, **CASES[name])
    _check(name, problem, make_inputs(problem, seed=_seed(name), device="cuda"))


# With Mamba-2's A (−U(1, 16)) little of the state outlives a chunk, so the carried state is a
# small part of out, and a bug in it (the chunk's decay applied twice) passes the bf16 check on
# out alone (review after v45: 4e-3 to 5e-3 at 4K/32/64 and 4K/32/128). With A = −U(0.05, 1)
# about a quarter of the median head's state outlives a chunk of 256, and the same bug gives
# 7e-2 to 8e-2 there (the reference so altered, on the CPU): these cases run each kind of walk
# (segments, carried C·hᵀ rows, one or two walkers a head) that way.
LONG_MEMORY = [
    "walkers-one-per-sm-N64",
    "segmented-N64-one-per-sm",
    "chained-4K-32-heads-N128",
    "two-segments-direct-N128",
    "long-8K-32-heads-N256",
    "N256-Q128-wide-walkers",
]


def _long_memory(inputs: SSDInputs, name: str) -> SSDInputs:
    """`inputs` with A = −U(0.05, 1) per head (drawn from `name`'s seed)."""
    draw = torch.rand(inputs.A.shape[0], generator=torch.Generator().manual_seed(_seed(name)))
    return replace(inputs, A=-(0.05 + 0.95 * draw).to("cuda"))


@pytest.mark.parametrize("name", LONG_MEMORY)
def test_long_memory_matches_reference(name: str) -> None:
    problem = replace(BASE, **CASES[name])
    inputs = make_inputs(problem, seed=_seed(name), device="cuda")
    _check(f"{name}-long-memory", problem, _long_memory(inputs, name))


# Launch configurations the autotuner may pick, beyond the defaults the cases above use: forced
# segments (with initial states and a ragged tail), two heads per CTA with narrow state slices,
# one unsplit walk with whole-chunk steps, either operand carrying the walk's decay weights with
# two heads sharing B, C·Bᵀ from chunk_cb with square and with tall compute_out tiles, and
# stored in the input dtype, and the decay of k-tiles below the diagonal as a row times a column
# factor, and plain launches instead of programmatic dependents, and three compute_out CTAs per
# SM with 32-column k-tiles (pairs of heads, and one head reading chunk_cb) under latency hints
# other than the default, and with 64-column ones for pairs reading chunk_cb (change 69), and
# a walk whose mma step covers the chunk (its dA and dt loaded once, dA_last taken from the dA
# tile) for two heads, and four compute_out CTAs per SM with the k-tiles' decays hinted (dstate
# 256's default with chunk_cb), and the walk's weights read from chunk_cumsum (weights on x with
# two heads and segments, on B over whole chunks), and the walk's state stores without TMA (two
# heads, segments). Whole 256-row chunks, so compute_out has row blocks past the first (TM 64
# and 128).
CONFIGS = {
    "three-segments": SSDConfig(state_segments=3),
    "two-heads-slices": SSDConfig(out_heads=2, out_slice_n=64, out_block_m=128, out_occupancy=2),
    "one-segment-wide": SSDConfig(state_segments=1, state_block_q=256, state_block_n=128),
    "weights-on-x-two-heads": SSDConfig(state_weight_x=1, state_heads=2, state_segments=3),
    "weights-on-b-two-heads": SSDConfig(state_weight_x=0, state_heads=2, state_segments=1),
    "cb-two-heads-segments": SSDConfig(out_cb=1, out_heads=2, state_segments=3),
    "two-heads-folded-segments": SSDConfig(out_heads=2, state_segments=3, out_fold_segments=1),
    "cb-tall-rows": SSDConfig(out_cb=1, out_block_m=128, out_block_k=64, out_slice_n=64),
    "cb-in-input-dtype": SSDConfig(out_cb=2, out_heads=2),
    "rank1-two-heads-segments": SSDConfig(out_rank1=1, out_heads=2, state_segments=3),
    "rank1-cb-tall-rows": SSDConfig(
        out_rank1=1, out_cb=1, out_block_m=128, out_block_k=64, out_slice_n=64
    ),
    "plain-launches": SSDConfig(dependent_launch=0, state_segments=3, out_cb=1),
    "three-ctas-k32-latency": SSDConfig(
        out_heads=2, out_occupancy=3, out_block_k=32, out_rank1=1, state_latency=2, out_latency=8
    ),
    "one-head-cb-three-ctas": SSDConfig(
        out_cb=1, out_rank1=1, out_occupancy=3, out_block_k=32, state_latency=8, out_latency=2
    ),
    "whole-chunk-steps-two-heads": SSDConfig(state_heads=2, state_block_q=256, state_segments=3),
    "hinted-decays-four-ctas": SSDConfig(
        out_cb=1, out_rank1=1, out_occupancy=4, out_block_k=32, out_latency=2, out_hint_decays=1
    ),
    "cb-pairs-k64-hinted-three-ctas": SSDConfig(
        out_cb=1, out_heads=2, out_rank1=1, out_occupancy=3, out_block_k=64, out_hint_decays=1
    ),
    "walk-weights-two-heads-segments": SSDConfig(state_weights=1, state_heads=2, state_segments=3),
    "walk-weights-on-b-whole-chunks": SSDConfig(
        state_weights=1, state_weight_x=0, state_block_q=256, state_segments=1
    ),
    "walk-plain-state-stores": SSDConfig(state_store_tma=0, state_heads=2, state_segments=3),
}

# Two segments without final states (the walk's DIRECT stores) under other knobs: two heads per
# walker with plain state stores, the start folded in; C·Bᵀ from chunk_cb for pairs of heads.
DIRECT_CONFIGS = {
    "direct-two-heads-plain-stores": SSDConfig(
        state_segments=2, state_heads=2, state_store_tma=0, out_fold_segments=1
    ),
    "direct-cb-pairs": SSDConfig(state_segments=2, out_cb=1, out_heads=2),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_launch_configurations(name: str) -> None:
    problem = replace(
        BASE, seqlen=1500, chunk_size=256, nheads=8, ngroups=2, dstate=128, has_initial_states=True
    )
    _check(name, problem, make_inputs(problem, seed=_seed(name), device="cuda"), CONFIGS[name])


@pytest.mark.parametrize("name", list(DIRECT_CONFIGS))
def test_two_segment_configurations_without_final_states(name: str) -> None:
    problem = replace(
        BASE, seqlen=1500, chunk_size=256, nheads=8, ngroups=2, dstate=128,
        has_initial_states=True, return_final_states=False,
    )  # fmt: skip
    inputs = make_inputs(problem, seed=_seed(name), device="cuda")
    _check(name, problem, inputs, DIRECT_CONFIGS[name])


# compute_out_chunk_kernel (chunks up to 128) beyond its default (the N256-Q128 case above):
# forced segments from initial states with a ragged tail and groups; the segment start folded,
# fp32 (TF32) with z at chunk 64; dstate 256 in fp16 with D per head-dim, z and hinted decays.
CHUNK_KERNEL_CASES = {
    "chunk-kernel-segments-initial-ragged": (
        dict(seqlen=1500, chunk_size=128, nheads=8, ngroups=2, dstate=128, has_initial_states=True),
        SSDConfig(out_chunk_heads=4, out_occupancy=1, state_segments=3),
    ),
    "chunk-kernel-folded-fp32-z": (
        dict(seqlen=1000, chunk_size=64, dtype="float32", has_z=True),
        SSDConfig(out_chunk_heads=8, out_occupancy=1, state_segments=3, out_fold_segments=1),
    ),
    "chunk-kernel-N256-fp16-D-per-headdim": (
        dict(seqlen=700, chunk_size=128, nheads=16, ngroups=2, dstate=256, dtype="float16",
             D_has_hdim=True, has_z=True),
        SSDConfig(out_chunk_heads=16, out_occupancy=1, out_hint_decays=1),
    ),
    "chunk-kernel-N256-noD": (
        dict(seqlen=1100, chunk_size=128, nheads=8, dstate=256, has_D=False),
        SSDConfig(out_chunk_heads=8, out_occupancy=1),
    ),
}  # fmt: skip


# The walk's C·hᵀ rows in place of its states (state_carry, change 70): dstate 256's default
# where it engages (pairs over chunk_cb) from initial states with groups and a ragged tail; the
# chunk kernel reading the rows in fp16 with z and D per head-dim; fp32 (TF32) with z over chunks
# of 256 in 64-row steps, so compute_out reads row blocks past the first; carry asked for with
# segments, which stores the states as before; and a carry walk whose loads are hinted 6, as the
# defaults' beyond CHAIN_SEQLEN are (change 71), where the rows take turns between two stores
# (change 84).
CARRY_CASES = {
    "carry-cb-pairs-initial-ragged": (
        dict(seqlen=1500, chunk_size=128, nheads=8, ngroups=2, dstate=256, has_initial_states=True),
        SSDConfig(state_carry=1, state_block_n=256, state_segments=1, state_occupancy=1,
                  state_weight_x=1, state_weights=1, out_cb=1, out_heads=2, out_occupancy=3,
                  out_rank1=1, out_latency=4, out_hint_decays=1),
    ),
    "carry-chunk-kernel-fp16-z-D-per-headdim": (
        dict(seqlen=700, chunk_size=128, nheads=16, ngroups=2, dstate=256, dtype="float16",
             D_has_hdim=True, has_z=True),
        SSDConfig(state_carry=1, state_block_n=256, state_segments=1, out_chunk_heads=16,
                  out_occupancy=1),
    ),
    "carry-fp32-z-steps64": (
        dict(seqlen=1000, headdim=32, dstate=16, dtype="float32", has_z=True),
        SSDConfig(state_carry=1, state_segments=1, state_block_q=64),
    ),
    "carry-with-segments-stores-states": (
        dict(seqlen=1500, chunk_size=128, nheads=8, dstate=256, has_initial_states=True),
        SSDConfig(state_carry=1, state_block_n=256, state_segments=3),
    ),
    "carry-hint6-cb-pairs-initial-ragged": (
        dict(seqlen=1500, chunk_size=128, nheads=8, ngroups=2, dstate=256, has_initial_states=True),
        SSDConfig(state_carry=1, state_block_n=256, state_segments=1, state_occupancy=1,
                  state_weight_x=1, state_weights=1, state_latency=6, out_cb=1, out_heads=2,
                  out_occupancy=3, out_rank1=1, out_latency=4, out_hint_decays=1),
    ),
}  # fmt: skip


# compute_out's C·Bᵀ computed beside the walk on the SMs its wave leaves free (state_cb, a kernel
# on a second stream, in CUDA graphs only: test_problems_beside_the_walk_in_a_cuda_graph; eager,
# chunk_cb runs after the walk): over the carry walk at dstate 256 (ragged, groups, initial
# states), and over 128-column walkers at dstate 128 over chunks of 256 (fp16, z, D per
# head-dim), where every chunk of every group is one of many CTAs' turns.
CB_CASES = {
    "cb-beside-walk-carry-pairs-initial-ragged": (
        CARRY_CASES["carry-cb-pairs-initial-ragged"][0],
        replace(CARRY_CASES["carry-cb-pairs-initial-ragged"][1], state_cb=1),
    ),
    "cb-beside-walk-N128-Q256-fp16-z-D-per-headdim": (
        dict(seqlen=1800, nheads=16, ngroups=4, dstate=128, dtype="float16", has_z=True,
             D_has_hdim=True),
        SSDConfig(state_block_n=128, state_segments=1, state_occupancy=1, out_cb=1, state_cb=1),
    ),
}  # fmt: skip


# C·Bᵀ in fp16 scaled per tile (out_cb=3), from chunk_cb after the walk and, where state_cb is
# set, from the strided kernel beside it in CUDA graphs: over the carry walk's rows (ragged,
# groups, initial states), and at dstate 128 over chunks of 256 (16 tiles a chunk) with z.
SCALED_CB_CASES = {
    "cb-scaled-fp16-carry-pairs-initial-ragged": (
        CARRY_CASES["carry-cb-pairs-initial-ragged"][0],
        replace(CARRY_CASES["carry-cb-pairs-initial-ragged"][1], out_cb=3),
    ),
    "cb-scaled-fp16-beside-walk-carry-pairs-initial-ragged": (
        CARRY_CASES["carry-cb-pairs-initial-ragged"][0],
        replace(CARRY_CASES["carry-cb-pairs-initial-ragged"][1], out_cb=3, state_cb=1),
    ),
    "cb-scaled-fp16-beside-walk-N128-Q256-z": (
        dict(seqlen=1800, nheads=16, ngroups=4, dstate=128, has_z=True),
        SSDConfig(state_block_n=128, state_segments=1, state_occupancy=1, out_cb=3, state_cb=1),
    ),
}  # fmt: skip


# The walk completing out (state_out): compute_out before it without the carried term, each walk
# step adding its C·hᵀ rows to out in place. Over the carry cases' pairs (ragged, groups, initial
# states); in fp16 with C·Bᵀ scaled, z (which the walk then applies) and D per head-dim; in fp32
# over chunks of 256 in 64-row steps, so each chunk's rows are completed in four pieces.
FINISH_CASES = {
    "out-by-walk-cb-pairs-initial-ragged": (
        CARRY_CASES["carry-cb-pairs-initial-ragged"][0],
        replace(CARRY_CASES["carry-cb-pairs-initial-ragged"][1], state_out=1),
    ),
    "out-by-walk-scaled-fp16-z-D-per-headdim": (
        dict(seqlen=700, chunk_size=128, nheads=16, ngroups=2, dstate=256, dtype="float16",
             D_has_hdim=True, has_z=True),
        SSDConfig(state_carry=1, state_out=1, state_block_n=256, state_segments=1,
                  state_occupancy=1, out_cb=3, out_heads=2, out_occupancy=3, out_rank1=1),
    ),
    "out-by-walk-fp32-z-steps64": (
        dict(seqlen=1000, headdim=32, dstate=16, dtype="float32", has_z=True),
        SSDConfig(state_carry=1, state_out=1, state_segments=1, state_block_q=64),
    ),
    # chunk_cb on the second stream beside chunk_cumsum (cumsum_cb), joined before compute_out,
    # at three CTAs per SM.
    "out-by-walk-cb-beside-cumsum-scaled-fp16-z": (
        dict(seqlen=700, chunk_size=128, nheads=16, ngroups=2, dstate=256, dtype="float16",
             has_z=True),
        SSDConfig(state_carry=1, state_out=1, cumsum_cb=1, cb_occupancy=3, state_block_n=256,
                  state_segments=1, state_occupancy=1, out_cb=3, out_heads=2, out_occupancy=3,
                  out_rank1=1),
    ),
}  # fmt: skip


PROBLEM_CONFIGS = {
    **CHUNK_KERNEL_CASES, **CARRY_CASES, **CB_CASES, **SCALED_CB_CASES, **FINISH_CASES,
}  # fmt: skip
BESIDE_CASES = [name for name, (_, config) in PROBLEM_CONFIGS.items() if config.state_cb]


@pytest.mark.parametrize("name", list(PROBLEM_CONFIGS))
def test_problems_under_configurations(name: str) -> None:
    fields, config = PROBLEM_CONFIGS[name]
    problem = replace(BASE, **fields)
    _check(name, problem, make_inputs(problem, seed=_seed(name), device="cuda"), config)


@pytest.mark.parametrize("name", BESIDE_CASES)
def test_problems_beside_the_walk_in_a_cuda_graph(name: str) -> None:
    """The state_cb cases as graph mode runs them: captured, so that chunk_cb's strided kernel
    computes C·Bᵀ beside the walk (checked in the launches recorded for this GPU's SMs), then
    replayed onto poisoned outputs and checked like any case."""
    from harness.inputs import meta_inputs
    from kernels.cutile.signatures import forward_launches

    fields, config = PROBLEM_CONFIGS[name]
    problem = replace(BASE, **fields)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    launched = [n for n, _, _ in forward_launches(meta_inputs(problem).kwargs(), config, sms)]
    assert "chunk_cb_strided_kernel" in launched, launched
    inputs = make_inputs(problem, seed=_seed(name + "-graph"), device="cuda")
    _check(name, problem, inputs, config, captured=True)


@pytest.mark.parametrize("cumsum_cb", [0, 1], ids=["cb-after-cumsum", "cb-beside-cumsum"])
@pytest.mark.parametrize("captured", [False, True], ids=["eager", "graph"])
def test_the_walk_completes_out_with_long_memory(captured: bool, cumsum_cb: int) -> None:
    """state_out where the carried term is a large part of out (A = −U(0.05, 1), as in
    test_long_memory_matches_reference), eager and replayed from a CUDA graph, with chunk_cb
    after chunk_cumsum or beside it on the second stream; with state_cb set, as the long
    128-head defaults have it, nothing runs beside the walk."""
    from harness.inputs import meta_inputs
    from kernels.cutile.signatures import forward_launches

    name = "out-by-walk-cb-pairs-initial-ragged"
    fields, config = FINISH_CASES[name]
    config = replace(config, state_cb=1, cumsum_cb=cumsum_cb)
    problem = replace(BASE, **fields)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    launched = [n for n, _, _ in forward_launches(meta_inputs(problem).kwargs(), config, sms)]
    assert launched[-1] == "fwd_pass_state_kernel", launched
    inputs = make_inputs(problem, seed=_seed(name + "-long-memory"), device="cuda")
    _check(f"{name}-long-memory", problem, _long_memory(inputs, name), config, captured=captured)


@pytest.mark.parametrize(
    ("dstate", "expected"),
    # 16 chunks × 64 heads: segments at dstate 64; enough output tiles for chunk_cb at 256.
    [(64, "segment_scan"), (256, "chunk_cb")],
)
def test_profiler_prefixes_name_every_launched_kernel(dstate: int, expected: str) -> None:
    """The harness's kernels mode sums only kernels matching the provider's prefixes."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from kernels.cutile import KERNEL_PREFIXES
    from kernels.cutile.ssd import ssd_forward

    problem = replace(BASE, seqlen=4096, nheads=64, dstate=dstate)
    kwargs = make_inputs(problem, seed=_seed("profiler"), device="cuda").kwargs()
    ssd_forward(**kwargs)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        ssd_forward(**kwargs)
        torch.cuda.synchronize()
    names = {e.name for e in prof.events() if e.device_type == DeviceType.CUDA}
    assert any(name.startswith(expected) for name in names), names
    assert all(name.startswith(KERNEL_PREFIXES) for name in names), names


def test_strided_slices_of_one_buffer() -> None:
    """x, B, C, dt as Mamba-2's fused path hands them: strided views into one projection buffer."""
    problem = replace(BASE, seqlen=777, nheads=8, ngroups=2, dstate=64)
    dense = make_inputs(problem, seed=_seed("strided"), device="cuda")
    b, seqlen, h, p = dense.x.shape
    g, n = dense.B.shape[2:]
    widths = [h * p, g * n, g * n, h]
    buffer = torch.empty(b, seqlen, sum(widths) + 8, device="cuda", dtype=dense.x.dtype)
    x_v, b_v, c_v, dt_v = torch.split(buffer[..., : sum(widths)], widths, dim=-1)
    x_v.copy_(dense.x.reshape(b, seqlen, h * p))
    b_v.copy_(dense.B.reshape(b, seqlen, g * n))
    c_v.copy_(dense.C.reshape(b, seqlen, g * n))
    dt_v.copy_(dense.dt)  # bf16 raw dt, as the fused path's in_proj produces it
    strided = replace(
        dense,
        x=x_v.view(b, seqlen, h, p),
        B=b_v.view(b, seqlen, g, n),
        C=c_v.view(b, seqlen, g, n),
        dt=dt_v,
    )
    assert not strided.x.is_contiguous() and not strided.B.is_contiguous()
    _check("strided", problem, strided)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(headdim=256), "headdim"),
        (dict(dstate=512), "dstate"),
        (dict(chunk_size=512), "chunk_size"),
    ],
)
def test_unsupported_problem_is_rejected_before_launch(change: dict, message: str) -> None:
    from kernels.cutile.ssd import ssd_forward

    problem = replace(BASE, seqlen=64, **change)
    inputs = make_inputs(problem, seed=1, device="cuda")
    with pytest.raises(ValueError, match=message):
        ssd_forward(**inputs.kwargs())


def test_wrong_shapes_are_rejected() -> None:
    from kernels.cutile.ssd import ssd_forward

    inputs = make_inputs(replace(BASE, seqlen=64), seed=2, device="cuda")
    with pytest.raises(ValueError, match="dt must have shape"):
        ssd_forward(**{**inputs.kwargs(), "dt": inputs.dt[:, :-1]})
    with pytest.raises(ValueError, match="nheads"):
        ssd_forward(
            **{
                **inputs.kwargs(),
                "B": inputs.B.repeat(1, 1, 3, 1),
                "C": inputs.C.repeat(1, 1, 3, 1),
            }
        )
    with pytest.raises(ValueError, match="CUDA"):
        ssd_forward(**{**inputs.kwargs(), "x": inputs.x.cpu()})


def test_tuner_picks_a_config_that_matches_the_reference(tmp_path) -> None:
    """`tune=force` compiles every candidate ahead, searches every knob on the GPU (small sizes keep
    it to ~25 candidates), caches its pick, and the pick computes the right answer."""
    from kernels.cutile.autotune import configure

    problem = replace(BASE, seqlen=1000, chunk_size=64, dstate=16, has_initial_states=True)
    inputs = make_inputs(problem, seed=_seed("tuner"), device="cuda")
    config, record = configure(inputs.kwargs(), "force", tmp_path / "tuning.json")
    assert record["source"] == "tuned" and record["config"] == config.to_dict()
    assert record["compute_out"]["failed"] < record["compute_out"]["candidates"]
    for kernel in ("fwd_pass_state", "compute_out"):  # compiled in parallel before timing
        assert record[kernel]["precompile"]["specialisations"] > 0
        assert 0 <= record[kernel]["spilling_skipped"] <= record[kernel]["precompile"]["spilling"]
    cached, again = configure(inputs.kwargs(), "cached", tmp_path / "tuning.json")
    assert cached == config and again["source"] == "cache"
    _check("tuned", problem, inputs, config)


def _replayed(forward, kwargs: dict):
    """`forward`'s output (a tensor or a tuple of them) captured into a CUDA graph (the captured
    path: state_cb's strided kernel beside the walk), poisoned, then replayed."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = forward(**kwargs)
    for tensor in captured if isinstance(captured, tuple) else (captured,):
        if tensor is not None:
            tensor.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    return captured


@pytest.mark.parametrize("out_cb", [1, 3])
def test_c_b_beside_the_walk_replays_in_a_cuda_graph(out_cb: int) -> None:
    """The forward with C·Bᵀ computed beside the walk, the second stream's fork and join
    included, captures into a CUDA graph whose replay gives the eager forward's output (which
    runs chunk_cb after the walk): fp32, and fp16 scaled alike per tile by both kernels. Both
    are also checked against float64, so a fault the two C·Bᵀ kernels share does not pass."""
    from kernels.cutile.ssd import ssd_forward
    from kernels.reference import ssd_forward as reference_forward

    problem = replace(
        BASE, seqlen=2048, nheads=16, dstate=128, chunk_size=128, return_final_states=False
    )
    config = SSDConfig(
        state_block_n=128, state_segments=1, state_occupancy=1, out_cb=out_cb, state_cb=1
    )
    kwargs = make_inputs(problem, seed=_seed("cb-graph"), device="cuda").kwargs()
    ssd_forward(**kwargs, config=config)  # once-only work outside the pool, as in _run
    with poisoned_allocations("cuda", working_set_bytes(problem)):
        eager = ssd_forward(**kwargs, config=config)
    err = relative_error(eager, reference_forward(**kwargs))
    print(f"[cutile-vs-float64] cb-graph out_cb={out_cb} out={err:.3e}")
    assert passes(err, problem.dtype), err
    assert torch.equal(_replayed(functools.partial(ssd_forward, config=config), kwargs), eager)


@pytest.mark.parametrize("captured", [False, True], ids=["eager", "graph"])
def test_scaled_c_b_past_fp16_range(captured: bool) -> None:
    """out_cb=3 where C·Bᵀ reaches about 1e5, past fp16's 65504 (B and C 64 times the usual
    size): each tile is scaled before its rounding, so out is finite and within tolerance, both
    from chunk_cb after the walk (eager) and from the strided kernel beside it (graph)."""
    from kernels.cutile.ssd import ssd_forward
    from kernels.reference import ssd_forward as reference_forward

    problem = replace(
        BASE, seqlen=1024, nheads=16, dstate=256, chunk_size=128, return_final_states=False
    )
    inputs = make_inputs(problem, seed=_seed("cb-scaled-range"), device="cuda")
    inputs.B.mul_(64)
    inputs.C.mul_(64)
    kwargs = inputs.kwargs()
    config = SSDConfig(
        state_carry=1, state_block_n=256, state_segments=1, state_occupancy=1, out_cb=3,
        out_heads=2, out_rank1=1, state_cb=1,
    )  # fmt: skip
    assert (inputs.C[0, :128, 0].float() @ inputs.B[0, :128, 0].float().T).abs().max() > 65504
    forward = functools.partial(ssd_forward, config=config)
    if captured:  # outputs filled with NaN before the replay
        out = _replayed(forward, kwargs)
    else:
        forward(**kwargs)  # once-only work outside the pool, as in _run
        with poisoned_allocations("cuda", working_set_bytes(problem)):
            out = forward(**kwargs)
    ref = reference_forward(**kwargs)
    err = relative_error(out, ref)
    print(f"[cutile-vs-float64] cb-scaled-range captured={captured} out={err:.3e}")
    assert torch.isfinite(out).all() and passes(err, problem.dtype), err
