"""kernels.cutile.precompile on the CPU: layouts, distinct launches, the disk cache filled, the
spilling configs named."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from harness.inputs import meta_inputs
from harness.problem import Problem
from kernels.cutile import autotune, precompile
from kernels.cutile.config import forward_default_config, inputs_default_config
from kernels.cutile.signatures import forward_launches

PROBLEM = Problem(seqlen=2048, nheads=8, dstate=64, chunk_size=128)


def _kwargs() -> dict:
    return meta_inputs(PROBLEM).kwargs()


def _base():
    return forward_default_config((1, PROBLEM.seqlen, PROBLEM.nheads), PROBLEM.dstate, 128)


def test_a_layout_rebuilds_strides_and_offset_on_meta() -> None:
    view = torch.empty(4, 10, 6)[1:, 2:9:2, 1:5]
    layout = precompile.TensorLayout.of(view)
    rebuilt = layout.meta()
    assert rebuilt.is_meta and rebuilt.dtype == view.dtype
    assert (rebuilt.shape, rebuilt.stride(), rebuilt.storage_offset()) == (
        view.shape,
        view.stride(),
        view.storage_offset(),
    )


def test_layouts_keep_what_a_forward_reads_and_rebuild_the_same_launches() -> None:
    kwargs = _kwargs()
    described = precompile.layouts({**kwargs, "unrelated": object()})
    assert "unrelated" not in described
    rebuilt = precompile.meta_kwargs(described)
    names = [(n, s.with_mangled_symbol(n).symbol) for n, _, s in forward_launches(kwargs, _base())]
    again = [(n, s.with_mangled_symbol(n).symbol) for n, _, s in forward_launches(rebuilt, _base())]
    assert names == again


def test_distinct_launches_of_the_forwards() -> None:
    base = _base()
    configs = [replace(base, **c) for c in autotune.out_candidates(64, 128)]
    kwargs = precompile.meta_kwargs(precompile.layouts(_kwargs()))
    keys = [precompile.launch_keys(kwargs, config, 132) for config in configs]
    jobs = precompile.distinct_launches(keys)
    names = []
    for key, (forward, index) in jobs.items():
        name, kernel, signature = precompile._launches(kwargs, configs[forward], 132)[index]
        symbol = signature.with_mangled_symbol(name).symbol
        assert key == (name, symbol, repr(kernel._compiler_options))
        names.append(name)
    # the candidates differ in compute_out only: one chunk_cumsum and one state walk among them
    assert names.count("chunk_cumsum_kernel") == names.count("fwd_pass_state_kernel") == 1
    assert 0 < names.count("compute_out_kernel") <= len(configs)


def test_the_keys_cover_a_graphs_launches_and_an_eager_forwards() -> None:
    """state_cb launches chunk_cb's strided kernel in a CUDA graph and chunk_cb in an eager
    forward: both are precompiled, so neither compiles while a point is timed."""
    config = replace(
        _base(), state_cb=1, state_block_n=64, state_segments=1, state_occupancy=1, out_cb=1
    )
    kwargs = precompile.meta_kwargs(precompile.layouts(_kwargs()))
    names = [
        key[0]
        for key in precompile.distinct_launches([precompile.launch_keys(kwargs, config, 132)])
    ]
    assert {"chunk_cb_strided_kernel", "chunk_cb_kernel"} <= set(names)
    assert names.count("fwd_pass_state_kernel") == 1


def test_a_sweeps_defaults_are_the_configs_its_forwards_launch_untuned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """precompile_defaults hands each input's default config, the GPU's architecture and its SM
    count to precompile_forwards: the configs `ssd_forward` takes when none is given."""
    from kernels.cutile import launch

    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (9, 0))
    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    monkeypatch.setattr(precompile, "precompile_forwards", lambda *a: asked.append(a))
    inputs = [_kwargs(), meta_inputs(Problem(seqlen=65536, nheads=128, dstate=256)).kwargs()]
    precompile.precompile_defaults(inputs, torch.device("cuda", 0))
    [(forwards, arch, sms)] = asked
    assert (arch, sms) == ("sm_90", 132)
    assert [kw for kw, _ in forwards] == inputs
    assert [config for _, config in forwards] == [inputs_default_config(kw) for kw in inputs]
    assert forwards[0][1] != forwards[1][1]


def test_forwards_of_several_inputs_share_their_common_launches() -> None:
    """A sweep's points at other lengths launch the same specialisations (the chunk count is not
    a constant of any kernel), so precompile_forwards compiles them once."""
    longer = meta_inputs(replace(PROBLEM, seqlen=4 * PROBLEM.seqlen)).kwargs()
    keys = [precompile.launch_keys(kw, _base(), 132) for kw in (_kwargs(), longer)]
    assert keys[0] == keys[1]
    assert len(precompile.distinct_launches(keys)) == len(set(keys[0]))


@pytest.mark.parametrize(
    "value, enabled", [(None, True), ("/tmp/c", True), ("off", False), ("0", False), ("", False)]
)
def test_disk_cache_setting(monkeypatch: pytest.MonkeyPatch, value, enabled: bool) -> None:
    if value is None:
        monkeypatch.delenv("CUDA_TILE_CACHE_DIR", raising=False)
    else:
        monkeypatch.setenv("CUDA_TILE_CACHE_DIR", value)
    assert precompile.disk_cache_enabled() is enabled


def test_nothing_is_compiled_without_a_disk_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_TILE_CACHE_DIR", "off")
    done = precompile.precompile(_kwargs(), [_base()], "sm_90", 132)
    assert (done.specialisations, done.compiled, done.workers) == (0, 0, 0)


def test_workers_fill_the_disk_cache_once_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forward of two configs that differ in compute_out: its launches and the second
    compute_out, compiled by two processes into the cache a later launch reads, the second
    named as spilling in compute_out (pairs of heads at dstate 64 on sm_90), so it spills more than
    the first and not the other way round; asked again, this process compiles nothing and still
    knows which spills."""
    monkeypatch.setenv("CUDA_TILE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(precompile, "_PRECOMPILED", {})
    base = _base()
    configs = [base, replace(base, out_heads=2)]
    launches = len(forward_launches(_kwargs(), base))
    done = precompile.precompile(_kwargs(), configs, "sm_90", 132, 2)
    built = launches + 1
    assert (done.specialisations, done.compiled, done.failed, done.workers) == (built, built, 0, 2)
    spilled = done.spills
    assert list(spilled) == [configs[1]] and list(spilled[configs[1]]) == ["compute_out_kernel"]
    assert spilled[configs[1]]["compute_out_kernel"] > 0 and done.to_dict()["spilling"] == 1
    assert done.spills_more(configs[1], configs[0]) and not done.spills_more(*configs)
    with sqlite3.connect(tmp_path / "cache.db") as db:
        assert db.execute("SELECT COUNT(*) FROM cache").fetchone()[0] == built
    again = precompile.precompile(_kwargs(), configs, "sm_90", 132, 2)
    assert (again.specialisations, again.compiled, again.workers) == (built, 0, 0)
    assert again.spills == spilled
    assert again.to_dict()["seconds"] < done.to_dict()["seconds"]
