"""kernels.cutile.autotune without a GPU: search spaces, the JSON cache, the policies."""

from __future__ import annotations

import itertools
import json
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kernels.cutile import autotune, precompile
from kernels.cutile import config as config_module
from kernels.cutile.config import DEFAULT_CONFIG, ProblemSize, SSDConfig, default_config
from kernels.cutile.fwd_pass_state import _segments
from kernels.cutile.launch import recorded


def test_candidates_respect_problem_sizes() -> None:
    for candidate in autotune.state_candidates(dstate=16, chunk_size=64):
        assert candidate["state_block_n"] == 16 and candidate["state_block_q"] == 64
    out = autotune.out_candidates(dstate=256, chunk_size=256)
    assert {c["out_heads"] for c in out} == {1, 2}
    assert all(SSDConfig.from_dict({**DEFAULT_CONFIG.to_dict(), **c}) for c in out)


@pytest.mark.parametrize("dstate", [64, 128, 256])
@pytest.mark.parametrize("seqlen", [1024, 16384, 65536])
@pytest.mark.parametrize("chunk_size", [128, 256])
def test_the_default_compute_out_is_among_the_candidates(dstate, seqlen, chunk_size) -> None:
    """So tuning can only pick something measured no slower than the default."""
    config = default_config(dstate, ProblemSize(1, seqlen, 32, chunk_size)).to_dict()
    config["out_slice_n"] = min(config["out_slice_n"], dstate)  # as the launch clamps it
    config["out_block_m"] = min(config["out_block_m"], chunk_size)
    candidates = autotune.out_candidates(dstate, chunk_size)
    assert {k: config[k] for k in candidates[0]} in candidates


def test_cache_round_trip_and_atomic_file(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "tuning.json"
    config = SSDConfig(out_occupancy=3, out_heads=2)
    autotune.TuningCache(path).put("k", config, {"tune_s": 1.0})
    assert autotune.TuningCache(path).get("k") == config
    assert autotune.TuningCache(path).get("other") is None
    names = sorted(p.name for p in path.parent.iterdir())
    assert names == ["tuning.json", "tuning.json.lock"]  # no temp files left
    assert json.loads(path.read_text())["format"] == autotune.CACHE_FORMAT


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "",
        json.dumps({"format": "someone-else/3", "entries": {}}),
        json.dumps({"format": autotune.CACHE_FORMAT, "entries": [1]}),
        json.dumps([1, 2]),
        "[" * 100_000 + "]" * 100_000,
    ],
)
def test_corrupt_or_foreign_cache_is_reported_and_rebuilt(tmp_path: Path, content: str) -> None:
    path = tmp_path / "tuning.json"
    path.write_text(content)
    with pytest.warns(UserWarning, match="it will be rebuilt"):
        cache = autotune.TuningCache(path)
    assert cache.get("k") is None
    cache.put("k", DEFAULT_CONFIG, {})
    assert autotune.TuningCache(path).get("k") == DEFAULT_CONFIG


@pytest.mark.parametrize(
    "entry",
    [
        {"config": {"bad": 1}},
        {"config": {"out_occupancy": "2"}},
        {"config": {"out_cb": 9}},
        {"config": [1]},
        {"config": []},
        {"config": ""},
        {"config": [["out_occupancy", 3]]},
        {"no config": {}},
        None,
        "text",
    ],
)
def test_an_entry_that_is_not_a_config_is_reported_never_used_and_kept(
    tmp_path: Path, entry
) -> None:
    """Another checkout's entries (an SSDConfig with other fields) share the default file: they
    are not trusted here, and this checkout's writes do not delete them."""
    path = tmp_path / "tuning.json"
    good = {"config": SSDConfig(out_occupancy=3).to_dict()}
    entries = {"other": entry, "good": good}
    path.write_text(json.dumps({"format": autotune.CACHE_FORMAT, "entries": entries}))
    cache = autotune.TuningCache(path)
    with pytest.warns(UserWarning, match="ignoring entry 'other'.*tuned again"):
        assert cache.get("other") is None
    assert cache.get("good") == SSDConfig(out_occupancy=3)
    cache.put("new", DEFAULT_CONFIG, {})
    assert json.loads(path.read_text())["entries"]["other"] == entry


def test_a_cache_path_that_is_not_a_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a file; point SSDBENCH_TUNING_CACHE"):
        autotune.TuningCache(tmp_path)


def test_writers_that_loaded_the_cache_early_keep_each_others_entries(tmp_path: Path) -> None:
    """Two processes (one per GPU) load the cache, tune for a while, then write."""
    path = tmp_path / "tuning.json"
    first, second = autotune.TuningCache(path), autotune.TuningCache(path)
    first.put("shape-a", SSDConfig(out_occupancy=3), {})
    second.put("shape-b", SSDConfig(out_occupancy=1), {})
    merged = autotune.TuningCache(path)
    assert merged.get("shape-a") == SSDConfig(out_occupancy=3)
    assert merged.get("shape-b") == SSDConfig(out_occupancy=1)


@pytest.mark.parametrize(
    "bad",
    [
        {"out_heads": 0},
        {"out_heads": 3},
        {"out_block_m": 48},
        {"state_occupancy": 33},
        {"cb_occupancy": 33},
        {"dependent_launch": 2},
        {"cumsum_cb": 2},
        {"state_latency": 0},
        {"out_latency": 11},
        {"out_cb": 4},
    ],
)
def test_unusable_configs_are_rejected(bad: dict) -> None:
    with pytest.raises(ValueError, match="SSDConfig"):
        SSDConfig(**bad)


def _key(monkeypatch, gpu: str = "sm_90 NVIDIA H200 132 SMs", **kwargs) -> str:
    monkeypatch.setattr(autotune, "device_label", lambda device: gpu)
    monkeypatch.setattr(autotune, "tileiras_version", lambda: "release 13.4")
    problem = {"x": torch.empty(1, 4096, 8, 64), "B": torch.empty(1, 4096, 1, 128)}
    return autotune.tuning_key({**problem, "chunk_size": 256, **kwargs})


def test_the_key_separates_whatever_changes_the_kernels_or_the_gpu(monkeypatch) -> None:
    """Each of these builds other kernels (or runs on another GPU), so shares no pick; dt_limit
    is a run-time argument of the same kernels."""
    variants = [
        {},
        {"chunk_size": 128},
        {"dt_softplus": True},
        {"dt_bias": torch.empty(8)},
        {"D": torch.empty(8)},
        {"D": torch.empty(8, 64)},
        {"z": torch.empty(1, 4096, 8, 64)},
        {"initial_states": torch.empty(1, 8, 64, 128)},
        {"return_final_states": True},
        {"x": torch.empty(1, 4096, 8, 64, dtype=torch.bfloat16)},
        {"gpu": "sm_90 NVIDIA H100 PCIe 114 SMs"},
        {"gpu": "sm_90 NVIDIA H100 80GB HBM3 132 SMs"},
    ]
    keys = [_key(monkeypatch, **v) for v in variants]
    assert len(set(keys)) == len(variants)
    assert _key(monkeypatch, dt_limit=(0.001, 0.1)) == keys[0]


