"""scripts/kernel_resources.py: bad arguments fail with a clear message before any compile; the
launches of a forward at given shapes compile."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--symbol", "matmul_kernel_Kt2"], "none of"),
        (["--symbol", "compute_out_kernel_Kt2", "--occupancy", "-1"], "--occupancy must be >= 0"),
        ([], "give --shapes, --symbol or --symbols"),
        (["--shapes", "1024:32"], "seqlen:nheads:dstate"),
        (["--shapes", "1024:32:64", "--kernel", "walk"], "--kernel must be one of"),
    ],
)
def test_bad_symbols_and_hints_fail_before_any_compile(args: list[str], message: str) -> None:
    pytest.importorskip("cuda.tile")
    script = Path(__file__).resolve().parents[2] / "scripts" / "kernel_resources.py"
    done = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_recorded_symbols_are_read_and_a_foreign_line_is_named(tmp_path: Path) -> None:
    from scripts.kernel_resources import read_symbols

    good = tmp_path / "symbols.jsonl"
    good.write_text(
        '{"point": "p", "variant": "v", "kernel": "k", "occupancy": 2, "symbol": "k_Kt2"}\n'
    )
    assert read_symbols(good) == [("p", "v", "k_Kt2", 2)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good.read_text() + '{"point": "p"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2 is not a kernel_symbols.py line"):
        read_symbols(bad)


@pytest.mark.slow
def test_shapes_compile_every_launch_of_the_forward() -> None:
    """--shapes builds the launches from meta tensors and compiles each (no GPU)."""
    pytest.importorskip("cuda.tile")
    script = Path(__file__).resolve().parents[2] / "scripts" / "kernel_resources.py"
    done = subprocess.run(
        [sys.executable, str(script), "--shapes", "2048:32:64:128"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()[1:]]
    kernels = [row[2] for row in rows]
    assert kernels == [
        "chunk_cumsum_kernel", "fwd_pass_state_kernel", "segment_scan_kernel", "compute_out_kernel"
    ]  # fmt: skip
    assert all(int(row[3]) > 0 for row in rows)  # registers read from each cubin


@pytest.mark.slow
def test_one_kernel_at_two_chunk_lengths_is_told_apart() -> None:
    """--kernel compiles that kernel's launches only, and each row names its whole point, so
    shapes that differ only in the chunk length stay apart."""
    pytest.importorskip("cuda.tile")
    script = Path(__file__).resolve().parents[2] / "scripts" / "kernel_resources.py"
    done = subprocess.run(
        [sys.executable, str(script), "--kernel", "fwd_pass_state",
         "--shapes", "2048:32:64:128,2048:32:64:256"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()[1:]]
    assert [row[2] for row in rows] == ["fwd_pass_state_kernel"] * 2
    assert ["_Q128_" in rows[0][0], "_Q256_" in rows[1][0]] == [True, True]


@pytest.mark.slow
def test_sass_dir_writes_one_listing_per_launch(tmp_path: Path) -> None:
    """--sass-dir writes each compiled launch's machine code, named by point, variant and
    kernel, without --sass's columns unless asked."""
    pytest.importorskip("cuda.tile")
    from kernels.cutile.resources import nvdisasm

    if nvdisasm() is None:
        pytest.skip("no nvdisasm (on PATH or in the triton package)")
    script = Path(__file__).resolve().parents[2] / "scripts" / "kernel_resources.py"
    done = subprocess.run(
        [sys.executable, str(script), "--kernel", "compute_out", "--shapes", "1024:32:64:128",
         "--sass-dir", str(tmp_path / "sass")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (listing,) = (tmp_path / "sass").iterdir()
    assert listing.name.endswith("_default_compute_out_kernel.sass")
    assert "HGMMA" in listing.read_text() and "instrs" not in done.stdout
