"""Where the kernel names the H200 launched are recorded (scripts/kernel_symbols.py, with
--names-only): one file for the tests that read them, recorded at today's kernel parameters. A
change that adds a parameter makes these tests fail until the names are recorded again (or, while
no GPU is lent, until the tests leave the new parameters out, as 405a357 did)."""

from __future__ import annotations

from pathlib import Path

RUNS = Path(__file__).resolve().parents[2] / "results/nvidia-h200/config-comparisons"
SYMBOLS = RUNS / "symbols-18900f9.jsonl"