def test_no_key_without_the_tileiras_version(monkeypatch) -> None:
    _key(monkeypatch)
    monkeypatch.setattr(autotune, "tileiras_version", lambda: None)
    problem = {"x": torch.empty(1, 64, 8, 64), "B": torch.empty(1, 64, 1, 128), "chunk_size": 64}
    with pytest.raises(RuntimeError, match="tileiras --version.*tune=off"):
        autotune.tuning_key(problem)


def test_kernel_source_hash_follows_every_kernel_source(
    tmp_path: Path, monkeypatch, request
) -> None:
    """A byte changed in any of the package's files is another hash, hence another tuning key:
    a pick tuned for other kernel code is not reused (the hash is cached per process)."""
    request.addfinalizer(autotune.kernel_source_hash.cache_clear)  # the real sources' again
    package = Path(autotune.__file__).parent
    sources = sorted(package.glob("*.py"))
    assert {"compute_out.py", "fwd_pass_state.py", "chunk_cumsum.py"} <= {p.name for p in sources}
    for path in sources:
        shutil.copy(path, tmp_path / path.name)
    monkeypatch.setattr(autotune, "__file__", str(tmp_path / "autotune.py"))
    autotune.kernel_source_hash.cache_clear()
    same = autotune.kernel_source_hash()
    assert len(same) == 12 and same == autotune.kernel_source_hash()
    key = _key(monkeypatch)
    assert f"kernels {same}" in key
    edited = tmp_path / "compute_out.py"
    edited.write_text(edited.read_text() + "\n")
    autotune.kernel_source_hash.cache_clear()
    assert autotune.kernel_source_hash() != same and _key(monkeypatch) != key


def test_policy_off_needs_no_gpu_and_records_the_defaults() -> None:
    x, B = torch.empty(1, 4096, 64, 64), torch.empty(1, 4096, 1, 256)
    config, record = autotune.configure({"x": x, "B": B, "chunk_size": 256}, "off")
    assert config == default_config(256, ProblemSize(1, 4096, 64, 256)) and config.out_cb == 1
    assert record == {"tune": "off", "source": "default", "config": config.to_dict()}


@pytest.mark.parametrize(
    ("seqlen", "nheads", "out_cb"), [(1024, 32, 0), (4096, 32, 0), (4096, 64, 1), (65536, 32, 1)]
)
def test_chunk_cb_only_for_problems_with_enough_output_tiles(seqlen, nheads, out_cb) -> None:
    """At dstate 256, C·Bᵀ goes through chunk_cb from 1024 (chunk, head) tiles on; smaller
    problems compute it inside compute_out. Smaller dstates never use chunk_cb by default."""
    size = ProblemSize(1, seqlen, nheads, 256)
    assert default_config(256, size).out_cb == out_cb
    assert default_config(256).out_cb == 1  # size unknown: a large problem
    assert default_config(128, size).out_cb == default_config(64, size).out_cb == 0


@pytest.mark.parametrize(("dstate", "seqlen"), [(64, 1024), (128, 1024), (256, 1024), (256, 8192)])
def test_rank1_decay_everywhere(dstate, seqlen) -> None:
    """The row-times-column decay is on in the row-block kernel's defaults and the tuner's
    candidates, also where two heads compute C·Bᵀ inside at dstate 256 (1K/32/256), where it
    built 223 registers until compute_out peeled its diagonal tile (change 54)."""
    config = default_config(dstate, ProblemSize(1, seqlen, 32, 256))
    assert config.out_chunk_heads == 0 and config.out_rank1 == 1
    assert all(c["out_rank1"] == 1 for c in autotune.out_candidates(dstate, 256))


@pytest.mark.parametrize(
    ("batch", "seqlen", "nheads", "chained"),
    # chained: dependent_launch at dstate 64, 128 and 256
    [(1, 1024, 32, (1, 1, 1)), (1, 2048, 32, (1, 1, 1)), (1, 1024, 64, (1, 1, 1)),
     (2, 1024, 32, (1, 1, 1)), (1, 4096, 16, (1, 1, 1)), (1, 2048, 64, (1, 1, 1)),
     (2, 2048, 32, (1, 1, 1)), (1, 1024, 128, (1, 1, 1)), (1, 2048, 128, (1, 1, 1)),
     (1, 4096, 64, (1, 1, 1)), (1, 4096, 32, (1, 1, 0)), (2, 4096, 32, (1, 1, 1)),
     (1, 16384, 32, (0, 0, 0)), (1, 4096, 128, (0, 0, 0)), (1, 65536, 128, (0, 0, 0))],
)  # fmt: skip
def test_launches_chained_where_launch_gaps_show(batch, seqlen, nheads, chained):
    """PDL where launch gaps are a visible share: up to SHORT_POSITIONS positions × heads, and
    sequences up to CHAIN_SEQLEN of up to CHAIN_POSITIONS except with dstate 256's 64-column
    walkers (4K/32/256), whatever the chunk length; a problem of unknown size is a large one.
    (Change 60 chains some dstate-64 walks up to twice CHAIN_SEQLEN too; tested below.)"""
    for dstate, expected in zip((64, 128, 256), chained, strict=True):
        for chunk_size in (64, 256):
            size = ProblemSize(batch, seqlen, nheads, chunk_size)
            assert default_config(dstate, size).dependent_launch == expected
        assert default_config(dstate).dependent_launch == 0


@pytest.mark.parametrize(
    ("size", "weights"),
    [(ProblemSize(1, 1024, 32, 128), (1, 1, 1)), (ProblemSize(1, 65536, 128, 256), (1, 1, 1)),
     (ProblemSize(1, 65536, 64, 128), (0, 1, 1)), (ProblemSize(1, 8192, 32, 256), (0, 1, 1)),
     (ProblemSize(1, 4096, 32, 128), (1, 1, 1)), (ProblemSize(1, 2048, 64, 256), (1, 1, 1)),
     (None, (0, 1, 1))],
)  # fmt: skip
def test_the_walk_reads_its_weights_from_chunk_cumsum(size, weights) -> None:
    """Default walks take chunk_cumsum's exp(dA_last − dA)·dt (change 44), except the segmented
    walks at dstate 64 beyond CHAIN_SEQLEN, which compute them (changes 46 and 48). weights:
    state_weights at dstate 64, 128, 256. The plain config computes them, which the GPU cases
    check beside the weights read."""
    got = tuple(default_config(dstate, size).state_weights for dstate in (64, 128, 256))
    assert got == weights
    assert DEFAULT_CONFIG.state_weights == 0


