"""scripts/kernel_symbols.py: its arguments fail with a clear message before any GPU work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "kernel_symbols.py"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shapes", "1024:64:128"], "--out"),
        (["--shapes", "1024:64", "--out", "x.jsonl"], "seqlen:nheads:dstate"),
        (["--shapes", "1024:64:128", "--out", "x.jsonl", "--variant", "v={1}"], "JSON object"),
    ],
)
def test_bad_arguments_fail_before_any_gpu_work(
    args: list[str], message: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_names_only_without_a_gpu_ends_in_one_line(tmp_path: Path) -> None:
    """The names come from CUDA tensors and the driver, so `--names-only` needs a GPU too."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    args = ["--shapes", "1024:32:64", "--out", "x.jsonl", "--names-only"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1 and done.stderr.splitlines() == [
        "kernel_symbols.py: no CUDA GPU found; this script runs on a GPU node"
    ]
    assert not (tmp_path / "x.jsonl").exists()


@pytest.mark.gpu
@pytest.mark.parametrize("overrides", [{}, {"state_weights": 0}])
def test_names_only_records_what_a_run_launches(overrides: dict) -> None:
    """`--names-only` skips compiling and launching; the names it records are the ones a run
    launches, with segments (segment_scan) at 4K/32/64: the walk reading its weights from
    chunk_cumsum (the default there since change 48) and computing them."""
    from scripts.kernel_symbols import record_launches
    from scripts.variants import parse_shape

    problem = parse_shape("4096:32:64:128")
    assert record_launches(problem, overrides, run=False) == record_launches(problem, overrides)
