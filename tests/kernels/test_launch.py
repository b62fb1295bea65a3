"""kernels/cutile/launch.py: which kernels of the forward launch as programmatic dependents, and
the recording of launches, on the CPU (meta tensors; nothing runs); and which forwards leave
segment_scan out (fwd_pass_state's DIRECT stores), what the walk hands compute_out when it
writes C·hᵀ (state_carry) or completes out (state_out), and C·Bᵀ computed on a second stream
beside the walk (state_cb) or beside chunk_cumsum (cumsum_cb)."""

from __future__ import annotations

import inspect
from dataclasses import replace

import pytest
import torch

pytest.importorskip("cuda.tile")
from harness.inputs import meta_inputs  # noqa: E402
from harness.problem import Problem  # noqa: E402
from kernels.cutile import launch  # noqa: E402
from kernels.cutile.config import SSDConfig, with_occupancy  # noqa: E402
from kernels.cutile.ssd import launch_forward  # noqa: E402


def _recording(
    config: SSDConfig, sms: int = 132, final_states: bool = True, captured: bool = True
) -> launch.Recording:
    """The recording of one forward: 64 heads, dstate 64, 8 chunks of 128; captured into a CUDA
    graph unless `captured` is off."""
    kw = meta_inputs(Problem(seqlen=1024, nheads=64, dstate=64, chunk_size=128)).kwargs()
    with launch.recorded(sms, captured) as recording:
        launch_forward(
            kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"], kw["chunk_size"], kw["D"], kw["z"],
            kw["dt_bias"], kw["initial_states"], kw["dt_softplus"], kw["dt_limit"], config,
            final_states,
        )  # fmt: skip
    return recording


def _recorded(
    config: SSDConfig, sms: int = 132, final_states: bool = True, captured: bool = True
) -> list[tuple]:
    """The recorded launches of one forward (`_recording`), in order."""
    return _recording(config, sms, final_states, captured).launches


def _named(recorded: tuple) -> dict:
    """A recorded launch's arguments by the kernel's parameter names."""
    kernel, args = recorded[1], recorded[2]
    return dict(zip(inspect.signature(kernel._pyfunc).parameters, args, strict=True))


def _launches(config: SSDConfig, sms: int = 132) -> list[tuple[str, bool]]:
    """(kernel function name, launched as a programmatic dependent) of one forward, in order."""
    return [
        (kernel._pyfunc.__name__, dependent) for _, kernel, _, dependent in _recorded(config, sms)
    ]


def test_the_walk_its_scan_chunk_cb_and_compute_out_follow_as_dependents() -> None:
    assert _launches(SSDConfig(state_segments=2, out_cb=1)) == [
        ("chunk_cumsum_kernel", False),
        ("fwd_pass_state_kernel", True),
        ("segment_scan_kernel", True),
        ("chunk_cb_kernel", True),
        ("compute_out_kernel", True),
    ]


def test_the_chunk_kernel_launches_plainly_in_a_chain() -> None:
    launches = _launches(SSDConfig(state_segments=1, out_chunk_heads=4, out_occupancy=1))
    assert launches[1:] == [("fwd_pass_state_kernel", True), ("compute_out_chunk_kernel", False)]


def test_dependent_launch_off_launches_everything_plainly() -> None:
    launches = _launches(SSDConfig(state_segments=2, out_cb=1, dependent_launch=0))
    assert [name for name, _ in launches][1:3] == ["fwd_pass_state_kernel", "segment_scan_kernel"]
    assert not any(dependent for _, dependent in launches)


def test_the_recorded_sm_count_decides_the_automatic_segments() -> None:
    """64 walkers, 8 chunks: 132 SMs allow 2 segments (one walker per SM), a single SM one."""
    assert [n for n, _ in _launches(SSDConfig(), sms=132)].count("segment_scan_kernel") == 1
    assert [n for n, _ in _launches(SSDConfig(), sms=1)].count("segment_scan_kernel") == 0
    assert launch._recording is None  # recording ends with its block