@pytest.mark.parametrize(
    ("batch", "seqlen", "nheads", "walk"),
    [(1, 1024, 32, (128, 1)), (1, 2048, 16, (128, 1)), (1, 1024, 64, (128, 1)),
     (1, 65536, 64, (128, 1)), (1, 65536, 66, (128, 1)), (1, 4096, 32, (64, 2)),
     (1, 65536, 63, (64, 2)), (1, 1024, 67, (128, 2)), (1, 65536, 128, (128, 2)),
     (2, 1024, 64, (128, 2))],
)  # fmt: skip
def test_walker_width_at_dstate_256_by_walkers_and_waves(batch, seqlen, nheads, walk) -> None:
    """batch × heads × 2 walkers of 128 state columns run one per SM where they fit in one wave
    (up to WAVE_WALKERS // 2) and either fill the GPU (FULL_WALKERS) or the problem is short;
    more than WAVE_WALKERS walkers of 64 columns take 128 at two per SM, one wave instead of two;
    the rest, and a problem of unknown size, 64. walk: (state columns, walk occupancy)."""
    config = default_config(256, ProblemSize(batch, seqlen, nheads, 256))
    assert (config.state_block_n, config.state_occupancy) == walk
    assert (default_config(256).state_block_n, default_config(256).state_occupancy) == (64, 2)


@pytest.mark.parametrize(
    ("batch", "seqlen", "nheads", "chunk", "walk"),
    [(1, 1024, 32, 128, (64, 128, 1, 6, 1)), (1, 4096, 32, 128, (64, 128, 1, 6, 0)),
     (1, 65536, 32, 128, (64, 128, 1, 6, 0)), (1, 65536, 33, 128, (64, 128, 1, 6, 0)),
     (2, 65536, 16, 128, (64, 128, 1, 6, 0)), (1, 65536, 34, 128, (64, 256, 2, 2, 0)),
     (1, 65536, 31, 128, (64, 256, 2, 2, 0)), (1, 4096, 64, 128, (128, 256, 1, 4, 1)),
     (1, 65536, 32, 256, (64, 256, 2, 4, 0)), (1, 1024, 32, 256, (128, 256, 1, 2, 1))],
)  # fmt: skip
def test_64_column_walkers_that_fill_the_gpu_run_one_per_sm_at_dstate_256(
    batch, seqlen, nheads, chunk, walk
) -> None:
    """Over chunks of 128, where batch × heads × 4 walkers of 64 state columns fill the GPU
    (FULL_WALKERS) within one wave at one per SM (WAVE_WALKERS // 2), they run so, whole chunks
    per step, at 6, chained by PDL only for short problems (change 56). walk: (state columns,
    rows per step, walk occupancy, state_latency, dependent_launch)."""
    config = default_config(256, ProblemSize(batch, seqlen, nheads, chunk))
    got = (
        config.state_block_n, config.state_block_q, config.state_occupancy, config.state_latency,
        config.dependent_launch,
    )  # fmt: skip
    assert got == walk


@pytest.mark.parametrize(
    ("seqlen", "nheads", "chunk", "walk"),
    [(1024, 32, 128, (1, 64, 128, 1)), (1024, 64, 128, (1, 64, 128, 1)),
     (2048, 32, 128, (1, 64, 128, 1)), (1024, 128, 128, (1, 64, 128, 2)),
     (1024, 32, 256, (1, 64, 128, 2)), (1024, 64, 256, (1, 64, 128, 2)),
     (2048, 32, 256, (0, 128, 64, 1)), (2048, 64, 256, (0, 128, 64, 2)),
     (512, 128, 128, (1, 128, 128, 1)), (65536, 32, 128, (0, 64, 128, 2)),
     (None, 32, 128, (0, 128, 64, 2))],
)  # fmt: skip
def test_short_walks_at_dstate_128(seqlen, nheads, chunk, walk) -> None:
    """Up to SHORT_WALK positions one segment taking 128 rows per step, of 64-column walkers at two
    CTAs per SM; short problems (SHORT_POSITIONS) over chunks up to 128 one segment of 64-column
    walkers at one per SM where they fit one wave (change 57), other short problems 128-column
    walkers at one per SM (over longer chunks only beyond SHORT_WALK); longer walks of fewer than
    FULL_WALKERS walkers are split into segments (64-column walkers for up to FEW_WALKERS of them
    over chunks of 128, change 63). walk: (segments, state columns, rows per step, walk
    occupancy)."""
    size = None if seqlen is None else ProblemSize(1, seqlen, nheads, chunk)
    config = default_config(128, size)
    assert (
        config.state_segments, config.state_block_n, config.state_block_q, config.state_occupancy
    ) == walk  # fmt: skip


@pytest.mark.parametrize(("seqlen", "segments"), [(1024, 1), (2048, 0), (None, 0)])
def test_short_walks_at_dstate_64_in_one_segment(seqlen, segments) -> None:
    """Up to SHORT_WALK positions one segment, whatever the heads; longer walks of fewer than
    FULL_WALKERS walkers take as many segments as fill the GPU (0)."""
    for nheads in (32, 64):
        size = None if seqlen is None else ProblemSize(1, seqlen, nheads, 256)
        assert default_config(64, size).state_segments == segments


@pytest.mark.parametrize(
    ("batch", "nheads", "walk"),
    [(1, 128, (1, 1, 1)), (4, 32, (1, 1, 1)), (1, 132, (1, 1, 1)), (1, 136, (1, 2, 1)),
     (2, 128, (1, 2, 1))],
)  # fmt: skip
def test_walks_that_fill_the_gpu_at_dstate_128_run_one_segment(batch, nheads, walk) -> None:
    """From FULL_WALKERS (batch × heads) walkers on, one segment; one CTA per SM while they fit
    in one such wave (132 on an H200), with C·Bᵀ from chunk_cb. walk: (segments, walk occupancy,
    out_cb)."""
    for seqlen in (2048, 65536):
        config = default_config(128, ProblemSize(batch, seqlen, nheads, 128))
        assert (config.state_segments, config.state_occupancy, config.out_cb) == walk
        assert config.state_block_n == 128


