"""harness.plan: what `run_bench.py dry_run=true` prints, read without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import config, plan, providers, runner
from tests.harness.test_runner import PEAKS, WallTimer, _answer, fake

ENV = {"gpu": {"name": "cpu", "index": None}, "git": {"commit": "abc", "dirty": False}}
SMALL = ["sweep=smoke", "sweep.seqlen=[32,64]", "sweep.nheads=2", "sweep.headdim=8",
         "sweep.dstate=16", "sweep.chunk_size=16", "timing.warmup=1", "timing.min_reps=6",
         "timing.max_reps=6", "timing.kernels_batch=3", "progress=false"]  # fmt: skip


@pytest.fixture(autouse=True)
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(providers, "_PROVIDERS", dict(providers._PROVIDERS))
    providers.register(fake("good", _answer()))
    providers.register(
        fake("picky", _answer(), supports=lambda p: "seqlen > 32" if p.seqlen > 32 else None)
    )


def bench(tmp_path: Path, *overrides: str) -> config.BenchConfig:
    return config.to_bench(config.compose([*SMALL, f"results_dir={tmp_path}", *overrides]))


def test_the_plan_names_each_points_verdicts_and_its_check(tmp_path: Path) -> None:
    text = plan.render(bench(tmp_path, "providers.names=[good,picky]"))
    assert text.startswith("sweep smoke: 2 of 2 points x 2 providers, 3 pairs to measure")
    assert f"into {tmp_path}/<gpu>/smoke-<UTC time>" in text.splitlines()[0]
    assert "| L=32 | run | run | float64 |" in text
    assert "| L=64 | run | cannot: seqlen > 32 | float64 |" in text


def test_points_beyond_the_reference_budget_name_the_fallback(tmp_path: Path) -> None:
    cfg = bench(tmp_path, "providers.names=[good,triton]", "check.reference_max_gib=0")
    assert "| run | run | triton's answer |" in plan.render(cfg)


def test_a_run_on_disk_shows_what_a_resume_skips_and_whether_it_may(tmp_path: Path) -> None:
    cfg = bench(tmp_path, "providers.names=[good]", "sweep.seqlen=[32]", "run_id=r1")
    runner.run(cfg, device="cpu", timer=WallTimer(), peaks=PEAKS, env=ENV)
    grown = bench(tmp_path, "providers.names=[good,picky]", "run_id=r1")
    text = plan.render(grown)
    assert "2 of 2 points x 2 providers, 2 pairs to measure (1 recorded)" in text
    assert "| L=32 | recorded | run |" in text and "Note:" not in text
    other = plan.render(bench(tmp_path, "providers.names=[good]", "run_id=r1", "seed=1"))
    assert "Note: run r1 was measured with seed=0 there, 1 now; pass another run_id" in other


def test_resume_true_plans_against_the_run_it_would_continue(tmp_path: Path) -> None:
    one = ("providers.names=[good]", "sweep.seqlen=[32]")
    run_dir = runner.run(
        bench(tmp_path, *one), device="cpu", timer=WallTimer(), peaks=PEAKS, env=ENV
    )
    text = plan.render(bench(tmp_path, *one, "resume=true"))
    assert "0 pairs to measure (1 recorded)" in text and f"/<gpu>/{run_dir.name}" in text
    other = plan.render(
        bench(tmp_path, "providers.names=[good]", "sweep.seqlen=[64]", "resume=true")
    )
    assert "1 pairs to measure (0 recorded)" in other and "smoke-<UTC time>" in other
