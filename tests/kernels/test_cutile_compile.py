"""Ahead-of-time compile of every cuTile kernel for sm_90 and sm_100, on the CPU.

Each case is a problem and a launch configuration; what is compiled is every launch its forward
makes, with the facts a GPU launch derives from the tensors (kernels/cutile/signatures.py,
`forward_launches` on meta tensors). The cases cover what the default sweep launches (bf16, P=64,
N 64/128/256 at chunk 256 and 128, segmented walks or not, chunk_cb or the chunk kernel or
neither) plus the option branches (fp32/TF32, fp16, z, D per head-dim, initial and final
states, a ragged last chunk) and the launch configurations the GPU tests run, so a kernel that
stops compiling fails CI without a GPU.
"""

from __future__ import annotations

import io
from dataclasses import replace

import pytest

pytest.importorskip("cuda.tile")
from cuda.tile.compilation import export_kernel  # noqa: E402

from harness.inputs import meta_inputs  # noqa: E402
from harness.problem import Problem  # noqa: E402
from kernels.cutile.signatures import forward_launches  # noqa: E402
from scripts.variants import parse_shape, point_config  # noqa: E402

ARCHS = ("sm_90", "sm_100")
# The GPU tests' problem for launch configurations: ragged, grouped, from initial states.
SMALL = Problem(
    seqlen=1500, chunk_size=256, nheads=8, ngroups=2, dstate=128, has_initial_states=True
)
FP32_Z_RAGGED = replace(
    SMALL, seqlen=1000, headdim=32, dstate=16, dtype="float32", has_z=True, return_final_states=True
)
FP16_D_PER_HEADDIM = replace(
    SMALL, seqlen=1024, headdim=128, dtype="float16", has_z=True, D_has_hdim=True
)
CASES = {
    # The default sweep, default configs.
    "N64-segmented": (parse_shape("16384:64:64"), {}),
    "N64-chunk128-segmented": (parse_shape("1024:32:64:128"), {}),
    "N128-segmented": (parse_shape("65536:128:128"), {}),
    "N128-one-segment": (parse_shape("1024:128:128"), {}),
    "N256-chunk-cb": (parse_shape("16384:64:256"), {}),
    "N256-chunk128-few-heads": (parse_shape("2048:32:256:128"), {}),
    "N256-chunk128-chunk-kernel": (parse_shape("4096:32:256:128"), {}),
    "N256-chunk128-wide-walkers": (parse_shape("4096:128:256:128"), {}),
    # Beyond CHAIN_SEQLEN: the walks of changes 48 (weights computed) and 49 (latency hints).
    "N64-chunk128-weights-computed-long": (parse_shape("8192:64:64:128"), {}),
    "N128-chunk128-one-per-sm-long": (parse_shape("8192:128:128:128"), {}),
    "N256-chunk128-few-heads-long": (parse_shape("8192:32:256:128"), {}),
    "N256-chunk128-one-per-sm-long": (parse_shape("8192:64:256:128"), {}),
    "N256-chunk128-wide-walkers-long": (parse_shape("8192:128:256:128"), {}),
    # Up to CHAIN_SEQLEN: the latency hints of change 50.
    "N128-chunk128-one-per-sm-chained": (parse_shape("2048:128:128:128"), {}),
    "N256-one-per-sm-chained": (parse_shape("2048:64:256"), {}),
    # Option branches.
    "fp32-z-init-final-ragged": (FP32_Z_RAGGED, {}),
    "fp16-D-per-headdim-z": (FP16_D_PER_HEADDIM, {}),
    # Launch configurations the tuner may pick (and the GPU tests run).
    "cb-two-heads-segments": (SMALL, {"out_cb": 1, "out_heads": 2, "state_segments": 3}),
    "two-heads-folded-segments": (
        SMALL,
        {"out_heads": 2, "state_segments": 3, "out_fold_segments": 1},
    ),
    "cb-stored-in-input-dtype-rank1": (SMALL, {"out_cb": 2, "out_rank1": 1}),
    "rank1-cb-tall-rows-slices": (
        SMALL,
        {"out_rank1": 1, "out_cb": 1, "out_block_m": 128, "out_slice_n": 64},
    ),  # fmt: skip
    "weights-on-b-two-heads": (SMALL, {"state_weight_x": 0, "state_heads": 2}),
    "cb-two-heads-hinted-decays": (
        SMALL,
        {"out_cb": 1, "out_heads": 2, "out_hint_decays": 1, "out_occupancy": 4},
    ),  # fmt: skip
    "whole-chunk-steps-two-heads": (
        SMALL,
        {"state_heads": 2, "state_block_q": 256, "state_segments": 3},
    ),  # fmt: skip
    "N256-rank1-two-heads-segments": (
        replace(SMALL, dstate=256),
        {"out_rank1": 1, "out_heads": 2, "state_segments": 2},
    ),  # fmt: skip
    "chunk-kernel-segments": (
        replace(SMALL, chunk_size=128),
        {"out_chunk_heads": 4, "out_occupancy": 1, "state_segments": 3},
    ),
    "chunk-kernel-folded-fp32-z-ragged": (
        replace(FP32_Z_RAGGED, chunk_size=64),
        {"out_chunk_heads": 8, "state_segments": 3, "out_fold_segments": 1},
    ),
    "chunk-kernel-N256-fp16-D-per-headdim-hinted": (
        replace(FP16_D_PER_HEADDIM, chunk_size=128, dstate=256),
        {"out_chunk_heads": 16, "out_occupancy": 1, "out_hint_decays": 1},
    ),
    "plain-launches-latency-hints": (
        SMALL,
        {"dependent_launch": 0, "state_latency": 2, "out_latency": 8},
    ),
    # The walk's weights from chunk_cumsum.
    "walk-weights-N256-two-heads": (
        replace(SMALL, dstate=256),
        {"state_weights": 1, "state_heads": 2, "state_segments": 2},
    ),
    "walk-weights-on-b-fp32-z-ragged": (
        FP32_Z_RAGGED,
        {"state_weights": 1, "state_weight_x": 0, "state_segments": 3},
    ),
    # More than one batch entry: the branches of kernels/cutile/indices.py that divide.
    "two-batch-entries-cb-segments": (
        replace(SMALL, batch=2),
        {"out_cb": 1, "state_segments": 3},
    ),
    "two-batch-entries-chunk-kernel": (
        replace(SMALL, batch=2, chunk_size=128),
        {"out_chunk_heads": 4, "out_occupancy": 1, "state_segments": 2},
    ),
    # The walk's state stores without TMA.
    "walk-plain-state-stores-two-heads": (SMALL, {"state_store_tma": 0, "state_heads": 2}),
    "walk-plain-state-stores-fp32-z-ragged": (FP32_Z_RAGGED, {"state_store_tma": 0}),
    # The walk's C·hᵀ rows (state_carry; the default at 4096:128:256:128 above): read by the
    # chunk kernel, in fp32 over 64-row steps, and asked for with segments (states stored).
    "carry-chunk-kernel-fp16-D-per-headdim": (
        replace(FP16_D_PER_HEADDIM, chunk_size=128, dstate=256),
        {"state_carry": 1, "state_block_n": 256, "state_segments": 1, "out_chunk_heads": 16},
    ),
    "carry-fp32-z-ragged-steps64": (
        FP32_Z_RAGGED,
        {"state_carry": 1, "state_segments": 1, "state_block_q": 64},
    ),
    "carry-asked-with-segments": (
        replace(SMALL, dstate=256, chunk_size=128),
        {"state_carry": 1, "state_block_n": 256, "state_segments": 3},
    ),
    # The walk completing out (state_out): compute_out without the carried term before it, the
    # walk adding its rows, with z to apply, in fp16 pairs and in fp32 over 64-row steps.
    "out-by-walk-fp16-z-D-per-headdim-pairs": (
        replace(FP16_D_PER_HEADDIM, chunk_size=128, dstate=256),
        {"state_carry": 1, "state_out": 1, "state_block_n": 256, "state_segments": 1,
         "out_cb": 3, "out_heads": 2, "out_rank1": 1},
    ),
    "out-by-walk-fp32-z-ragged-steps64": (
        FP32_Z_RAGGED,
        {"state_carry": 1, "state_out": 1, "state_segments": 1, "state_block_q": 64},
    ),
    # chunk_cb beside chunk_cumsum (cumsum_cb), at three CTAs per SM.
    "out-by-walk-cb-beside-cumsum-three-per-sm": (
        replace(SMALL, dstate=256, chunk_size=128),
        {"state_carry": 1, "state_out": 1, "cumsum_cb": 1, "state_block_n": 256,
         "state_segments": 1, "out_cb": 3, "cb_occupancy": 3},
    ),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("case", list(CASES))
def test_every_launch_of_the_forward_compiles(case: str, arch: str) -> None:
    problem, overrides = CASES[case]
    launches = forward_launches(meta_inputs(problem).kwargs(), point_config(problem, overrides))
    names = {name for name, _, _ in launches}
    assert "chunk_cumsum_kernel" in names
    assert names & {"compute_out_kernel", "compute_out_chunk_kernel"}
    for name, kernel, signature in launches:
        cubin = io.BytesIO()
        export_kernel(kernel, [signature], cubin, gpu_code=arch, output_format="cubin")
        assert cubin.getvalue()[:4] == b"\x7fELF", f"{name}: export did not produce an ELF cubin"


def test_the_cases_cover_every_kernel() -> None:
    """Across the cases, each kernel of the forward is launched (and so compiled) at least once,
    segment_scan and both forms of chunk_cb included (the strided one beside the long walks of
    128 heads over chunks of 128)."""
    names = {
        name
        for problem, overrides in CASES.values()
        for name, _, _ in forward_launches(
            meta_inputs(problem).kwargs(), point_config(problem, overrides)
        )
    }
    assert names == {
        "chunk_cumsum_kernel", "fwd_pass_state_kernel", "segment_scan_kernel", "chunk_cb_kernel",
        "chunk_cb_strided_kernel", "compute_out_kernel", "compute_out_chunk_kernel",
    }  # fmt: skip