@pytest.mark.parametrize(
    ("batch", "nheads", "walk"),
    [(1, 64, (0, 2, 1, 4)), (2, 64, (1, 1, 0, 6)), (1, 128, (1, 1, 0, 6)),
     (1, 132, (1, 1, 0, 6)), (1, 136, (1, 2, 1, 4)), (2, 128, (1, 2, 1, 4))],
)  # fmt: skip
def test_walks_that_fill_the_gpu_at_dstate_64_run_one_segment(batch, nheads, walk) -> None:
    """From FULL_WALKERS (batch × heads) walkers on, one segment; while they fit one per SM (132
    on an H200) they run so, with plain state stores and the loads at 6 (change 53), over chunks
    of 128 and 256; in one segment they read their weights from chunk_cumsum at every length.
    walk: (segments, walk occupancy, TMA stores, walk latency) beyond twice CHAIN_SEQLEN."""
    for seqlen, chunk in itertools.product((16384, 65536), (128, 256)):
        config = default_config(64, ProblemSize(batch, seqlen, nheads, chunk))
        got = (
            config.state_segments, config.state_occupancy, config.state_store_tma,
            config.state_latency,
        )  # fmt: skip
        assert got == walk
        assert config.state_weights == 1 or config.state_segments != 1


@pytest.mark.parametrize(
    ("batch", "nheads", "chunk", "occupancy"),
    [(1, 32, 128, (2, 2, 1, 1, 2)), (1, 64, 128, (1, 1, 1, 1, 2)), (2, 32, 128, (1, 1, 1, 1, 2)),
     (1, 32, 256, (2, 2, 2, 2, 2)), (1, 128, 128, (1, 1, 1, 1, 1))],
)  # fmt: skip
def test_segmented_dstate_64_walks_up_to_twice_chain_seqlen_run_one_per_sm(
    batch, nheads, chunk, occupancy
) -> None:
    """Over chunks of 128, the segmented dstate-64 walks beyond SHORT_WALK up to twice CHAIN_SEQLEN
    run one CTA per SM, in half the segments (changes 59 and 60), but the few short walkers at
    latency 2 (change 52); over chunks of 256 and beyond twice CHAIN_SEQLEN two per SM. The walkers
    that fill the GPU run one per SM anyway (change 53), and so do the one-segment walks at 1K of
    more than FEW_WALKERS (change 62). occupancy: state_occupancy at 1K, 2K, 4K, 8K and 16K."""
    got = tuple(
        default_config(64, ProblemSize(batch, seqlen, nheads, chunk)).state_occupancy
        for seqlen in (1024, 2048, 4096, 8192, 16384)
    )
    assert got == occupancy


@pytest.mark.parametrize(
    ("nheads", "chunk", "walk"),
    [(32, 128, ((1, 1), (1, 1), (0, 0))), (64, 128, ((1, 1), (1, 1), (0, 0))),
     (32, 256, ((1, 1), (0, 0), (0, 0)))],
)  # fmt: skip
def test_segmented_dstate_64_walks_beyond_chain_seqlen_read_weights_with_pdl_up_to_twice_it(
    nheads, chunk, walk
) -> None:
    """Beyond CHAIN_SEQLEN the segmented dstate-64 walks compute their weights and launch without
    PDL (changes 46 and 48), but over chunks of 128 up to twice CHAIN_SEQLEN, where they run one
    per SM, they read them with PDL (change 60: −5.6 % at 8K/32/64). walk: (state_weights,
    dependent_launch) at 4K, 8K and 16K."""
    got = []
    for seqlen in (4096, 8192, 16384):
        config = default_config(64, ProblemSize(1, seqlen, nheads, chunk))
        got.append((config.state_weights, config.dependent_launch))
    assert tuple(got) == walk


@pytest.mark.parametrize(("dstate", "fold"), [(64, 1), (128, 0), (256, 0)])
def test_segment_start_folded_into_the_carried_state_only_up_to_dstate_64(dstate, fold) -> None:
    for size in (None, ProblemSize(1, 1024, 32, 128), ProblemSize(1, 65536, 128, 128)):
        assert default_config(dstate, size).out_fold_segments == fold


@pytest.mark.parametrize(
    ("dstate", "seqlen", "state_latency", "out_latency"),
    [(64, 1024, 4, 8), (64, None, 4, 8), (128, 1024, 2, 4), (128, None, 2, 4), (256, 1024, 2, 4),
     (256, 4096, 4, 4), (256, 8192, 4, 2), (256, None, 4, 2)],
)  # fmt: skip
def test_latency_hints_per_dstate(dstate, seqlen, state_latency, out_latency) -> None:
    """compute_out's x loads at 8 up to dstate 64 and at 2 where chunk_cb runs at 256; the walk's
    loads at 2 at dstate 128, at 2 for the short one-per-SM walkers at 256 (change 50), and 4
    (the knobs' default) elsewhere over chunks of 256."""
    size = None if seqlen is None else ProblemSize(1, seqlen, 32, 256)
    config = default_config(dstate, size)
    assert (config.state_latency, config.out_latency) == (state_latency, out_latency)


@pytest.mark.parametrize(
    ("batch", "nheads", "chunk", "latencies"),
    [(1, 32, 128, (2, 2, 4)), (2, 16, 128, (2, 2, 4)), (1, 64, 128, (2, 4, 4)),
     (2, 32, 128, (2, 4, 4)), (1, 32, 256, (4, 4, 4))],
)  # fmt: skip
def test_short_dstate_64_walks_of_few_walkers_take_latency_2(
    batch, nheads, chunk, latencies
) -> None:
    """Up to 2K over chunks of 128, with at most FEW_WALKERS walkers (batch × heads), the dstate-64
    walk's loads at 2 (change 52: −2.2 to −3.8 % at 1K-2K/32/64); not at 4K, with more walkers
    (but at 1K up to FULL_WALKERS, change 62), or over chunks of 256. latencies: state_latency at
    1K, 2K and 4K."""
    got = tuple(
        default_config(64, ProblemSize(batch, seqlen, nheads, chunk)).state_latency
        for seqlen in (1024, 2048, 4096)
    )
    assert got == latencies


