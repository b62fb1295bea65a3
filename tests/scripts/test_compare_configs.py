"""scripts/compare_configs.py: its arguments fail with a clear message before any GPU work."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "compare_configs.py"
spec = importlib.util.spec_from_file_location("compare_configs", SCRIPT)
compare_configs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_configs)


def test_shapes_parse() -> None:
    problem = compare_configs.parse_shape("16384:64:256")
    assert (problem.seqlen, problem.nheads, problem.dstate) == (16384, 64, 256)
    assert problem.return_final_states and problem.chunk_size == 256
    assert compare_configs.parse_shape("4096:32:64:128").chunk_size == 128


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("16384:64", "seqlen:nheads:dstate"),
        ("1k:64:256", "seqlen:nheads:dstate"),
        ("1024:64:256:256:1", "seqlen:nheads:dstate"),
        ("1024:64:256:100", "chunk_size must be a power of two"),
    ],
)
def test_bad_shape_says_the_format(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        compare_configs.parse_shape(text)