@pytest.mark.parametrize(
    "config",
    [SSDConfig(state_occupancy=1, out_occupancy=2), SSDConfig(out_chunk_heads=4, out_occupancy=1),
     SSDConfig(out_cb=1, cb_occupancy=3)],
    ids=["hinted", "chunk-kernel", "hinted-chunk-cb"],
)  # fmt: skip
def test_every_forward_launches_the_same_kernel_objects(config: SSDConfig) -> None:
    """A hinted kernel made anew per call drops the last one's compiled library, and unloading it
    during CUDA-graph capture aborts the process (run 163). So hinted kernels are made once."""
    first, second = _recorded(config), _recorded(config)
    assert all(a[1] is b[1] for a, b in zip(first, second, strict=True))


@pytest.mark.parametrize("aside", [0, 1], ids=["after-the-walk", "beside-chunk-cumsum"])
def test_chunk_cb_is_launched_with_its_occupancy_hint(aside: int) -> None:
    """cb_occupancy hints chunk_cb wherever it is launched; 0 leaves the compiler's choice."""
    from kernels.cutile.chunk_cb import chunk_cb_kernel

    config = SSDConfig(
        state_carry=aside, state_out=aside, cumsum_cb=aside, state_block_n=64, state_segments=1,
        out_cb=1, cb_occupancy=3,
    )  # fmt: skip
    kernels = {k._pyfunc.__name__: k for _, k, _, _ in _recorded(config)}
    assert kernels["chunk_cb_kernel"] is not chunk_cb_kernel
    assert kernels["chunk_cb_kernel"] is with_occupancy(chunk_cb_kernel, 3)
    plain = {k._pyfunc.__name__: k for _, k, _, _ in _recorded(replace(config, cb_occupancy=0))}
    assert plain["chunk_cb_kernel"] is chunk_cb_kernel


def test_two_segments_without_final_states_skip_segment_scan() -> None:
    """The walk's segment 0 stores the segment starts (DIRECT) in the states' dtype, and
    compute_out reads them as segment_scan's."""
    launches = _recorded(SSDConfig(state_segments=2), final_states=False)
    names = [kernel._pyfunc.__name__ for _, kernel, _, _ in launches]
    assert names == ["chunk_cumsum_kernel", "fwd_pass_state_kernel", "compute_out_kernel"]
    walk, out = _named(launches[1]), _named(launches[2])
    assert walk["DIRECT"] is True
    assert out["seg_start"] is walk["seg_end"]  # in the states' dtype
    assert walk["seg_end"].dtype == walk["states"].dtype


@pytest.mark.parametrize(
    ("segments", "final_states"), [(2, True), (3, False)], ids=["final-states", "three-segments"]
)
def test_segment_scan_runs_otherwise(segments: int, final_states: bool) -> None:
    launches = _recorded(SSDConfig(state_segments=segments), final_states=final_states)
    assert [k._pyfunc.__name__ for _, k, _, _ in launches].count("segment_scan_kernel") == 1
    assert _named(launches[1])["DIRECT"] is False


@pytest.mark.parametrize("out", [{"out_cb": 1}, {"out_chunk_heads": 8, "out_occupancy": 1}])
def test_whole_state_walkers_hand_compute_out_their_c_h_rows(out: dict) -> None:
    """With one walker per head over the whole state and one segment, the walk is given C and
    stores (b, l, h, p) rows, which both compute_out kernels read in place of the states."""
    launches = _recorded(SSDConfig(state_carry=1, state_block_n=64, state_segments=1, **out))
    walk, compute_out = _named(launches[1]), _named(launches[-1])
    assert walk["CARRY"] is True and walk["C"].shape == walk["B"].shape  # C among its arguments
    assert walk["states"].shape == walk["x"].shape  # rows shaped like x
    assert walk["FINISH"] is False
    assert compute_out["states"] is walk["states"] and compute_out["CARRY"] is True