@pytest.mark.parametrize(
    ("dstate", "nheads", "chunk", "latencies"),
    [(256, 64, 128, (4, 4, 8, 8)), (256, 64, 256, (2, 2, 8, 8)), (256, 128, 128, (4, 4, 6, 6)),
     (256, 128, 256, (4, 4, 4, 4)), (256, 32, 128, (6, 6, 6, 6)), (256, 32, 256, (2, 4, 4, 4)),
     (256, 31, 128, (4, 4, 2, 2)),
     (128, 128, 128, (6, 6, 6, 6)), (128, 128, 256, (2, 2, 2, 2)), (128, 64, 128, (6, 6, 6, 6)),
     (128, 32, 128, (2, 6, 8, 8)), (128, 64, 256, (2, 2, 2, 2)),
     (64, 128, 128, (6, 6, 6, 6)), (64, 64, 128, (4, 4, 4, 4))],
)  # fmt: skip
def test_long_walks_take_the_latency_hint_of_their_fastest_build(
    dstate, nheads, chunk, latencies
) -> None:
    """Beyond CHAIN_SEQLEN the one-per-SM 128-column walkers at dstate 256 take 8; over chunks of
    128 also those at two per SM, the 64-column ones at two per SM take 2, and the one-per-SM
    walkers at dstate 128 take 6 (change 49; over chunks of 256 the last two lost), and so do the
    64-column ones at one per SM at dstate 128 (change 55: 64 heads, and 32 up to CHAIN_SEQLEN)
    and at 256 (change 56: 32 heads, at every length); beyond CHAIN_SEQLEN, 32 heads' 64-column
    walkers at two per SM at dstate 128 take 8 (change 63). Up to CHAIN_SEQLEN those at dstate 128
    take 6 too over chunks of 128, and those at 256 take 2 over chunks of 256 (change 50). At
    dstate 64 the one-per-SM walkers take 6 at every length (change 53), the others the knobs'
    default. The whole-state walkers that write C·hᵀ (128 heads at dstate 256 over chunks of 128)
    take 6 beyond CHAIN_SEQLEN (change 71). latencies: state_latency at 2K, 4K, 8K and 64K."""
    got = tuple(
        default_config(dstate, ProblemSize(1, seqlen, nheads, chunk)).state_latency
        for seqlen in (2048, 4096, 8192, 65536)
    )
    assert got == latencies


@pytest.mark.parametrize(
    ("seqlen", "nheads", "chunk", "occupancy", "block_k", "latency"),
    [(1024, 32, 128, 2, 64, 4), (4096, 32, 128, 2, 64, 2), (4096, 32, 256, 3, 32, 4),
     (8192, 32, 128, 2, 64, 2), (65536, 32, 128, 2, 64, 2), (1024, 128, 128, 2, 64, 2),
     (2048, 64, 128, 2, 64, 2), (4096, 64, 128, 3, 64, 4), (65536, 64, 128, 3, 64, 4),
     (65536, 128, 128, 3, 64, 4), (65536, 128, 256, 3, 32, 4), (16384, 64, 256, 3, 32, 4)],
)  # fmt: skip
def test_compute_out_at_dstate_128_takes_64_column_k_tiles_over_chunks_of_128(
    seqlen, nheads, chunk, occupancy, block_k, latency
) -> None:
    """Over chunks of 128, 64-column k-tiles: two CTAs per SM for short problems, at latency 2
    with 64-column walkers one per SM up to twice SHORT_POSITIONS (change 55), for up to
    FEW_WALKERS walkers and for short walks (change 69); three elsewhere. Over chunks of 256
    beyond short problems, three with 32-column k-tiles."""
    config = default_config(128, ProblemSize(1, seqlen, nheads, chunk))
    got = (config.out_occupancy, config.out_block_k, config.out_latency, config.out_heads)
    assert got == (occupancy, block_k, latency, 2)


@pytest.mark.parametrize(
    ("batch", "seqlen", "nheads", "chunk", "walk", "out_latency"),
    [(1, 2048, 64, 128, (64, 128, 1, 6), 2), (1, 4096, 64, 128, (64, 128, 1, 6), 4),
     (1, 8192, 64, 128, (64, 128, 1, 6), 4), (1, 65536, 64, 128, (64, 128, 1, 6), 4),
     (2, 65536, 32, 128, (64, 128, 1, 6), 4), (1, 4096, 32, 128, (64, 128, 1, 6), 2),
     (1, 8192, 32, 128, (64, 128, 2, 8), 2), (1, 65536, 64, 256, (128, 64, 2, 2), 4),
     (1, 4096, 32, 256, (128, 64, 2, 2), 4), (1, 2048, 32, 256, (128, 64, 1, 2), 4),
     (1, 65536, 96, 128, (128, 64, 2, 2), 4)],
)  # fmt: skip
def test_64_column_walkers_one_per_sm_at_dstate_128_where_they_fill_the_gpu_or_chains(
    batch, seqlen, nheads, chunk, walk, out_latency
) -> None:
    """Over chunks of 128, beyond short problems and below FULL_WALKERS walkers: 64-column
    walkers at one CTA per SM, whole chunks per step, at 6, where twice the walkers (batch ×
    heads) fill the GPU within one wave, so they walk in one segment, and up to CHAIN_SEQLEN
    whatever the walkers (change 55); compute_out's loads at 2 with them up to twice
    SHORT_POSITIONS. Beyond CHAIN_SEQLEN, up to FEW_WALKERS walkers take 64 columns at two per SM
    (change 63). walk: (state columns, rows per step, walk occupancy, state_latency)."""
    config = default_config(128, ProblemSize(batch, seqlen, nheads, chunk))
    got = (config.state_block_n, config.state_block_q, config.state_occupancy, config.state_latency)
    assert got == walk and config.out_latency == out_latency
    assert config.state_segments == 0 and config.out_heads == 2


@pytest.mark.parametrize(
    ("seqlen", "cb", "heads", "occupancy", "block_k", "hint"),
    [(1024, 0, 2, 2, 64, 0), (16384, 1, 1, 4, 32, 1), (None, 1, 1, 4, 32, 1)],
)
def test_compute_out_at_dstate_256_chunk_256_four_ctas_of_one_head_hinted_where_chunk_cb_runs(
    seqlen, cb, heads, occupancy, block_k, hint
) -> None:
    size = None if seqlen is None else ProblemSize(1, seqlen, 32, 256)
    config = default_config(256, size)
    assert config.out_chunk_heads == 0
    assert (config.out_cb, config.out_heads, config.out_hint_decays) == (cb, heads, hint)
    assert (config.out_occupancy, config.out_block_k) == (occupancy, block_k)


