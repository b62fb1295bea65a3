"""kernels/cutile/signatures.py: the launches of a forward, built on the CPU from meta tensors, are
the specialisations a GPU launched (mangled names recorded on the H200 by
scripts/kernel_symbols.py at bef4ba0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("cuda.tile")
from cuda.tile.compilation import mangle_kernel_name  # noqa: E402

from harness.inputs import meta_inputs  # noqa: E402
from kernels.cutile.signatures import forward_launches  # noqa: E402
from scripts.variants import parse_shape, point_config  # noqa: E402

SYMBOLS = Path(__file__).resolve().parents[2] / "results/nvidia-h200/config-comparisons"
SYMBOLS = SYMBOLS / "symbols-bef4ba0.jsonl"
# The variants that file was recorded with, over the default configs of bef4ba0; at dstate 256
# the walk then had 64 state columns whatever the heads (change 19 came later).
VARIANTS = {
    "base": {},
    "h2o3": {"out_occupancy": 3},
    "h1o3": {"out_heads": 1, "out_occupancy": 3},
    "pairs": {"out_heads": 2},
    "rank1": {"out_rank1": 1},
}
SHAPES = {
    "b1_L65536_H128_P64_N128": "65536:128:128",
    "b1_L65536_H32_P64_N64": "65536:32:64",
    "b1_L2048_H32_P64_N256": "2048:32:256",
}


def _recorded() -> dict[tuple[str, str], list[str]]:
    launches: dict[tuple[str, str], list[str]] = {}
    for line in SYMBOLS.read_text().splitlines():
        row = json.loads(line)
        shape = next(s for prefix, s in SHAPES.items() if row["point"].startswith(prefix))
        launches.setdefault((shape, row["variant"]), []).append(row["symbol"])
    return launches


@pytest.mark.parametrize(("shape", "variant"), sorted(_recorded()))
def test_meta_tensors_give_the_names_the_gpu_launched(shape: str, variant: str) -> None:
    problem = parse_shape(shape)
    overrides = dict(VARIANTS[variant])
    if problem.dstate == 256:
        overrides["state_block_n"] = 64
    kwargs = meta_inputs(problem).kwargs()
    launches = forward_launches(kwargs, point_config(problem, overrides))
    names = [mangle_kernel_name(name, signature) for name, _, signature in launches]
    assert names == _recorded()[(shape, variant)]


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