@pytest.mark.parametrize(
    "config",
    [SSDConfig(state_carry=1, state_block_n=64, state_segments=2),
     SSDConfig(state_carry=1, state_block_n=32, state_segments=1)],
    ids=["segments", "walkers-of-part-of-the-state"],
)  # fmt: skip
def test_c_h_rows_only_from_one_segment_of_whole_state_walkers(config: SSDConfig) -> None:
    walk = _named(_recorded(config)[1])
    assert walk["CARRY"] is False and walk["states"].dim() == 5  # the states, (b, nchunks, h, p, n)


def test_c_b_beside_the_walk_launches_after_it_and_compute_out_reads_it() -> None:
    """64 heads, one walker each, leave 68 of 132 SMs free: chunk_cb's strided kernel is launched
    right after the walk (on a GPU on a second stream forked before chunk_cumsum, so that its host
    work overlaps the walk, run 220) with 68 CTAs, chunk_cb is not launched, and compute_out reads
    the strided kernel's output."""
    config = SSDConfig(state_cb=1, state_block_n=64, state_segments=1, state_occupancy=1, out_cb=1)
    recording = _recording(config)
    launches = recording.launches
    names = [kernel._pyfunc.__name__ for _, kernel, _, _ in launches]
    assert names == [
        "chunk_cumsum_kernel", "fwd_pass_state_kernel", "chunk_cb_strided_kernel",
        "compute_out_kernel",
    ]  # fmt: skip
    assert recording.aside == [2] and recording.joins == [3]  # joined before compute_out
    grid, _, args, dependent = launches[2]
    assert grid == (68, 1, 1) and not dependent
    assert launches[-1][2][3] is args[2]  # compute_out's cb argument
    assert args[2].shape == (1, 8, 1, 128, 128) and args[2].dtype == torch.float32


@pytest.mark.parametrize("beside", [0, 1], ids=["after-the-walk", "beside-the-walk"])
def test_c_b_in_scaled_fp16_comes_with_one_inverse_scale_per_compute_out_tile(beside: int) -> None:
    """out_cb=3: chunk_cb (or its strided kernel beside the walk) stores C·Bᵀ in fp16 and a
    float32 inverse scale per (64, 64) tile of compute_out, which reads both, scaled."""
    config = SSDConfig(
        state_cb=beside, state_block_n=64, state_segments=1, state_occupancy=1, out_cb=3
    )
    launches = _recorded(config)
    kernel_cb, args_cb = launches[2][1]._pyfunc.__name__, launches[2][2]
    assert kernel_cb == ("chunk_cb_strided_kernel" if beside else "chunk_cb_kernel")
    values, inv_scale = args_cb[2], args_cb[3]
    assert values.shape == (1, 8, 1, 128, 128) and values.dtype == torch.float16
    assert inv_scale.shape == (1, 8, 1, 2, 2) and inv_scale.dtype == torch.float32
    assert args_cb[-1] is True  # SCALED
    out = _named(launches[-1])
    assert out["cb_chunks"] is values and out["cb_scale"] is inv_scale
    assert out["CB_PRE"] is True and out["CB_SCALED"] is True


def test_scaled_c_b_beside_the_walk_needs_compute_out_rows_of_its_blocks() -> None:
    """The strided kernel scales (64, 64) tiles; compute_out's 128-row tiles would read other
    scales, so chunk_cb runs after the walk there."""
    config = SSDConfig(
        state_cb=1, state_block_n=64, state_segments=1, state_occupancy=1, out_cb=3,
        out_block_m=128,
    )  # fmt: skip
    names = [kernel._pyfunc.__name__ for _, kernel, _, _ in _recorded(config)]
    assert "chunk_cb_kernel" in names and "chunk_cb_strided_kernel" not in names