@pytest.mark.parametrize(
    ("batch", "seqlen", "nheads", "chunk_size", "heads"),
    [(1, 65536, 64, 128, 64), (1, 16384, 32, 128, 32), (1, 4096, 32, 128, 8),
     (2, 4096, 32, 128, 16), (2, 1024, 128, 128, 16), (1, 1024, 128, 64, 16),
     (1, 2048, 32, 128, 4), (1, 1024, 64, 128, 4), (1, 1024, 32, 128, 0),
     (1, 65536, 64, 256, 0)],
)  # fmt: skip
def test_chunk_kernel_at_dstate_256_with_the_most_heads_that_leave_128_ctas(
    batch, seqlen, nheads, chunk_size, heads
) -> None:
    """Chunks up to 128 with CHUNK_MIN_TILES output tiles or more; one CTA per SM, so at least
    CHUNK_MIN_CTAS."""
    size = ProblemSize(batch, seqlen, nheads, chunk_size)
    config = default_config(256, size)
    assert config.out_chunk_heads == heads
    if heads:
        assert config.out_occupancy == 1 and config.out_hint_decays == 0
        assert size.output_tiles // heads >= 128 > size.output_tiles // (2 * heads) or heads == 64
    for dstate in (64, 128):
        assert default_config(dstate, size).out_chunk_heads == 0


@pytest.mark.parametrize(
    ("batch", "seqlen", "nheads", "chunk_size", "carry"),
    [(1, 1024, 128, 128, True), (1, 65536, 128, 128, True), (1, 16384, 132, 128, True),
     (1, 16384, 64, 128, False), (2, 16384, 128, 128, False), (1, 16384, 128, 256, False),
     (1, 16384, 128, 64, False)],
)  # fmt: skip
def test_whole_state_walkers_write_c_h_at_dstate_256_where_one_per_head_fills_the_gpu(
    batch, seqlen, nheads, chunk_size, carry
) -> None:
    """Change 70: over chunks of 128, where batch × heads walkers of a whole state fill the GPU
    one per SM in one wave, the walk writes C·hᵀ and compute_out takes pairs of heads over
    chunk_cb at three CTAs per SM; fewer walkers (64 heads) or a second wave keep the states."""
    size = ProblemSize(batch, seqlen, nheads, chunk_size)
    config = default_config(256, size)
    assert config.state_carry == carry
    if carry:
        assert (config.state_block_n, config.state_occupancy, config.state_segments) == (256, 1, 1)
        # Change 80: C·Bᵀ in fp16 scaled per tile.
        assert (config.out_chunk_heads, config.out_cb, config.out_heads) == (0, 3, 2)
        assert (config.out_occupancy, config.out_hint_decays) == (3, 1)
        # Change 71: the long walks' loads at 6, the short ones' at 4.
        assert config.state_latency == (6 if seqlen > config_module.CHAIN_SEQLEN else 4)
    for dstate in (64, 128):
        assert default_config(dstate, size).state_carry == 0


@pytest.mark.parametrize(
    ("dstate", "seqlen", "chunk_size", "beside"),
    [(256, 8192, 128, 1), (256, 65536, 128, 1), (256, 4096, 128, 0), (256, 2048, 128, 0),
     (128, 8192, 128, 1), (128, 65536, 128, 1), (128, 4096, 128, 0), (128, 65536, 256, 0),
     (64, 65536, 128, 0)],
)  # fmt: skip
def test_long_walks_of_128_heads_compute_c_b_beside(dstate, seqlen, chunk_size, beside) -> None:
    """Change 76: beyond CHAIN_SEQLEN over chunks of 128, the one-per-SM walks of 128 heads whose
    compute_out reads chunk_cb (dstate 128 and 256) compute C·Bᵀ beside the walk."""
    assert default_config(dstate, ProblemSize(1, seqlen, 128, chunk_size)).state_cb == beside


@pytest.mark.parametrize("dstate", [64, 128, 256])
def test_hinted_decays_are_tuned_only_with_chunk_cb(dstate: int) -> None:
    candidates = autotune.out_candidates(dstate, 256)
    assert {c["out_hint_decays"] for c in candidates if c["out_cb"]} == {0, 1}
    assert {c["out_hint_decays"] for c in candidates if not c["out_cb"]} == {0}


@pytest.mark.parametrize(("chunk_size", "chunk_kernel"), [(64, True), (128, True), (256, False)])
def test_chunk_kernel_candidates_only_for_chunks_it_takes(chunk_size, chunk_kernel) -> None:
    candidates = autotune.out_candidates(256, chunk_size)
    heads = {c["out_chunk_heads"] for c in candidates}
    assert heads == ({0, 1, 2, 4, 8, 16, 32, 64} if chunk_kernel else {0})
    assert all(c["out_occupancy"] == 1 for c in candidates if c["out_chunk_heads"])
    assert len({tuple(c) for c in candidates}) == 1  # the same knobs in every candidate


def test_output_tiles_count_partial_chunks() -> None:
    assert ProblemSize(batch=2, seqlen=1000, nheads=8, chunk_size=256).output_tiles == 2 * 8 * 4
    assert ProblemSize(batch=2, seqlen=1000, nheads=8, chunk_size=256).positions == 16000


def test_unknown_policy_is_an_error() -> None:
    with pytest.raises(ValueError, match="tune policy must be one of"):
        autotune.configure({}, "sometimes")


def test_cached_policy_uses_the_cache_without_tuning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    path = tmp_path / "tuning.json"
    picked = SSDConfig(state_block_n=128)
    autotune.TuningCache(path).put("key", picked, {})
    monkeypatch.setattr(autotune, "tuning_key", lambda kwargs: "key")
    monkeypatch.setattr(autotune, "tune", lambda kwargs: pytest.fail("must not tune"))
    config, record = autotune.configure({}, "cached", path)
    assert config == picked and record["source"] == "cache"
    assert capsys.readouterr().err == ""  # a hit says nothing
    monkeypatch.setattr(autotune, "tune", lambda kwargs: (SSDConfig(), {"tune_s": 0.5}))
    kwargs = {"B": torch.empty(1, 1024, 1, 128, device="meta"), "chunk_size": 256}
    config, record = autotune.configure(kwargs, "force", path)
    assert record["source"] == "tuned" and autotune.TuningCache(path).get("key") == SSDConfig()
    err = capsys.readouterr().err  # a search takes minutes: the user is told why it is quiet
    assert err.startswith("cuTile tuning: searching up to 232 configurations") and str(path) in err


def test_chaining_beyond_short_problems_moves_no_other_knob(monkeypatch) -> None:
    """2K/64, 1K/128 (change 41), 2K/128 and 4K/64 (change 42) chain their launches and keep
    every other knob."""
    sizes = [ProblemSize(1, seqlen, nheads, 128) for seqlen, nheads in
             [(2048, 64), (1024, 128), (2048, 128), (4096, 64)]]  # fmt: skip
    chained = [default_config(dstate, size) for dstate in (64, 128, 256) for size in sizes]
    monkeypatch.setattr(config_module, "CHAIN_POSITIONS", 0)
    plain = [default_config(dstate, size) for dstate in (64, 128, 256) for size in sizes]
    assert {c.dependent_launch for c in chained} == {1}
    assert [replace(c, dependent_launch=0) for c in chained] == plain


