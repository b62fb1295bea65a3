"""kernels/cutile/signatures.py: the launches of a forward, built on the CPU from meta tensors, are
the specialisations a GPU launched (mangled names and the config of each launch, recorded on the
H200 by scripts/kernel_symbols.py, with --names-only since e5b5da9; SYMBOLS names the commit)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("cuda.tile")
from cuda.tile.compilation import mangle_kernel_name  # noqa: E402

from harness.inputs import meta_inputs  # noqa: E402
from kernels.cutile.config import SSDConfig  # noqa: E402
from kernels.cutile.signatures import forward_launches  # noqa: E402
from scripts.variants import parse_shape  # noqa: E402
from tests.kernels.recorded_symbols import SYMBOLS  # noqa: E402

SHAPES = {
    "b1_L65536_H128_P64_N128": "65536:128:128",
    "b1_L65536_H32_P64_N64": "65536:32:64",
    "b1_L2048_H32_P64_N256": "2048:32:256",
    "b1_L16384_H64_P64_N256": "16384:64:256:128",
    "b1_L16384_H128_P64_N256": "16384:128:256:128",  # the walk writes C·hᵀ (change 70)
}


def _recorded() -> dict[tuple[str, str], tuple[dict, list[str]]]:
    """(shape, variant) → (the config launched, the names launched in order)."""
    launches: dict[tuple[str, str], tuple[dict, list[str]]] = {}
    for line in SYMBOLS.read_text().splitlines():
        row = json.loads(line)
        shape = next(s for prefix, s in SHAPES.items() if row["point"].startswith(prefix))
        config, names = launches.setdefault((shape, row["variant"]), (row["config"], []))
        assert row["config"] == config
        names.append(row["symbol"])
    return launches


@pytest.mark.parametrize(("shape", "variant"), sorted(_recorded()))
def test_meta_tensors_give_the_names_the_gpu_launched(shape: str, variant: str) -> None:
    """The same specialisations in the same order. kernel_symbols.py runs eager forwards, which
    since change 79 launch chunk_cb after the walk, never the strided kernel beside it (CUDA
    graphs only); symbols-e4c7cb2.jsonl, recorded before, holds the strided kernel's names."""
    config, recorded = _recorded()[(shape, variant)]
    kwargs = meta_inputs(parse_shape(shape)).kwargs()
    launches = forward_launches(kwargs, SSDConfig.from_dict(config), captured=False)
    names = [mangle_kernel_name(n, s) for n, _, s in launches]
    assert names == recorded


def test_the_recording_covers_chained_and_plain_launches() -> None:
    chained = {config["dependent_launch"] for config, _ in _recorded().values()}
    assert chained == {0, 1}


def test_a_wrong_argument_count_is_refused() -> None:
    from kernels.cutile.segment_scan import segment_scan_kernel
    from kernels.cutile.signatures import from_arguments

    with pytest.raises(ValueError, match="segment_scan_kernel takes 8 arguments, got 2"):
        from_arguments(segment_scan_kernel, (1, 2))


@pytest.mark.parametrize(("offset", "alignment"), [(0, 16), (8, 16), (4, 8), (1, 2)])
def test_a_view_offset_lowers_the_base_alignment(offset: int, alignment: int) -> None:
    import torch

    from kernels.cutile.signatures import tensor_constraint

    view = torch.empty(64 + 8, dtype=torch.bfloat16, device="meta")[offset : offset + 64]
    assert tensor_constraint(view).base_addr_divisible_by == alignment