@pytest.mark.parametrize(
    ("sms", "captured"), [(64, True), (132, False)], ids=["no-free-sms", "eager"]
)
def test_without_free_sms_or_a_graph_chunk_cb_runs_after_the_walk(sms: int, captured: bool) -> None:
    """Also in an eager forward: there the strided kernel would start only once the host had
    launched the walk, and hold compute_out back (runs 220-221)."""
    config = SSDConfig(state_cb=1, state_block_n=64, state_segments=1, state_occupancy=1, out_cb=1)
    recording = _recording(config, sms=sms, captured=captured)
    names = [kernel._pyfunc.__name__ for _, kernel, _, _ in recording.launches]
    assert "chunk_cb_strided_kernel" not in names and names[2:] == [
        "chunk_cb_kernel",
        "compute_out_kernel",
    ]
    assert recording.aside == [] and recording.joins == []


def test_the_walk_completes_out_where_compute_out_runs_before_it() -> None:
    """state_out over whole-state walkers: chunk_cb and compute_out (without the carried term,
    and ungated) run before the walk, which is handed compute_out's out as its rows and z to
    gate them; nothing is computed beside the walk, which leaves no kernel after it."""
    config = SSDConfig(
        state_carry=1, state_out=1, state_cb=1, state_block_n=64, state_segments=1,
        state_occupancy=1, out_cb=1,
    )  # fmt: skip
    kw = meta_inputs(Problem(seqlen=1024, nheads=64, dstate=64, chunk_size=128, has_z=True))
    kw = kw.kwargs()
    with launch.recorded(132, True) as recording:
        out, _ = launch_forward(
            kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"], kw["chunk_size"], kw["D"], kw["z"],
            kw["dt_bias"], kw["initial_states"], kw["dt_softplus"], kw["dt_limit"], config,
        )  # fmt: skip
    launches = recording.launches
    names = [kernel._pyfunc.__name__ for _, kernel, _, _ in launches]
    assert names == [
        "chunk_cumsum_kernel", "chunk_cb_kernel", "compute_out_kernel", "fwd_pass_state_kernel",
    ]  # fmt: skip
    compute_out, walk = _named(launches[2]), _named(launches[3])
    assert compute_out["PARTIAL"] is True and compute_out["HAS_Z"] is False
    assert compute_out["CARRY"] is False and compute_out["SEGMENTED"] is False
    assert walk["FINISH"] is True and walk["CARRY"] is True
    assert walk["states"] is walk["partial"] is compute_out["out"] is out
    assert walk["HAS_Z"] is True and walk["z"] is kw["z"]
    assert launches[3][3] is True  # the walk waits for compute_out (programmatic dependent)


@pytest.mark.parametrize("captured", [True, False], ids=["graph", "eager"])
def test_c_b_beside_chunk_cumsum_where_compute_out_runs_before_the_walk(captured: bool) -> None:
    """cumsum_cb with state_out: chunk_cb, which reads only B and C, is launched on the second
    stream right after chunk_cumsum and joined before compute_out, which reads its output; in
    eager forwards too (nothing launched after it waits for the host)."""
    config = SSDConfig(
        state_carry=1, state_out=1, cumsum_cb=1, state_block_n=64, state_segments=1,
        state_occupancy=1, out_cb=3,
    )  # fmt: skip
    recording = _recording(config, captured=captured)
    launches = recording.launches
    names = [kernel._pyfunc.__name__ for _, kernel, _, _ in launches]
    assert names == [
        "chunk_cumsum_kernel", "chunk_cb_kernel", "compute_out_kernel", "fwd_pass_state_kernel",
    ]  # fmt: skip
    assert recording.aside == [1] and recording.joins == [2]
    cb, compute_out = _named(launches[1]), _named(launches[2])
    assert launches[1][3] is False and cb["CHAINED"] is False  # nothing before it on its stream
    assert compute_out["cb_chunks"] is cb["cb"] and compute_out["cb_scale"] is cb["cb_scale"]
    assert compute_out["PARTIAL"] is True and _named(launches[3])["FINISH"] is True