@pytest.mark.parametrize(("dstate", "chunk_size", "most"), [(256, 128, 270), (64, 256, 136)])
def test_the_stages_count_the_configurations_a_search_may_time(dstate, chunk_size, most) -> None:
    """What the tuner announces before a search: at most the walk's 72, its 32 hints (16 at each
    of two occupancies), compute_out's 144 plus 14 chunk-kernel ones (chunks up to
    CHUNK_KERNEL_MAX_Q) and its 4 hints, then chunk_cumsum's 4; at dstate 64 one tile width
    each, so 24 and 72, and no chunk kernel over 256."""
    assert sum(len(candidates) for _, candidates in autotune.stages(dstate, chunk_size)) == most


def _tune_on_a_fake_clock(
    monkeypatch,
    us: Callable[[SSDConfig], float],
    seqlen: int,
    nheads: int,
    dstate: int,
    spills: Callable[[SSDConfig], dict[str, int]] = lambda config: {},
) -> tuple[SSDConfig, dict, list[list[SSDConfig]]]:
    """autotune.tune at (seqlen, nheads, dstate) over chunks of 128 on meta tensors, `us` giving
    every config's time and `spills` its launches' spilled bytes per kernel: (pick, details, the
    configs each stage timed)."""
    timed: list[list[SSDConfig]] = []

    def fake_precompile(kwargs, configs, arch, sms) -> precompile.Precompiled:
        spilled = {c: s for c in configs if (s := spills(c))}
        return precompile.Precompiled(len(configs), 0, 0, 0, 0.0, spilled)

    def fake_search(configs: list[SSDConfig], forward) -> tuple[SSDConfig, dict]:
        timed.append(configs)
        times = {c: us(c) for c in configs}
        return min(configs, key=times.get), {"times_us": times}

    monkeypatch.setattr(autotune, "search_timed", fake_search)
    monkeypatch.setattr(autotune, "precompile", fake_precompile)
    monkeypatch.setattr(autotune.torch.cuda, "get_device_capability", lambda device: (9, 0))
    monkeypatch.setattr("kernels.cutile.launch.sm_count", lambda device: 132)
    kwargs = {
        "x": torch.empty(1, seqlen, nheads, 64, device="meta"),
        "B": torch.empty(1, seqlen, 1, dstate, device="meta"),
        "chunk_size": 128,
    }
    return *autotune.tune(kwargs), timed


def test_latency_hints_are_searched_on_each_kernels_pick(monkeypatch) -> None:
    """Five stages, each starting from the pick before: the walk's shape knobs, its hints,
    compute_out's knobs and its hint, then chunk_cumsum's heads per CTA. A fake clock makes one
    value of each knob fastest."""
    # None of these is the default at 8K/64/256 over chunks of 128.
    fastest = {
        "state_block_n": 64, "state_latency": 6, "state_weights": 0, "state_store_tma": 0,
        "out_latency": 6, "cumsum_heads": 16,
    }  # fmt: skip
    best, details, timed = _tune_on_a_fake_clock(
        monkeypatch, lambda c: 100.0 - sum(getattr(c, k) == v for k, v in fastest.items()),
        8192, 64, 256,
    )  # fmt: skip
    assert list(details) == [
        "fwd_pass_state", "fwd_pass_state_hints", "compute_out", "compute_out_hints",
        "chunk_cumsum", "tune_s",
    ]  # fmt: skip
    assert {k: getattr(best, k) for k in fastest} == fastest
    assert {c.state_block_n for c in timed[1]} == {64}  # the walk's pick, not the default's
    hints = [(c.state_latency, c.state_weights, c.state_store_tma, c.state_occupancy)
             for c in timed[1]]  # fmt: skip
    searched = set(itertools.product(autotune.LATENCIES, (0, 1), (0, 1), (1, 2)))
    assert searched <= set(hints) <= searched | {hints[0]}  # and the walk's pick
    assert {c.out_latency for c in timed[3]} == set(autotune.LATENCIES)
    assert all(c.state_latency == 6 for c in timed[2] + timed[3])
    assert {c.cumsum_heads for c in timed[4]} == set(autotune.CUMSUM_HEADS)
    assert all(c.out_latency == 6 for c in timed[4])


def test_candidates_spilling_no_more_than_the_start_are_timed(monkeypatch) -> None:
    """At dstate 256 over chunks of 128 the default chunk kernel spills 64 B, and so does every
    walk candidate's forward: they are timed (run 207: all but the start were skipped). A
    candidate whose walk spills, or whose chunk kernel spills more, is not, however fast."""

    def spills(c: SSDConfig) -> dict[str, int]:
        spilled = {"compute_out_chunk_kernel": 64 + 8 * (c.out_latency == 8)}
        if c.state_block_n == 128:
            spilled["fwd_pass_state_kernel"] = 24
        return spilled

    def us(c: SSDConfig) -> float:
        faster = (c.state_block_n == 256) + 5 * (c.state_block_n == 128) + (c.out_latency == 8)
        return 100.0 - faster

    best, details, timed = _tune_on_a_fake_clock(monkeypatch, us, 16384, 32, 256, spills)
    start = timed[0][0]
    assert start.state_block_n == 64 and start.out_latency != 8
    assert {c.state_block_n for c in timed[0]} == {64, 256}
    assert details["fwd_pass_state"]["spilling_skipped"] == 24  # the 128-column walkers
    assert 8 not in {c.out_latency for c in timed[3]}
    assert (best.state_block_n, best.out_latency) == (256, start.out_latency)


def test_the_walks_hints_are_searched_at_one_and_two_ctas_per_sm(monkeypatch) -> None:
    """A walk build that wins only at one CTA per SM with plain stores and hint 6, while one per
    SM loses at the default hint and stores (64K/128/64, change 53), is found although the walk's
    stage picks two per SM."""

    def us(c: SSDConfig) -> float:
        if c.state_occupancy == 1 and c.state_store_tma == 0 and c.state_latency == 6:
            return 90.0
        return 100.0 - (c.state_occupancy == 2)

    best, _, timed = _tune_on_a_fake_clock(monkeypatch, us, 65536, 32, 256)
    assert timed[1][0].state_occupancy == 2  # the walk stage's pick
    assert (best.state_occupancy, best.state_store_tma, best.state_latency) == (1, 0, 6)


