"""scripts/profile_point.py: its arguments fail with a clear message before any GPU work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "profile_point.py"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shapes", "1024:64"], "seqlen:nheads:dstate"),
        (["--shapes", "1024:64:128", "--variant", 'x={"out_heads": 3}'], "out_heads"),
        (["--shapes", "1024:64:128", "--calls", "0"], "--calls must be >= 1"),
    ],
)
def test_bad_arguments_fail_before_any_gpu_work(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and message in done.stderr, done.stderr