@pytest.mark.parametrize(
    "config",
    [SSDConfig(state_carry=1, cumsum_cb=1, state_block_n=64, state_segments=1, out_cb=1),
     SSDConfig(state_carry=1, state_out=1, cumsum_cb=1, state_block_n=64, state_segments=1)],
    ids=["compute-out-after-the-walk", "c-b-inside-compute-out"],
)  # fmt: skip
def test_cumsum_cb_changes_nothing_without_chunk_cb_before_the_walk(config: SSDConfig) -> None:
    """Without state_out chunk_cb would take SMs from the walk's one wave, and with out_cb=0
    there is no chunk_cb: the same launches as without cumsum_cb, none on the second stream."""
    recording = _recording(config)
    assert recording.aside == [] and recording.joins == []
    plain = _recorded(replace(config, cumsum_cb=0))
    assert [launch[1] for launch in recording.launches] == [launch[1] for launch in plain]


def test_a_launch_on_the_second_stream_is_never_a_dependent() -> None:
    with launch.recorded(132), pytest.raises(ValueError, match="second stream"):
        launch.launch((1, 1, 1), object(), (), dependent=True, aside=True)


@pytest.mark.parametrize(
    "config",
    [SSDConfig(state_carry=1, state_out=1, state_block_n=64, state_segments=2, out_cb=1),
     SSDConfig(state_out=1, state_block_n=64, state_segments=1, out_cb=1),
     SSDConfig(state_carry=1, state_out=1, state_block_n=64, state_segments=1,
               out_chunk_heads=8, out_occupancy=1)],
    ids=["segments", "no-rows", "chunk-kernel"],
)  # fmt: skip
def test_out_is_compute_outs_alone_where_the_walk_cannot_complete_it(config: SSDConfig) -> None:
    """Without the walk's rows, or with the chunk kernel (which cannot leave them out),
    state_out changes nothing: compute_out runs last, with the carried term."""
    launches = _recorded(config)
    assert launches[1][1]._pyfunc.__name__ == "fwd_pass_state_kernel"
    assert _named(launches[1])["FINISH"] is False
    assert _named(launches[-1]).get("PARTIAL", False) is False
    plain = _recorded(replace(config, state_out=0))
    assert [launch[1] for launch in launches] == [launch[1] for launch in plain]


def test_an_out_to_complete_is_refused_where_the_walk_has_no_rows() -> None:
    from kernels.cutile.fwd_pass_state import fwd_pass_state_launch, walk_layout

    kw = meta_inputs(Problem(seqlen=1024, nheads=64, dstate=64, chunk_size=128)).kwargs()
    dA = torch.empty(1, 64, 8, 128, device="meta")
    config = SSDConfig(state_out=1, state_block_n=64, state_segments=1)
    with launch.recorded(132, True), pytest.raises(ValueError, match="finishes_out"):
        walk = walk_layout(config, kw["x"].shape, kw["B"].shape, 128, kw["x"].device)
        fwd_pass_state_launch(
            kw["x"], kw["B"], kw["C"], dA, dA, None, None, config, walk,
            out=torch.empty_like(kw["x"]),
        )  # fmt: skip


@pytest.mark.parametrize(
    ("config", "gated"),
    [(SSDConfig(out_cb=1), True), (SSDConfig(out_chunk_heads=8, out_occupancy=1), False)],
    ids=["gated", "chunk-kernel"],
)
def test_out_without_the_carried_term_is_the_ungated_row_block_kernels(
    config: SSDConfig, gated: bool
) -> None:
    """Only the walk that completes out applies the gate, and the chunk kernel always adds the
    carried term."""
    from kernels.cutile.compute_out import compute_out_launch

    kw = meta_inputs(Problem(seqlen=1024, nheads=64, dstate=64, chunk_size=128, has_z=gated))
    kw = kw.kwargs()
    dA = torch.empty(1, 64, 8, 128, device="meta")
    with launch.recorded(132, True), pytest.raises(ValueError, match="row-block kernel's"):
        compute_out_launch(
            kw["x"], kw["B"], kw["C"], None, dA, dA, kw["D"], kw["z"], torch.empty_like(kw["x"]),
            config,
        )  # fmt: skip