@pytest.mark.parametrize(
    ("seqlen", "nheads", "chunk", "heads"),
    [(1024, 32, 128, 4), (2048, 32, 256, 4), (4096, 16, 128, 4), (4096, 32, 128, 8),
     (65536, 32, 128, 8), (1024, 33, 256, 8), (1024, 64, 256, 8), (None, 32, 128, 8)],
)  # fmt: skip
@pytest.mark.parametrize("dstate", [64, 128, 256])
def test_chunk_cumsum_takes_four_heads_per_cta_for_short_problems_of_few_heads(
    seqlen, nheads, chunk, heads, dstate
) -> None:
    """Short problems (SHORT_POSITIONS) of up to FEW_CUMSUM_HEADS heads take 4 per chunk_cumsum
    CTA, the others and a problem of unknown size 8 (change 61)."""
    size = None if seqlen is None else ProblemSize(1, seqlen, nheads, chunk)
    assert default_config(dstate, size).cumsum_heads == heads


@pytest.mark.parametrize(
    ("seqlen", "nheads", "chunk", "heads"),
    [(1024, 64, 128, 4), (1024, 48, 128, 4), (1024, 33, 128, 4), (1024, 128, 128, 8),
     (1024, 64, 256, 8), (2048, 64, 128, 8), (4096, 32, 128, 8)],
)  # fmt: skip
def test_chunk_cumsum_takes_four_heads_per_cta_before_short_one_per_sm_walks_at_dstate_128(
    seqlen, nheads, chunk, heads
) -> None:
    """Before change 57's walks (short problems over chunks of 128 whose 64-column walkers fit
    one wave at one CTA per SM) chunk_cumsum takes 4 heads per CTA whatever the heads (change 64:
    −1.8 to −2.2 % at 1K/64/128); outside them, beyond FEW_CUMSUM_HEADS, 8."""
    config = default_config(128, ProblemSize(1, seqlen, nheads, chunk))
    assert config.cumsum_heads == heads


@pytest.mark.parametrize(
    ("batch", "seqlen", "nheads", "chunk", "walk"),
    [(1, 1024, 64, 128, (1, 128, 2, 4)), (2, 1024, 32, 128, (1, 128, 2, 4)),
     (1, 1024, 33, 128, (1, 128, 2, 4)), (1, 1024, 127, 128, (1, 128, 2, 4)),
     (1, 1024, 32, 128, (2, 256, 2, 4)), (1, 1024, 128, 128, (1, 256, 6, 8)),
     (1, 2048, 64, 128, (1, 256, 4, 8)), (1, 1024, 64, 256, (2, 256, 4, 8))],
)  # fmt: skip
def test_short_dstate_64_walks_between_few_and_full_walkers_run_one_per_sm(
    batch, seqlen, nheads, chunk, walk
) -> None:
    """Up to SHORT_WALK over chunks of 128, more than FEW_WALKERS but fewer than FULL_WALKERS
    walkers run one CTA per SM, 128 rows per step at latency 2, after chunk_cumsum with 4 heads per
    CTA (change 62: −4.2 to −5.3 % at 1K/64/64); not at 2K, over chunks of 256, or with fewer or
    more walkers. walk: (state_occupancy, state_block_q, state_latency, cumsum_heads)."""
    config = default_config(64, ProblemSize(batch, seqlen, nheads, chunk))
    got = (config.state_occupancy, config.state_block_q, config.state_latency, config.cumsum_heads)
    assert got == walk


@pytest.mark.parametrize(
    ("batch", "seqlen", "nheads", "chunk", "walk"),
    [(1, 8192, 32, 128, (64, 128, 2, 8, 4)), (1, 65536, 32, 128, (64, 128, 2, 8, 4)),
     (2, 16384, 16, 128, (64, 128, 2, 8, 4)), (1, 8192, 33, 128, (128, 64, 2, 2, 8)),
     (1, 4096, 32, 128, (64, 128, 1, 6, 2)), (1, 8192, 32, 256, (128, 64, 2, 2, 8)),
     (1, 65536, 96, 128, (128, 64, 2, 2, 2))],
)  # fmt: skip
def test_few_walkers_beyond_chain_seqlen_at_dstate_128_take_64_columns_at_two_per_sm(
    batch, seqlen, nheads, chunk, walk
) -> None:
    """Beyond CHAIN_SEQLEN over chunks of 128, up to FEW_WALKERS walkers at dstate 128 take 64
    state columns at two CTAs per SM, whole chunks per step, at 8, which halves their segments on
    an H200 (change 63: −2.7 to −3.5 % at 8K/32/128); with more walkers, over chunks of 256, or
    up to CHAIN_SEQLEN (change 55) not. walk: (state columns, rows per step, walk occupancy,
    state_latency, segments on 132 SMs)."""
    config = default_config(128, ProblemSize(batch, seqlen, nheads, chunk))
    ctas = batch * nheads * 128 // config.state_block_n
    with recorded(132):
        segments, _ = _segments(0, seqlen // chunk, ctas, config.state_occupancy, None)
    got = (config.state_block_n, config.state_block_q, config.state_occupancy, config.state_latency)
    assert got + (segments,) == walk


def test_a_pick_must_beat_the_start_by_min_gain() -> None:
    start, near, far = SSDConfig(), SSDConfig(out_latency=6), SSDConfig(out_latency=8)
    gain = autotune.MIN_GAIN
    assert autotune.pick(start, {start: 100.0, near: 100.0 * (1 - gain / 2)}) == start
    assert autotune.pick(start, {start: 100.0, near: 99.9, far: 100.0 * (1 - 2 * gain)}) == far
    assert autotune.pick(None, {near: 99.9, far: 100.0}) == near  # the start failed to launch


def test_finalists_are_timed_in_turns_so_a_drift_falls_on_all() -> None:
    """A GPU getting 1 % slower per call: timed one after another, the config timed first would
    look fastest although it is the slower; in turns the faster one is found."""
    calls = []

    def drifting_us(fn) -> float:
        calls.append(fn)
        return fn() * (1 + 0.01 * len(calls))

    times = autotune.interleaved_us({"slow": lambda: 101.0, "fast": lambda: 100.0}, 10, drifting_us)
    assert times["fast"] < times["slow"]
    assert [fn() for fn in calls[2:6]] == [101.0, 100.0, 101.0, 100.0]  # after one warm-up each
    assert len(calls) == 2 + 2 * 10


def test_a_retired_field_reads_only_at_the_value_that_launches_as_now() -> None:
    """Older runs' rows and caches record state_warps, since removed: 0 still reads as what ran."""
    recorded = {**DEFAULT_CONFIG.to_dict(), "state_warps": 0}
    assert SSDConfig.from_dict(recorded) == DEFAULT_CONFIG
    with pytest.raises(ValueError, match="state_warps was removed"):
        SSDConfig.from_dict({**recorded, "state_warps": 8})
