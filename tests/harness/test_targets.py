"""harness/targets.py: the performance issue's targets read off synthetic runs."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness import targets
from harness.history import best_fraction_of_peak
from harness.problem import Problem
from tests.harness.synthetic import GPU, synthetic_meta, synthetic_table

DSTATES = (64, 128, 256)


def _by_goal(df, meta=None) -> dict[str, targets.Target]:
    found = targets.evaluate(df, meta or synthetic_meta(), "triton", "cutile")
    return {t.goal.split(" (")[0]: t for t in found}


def test_a_run_fast_everywhere_meets_the_speedup_targets() -> None:
    df = synthetic_table(seqlens=(4096, 16384), dstates=DSTATES, speedup=2.6)
    found = _by_goal(df)
    assert [t.met for t in found.values()][:4] == [True, True, True, True]
    long = found["≥ 2.5x at L ≥ 16K with dstate 256"]
    assert long.measured == "2.600x–2.600x at 2 points, lowest at L=16K H=32 N=256"
    assert found["geomean ≥ 2.0x"].measured == "2.600x over 12 points"


def test_the_lowest_point_names_where_a_target_is_missed() -> None:
    def speedup(p: Problem) -> float:
        return 1.1 if (p.seqlen, p.nheads, p.dstate) == (4096, 64, 128) else 2.6

    found = _by_goal(synthetic_table(seqlens=(4096, 16384), dstates=DSTATES, speedup=speedup))
    every = found["≥ 1.14x at every point"]
    assert not every.met and every.measured.endswith("lowest at L=4K H=64 N=128")
    assert found["≥ 2.5x at L ≥ 16K with dstate 256"].met  # that point is not in its set


def test_an_untimed_point_fails_a_target_over_every_point() -> None:
    df = synthetic_table(dstates=DSTATES, speedup=2.6)
    broken = (df["provider"] == "cutile") & (df["seqlen"] == 1024) & (df["dstate"] == 64)
    df.loc[broken & (df["nheads"] == 32), "status"] = "error"
    every = _by_goal(df)["≥ 1.14x at every point"]
    assert every.met is False and every.measured.endswith("; 1 not timed")


def _fail_cutile(df: pd.DataFrame, where: pd.Series) -> pd.DataFrame:
    """The rows with cuTile's check failed at `where` (no time recorded)."""
    df = df.copy()
    broken = where & (df["provider"] == "cutile")
    df.loc[broken, "status"] = "error"
    df.loc[broken, ["median_ms", "ci_low_ms", "ci_high_ms"]] = float("nan")
    return df


def test_a_target_whose_points_all_failed_is_missed_not_unjudged() -> None:
    """Failing everywhere must not read better than failing somewhere: the run has the points,
    so the target is judged, and missed. The peak target likewise, with a rate measured."""
    df = synthetic_table(seqlens=(16384,), nheads=(32, 64), dstates=(256,), speedup=3.0)
    found = _by_goal(_fail_cutile(df, df["nheads"] > 0))
    long = found["≥ 2.5x at L ≥ 16K with dstate 256"]
    assert (long.met, long.measured) == (False, "none of 2 points timed")
    assert long.needs.startswith("2 not timed") and len(long.points) == 2
    assert found["geomean ≥ 2.0x"].met is False
    peak = found["≥ 40 % of the measured bf16 matmul rate at the longest L"]
    assert (peak.met, peak.measured) == (False, "cutile not timed at L=16K")


def test_a_point_not_timed_cannot_lift_the_geomean() -> None:
    """Leaving the slowest point out of the mean would meet the target by failing there."""

    def speedup(p: Problem) -> float:
        return 1.0 if (p.seqlen, p.nheads) == (1024, 32) else 2.5

    df = synthetic_table(seqlens=(1024, 4096), nheads=(32, 64), dstates=(128,), speedup=speedup)
    assert _by_goal(df)["geomean ≥ 2.0x"].met is False  # 1.988x over all four
    failed = _fail_cutile(df, (df["seqlen"] == 1024) & (df["nheads"] == 32))
    geomean = _by_goal(failed)["geomean ≥ 2.0x"]
    assert (geomean.met, geomean.measured) == (False, "2.500x over 3 points; 1 not timed")
    text = targets.section(failed, synthetic_meta(), "triton", "cutile")
    assert "1 not timed, where a provider failed its check or its timing" in text


def test_the_peak_target_reads_the_longest_points_at_the_problems_chunk() -> None:
    df = synthetic_table(seqlens=(1024, 16384), dstates=DSTATES, speedup=2.6)
    meta = synthetic_meta()
    peak = _by_goal(df, meta)["≥ 40 % of the measured bf16 matmul rate at the longest L"]
    longest = df[df["seqlen"] == 16384]
    fraction, _ = best_fraction_of_peak(longest, meta, "cutile", "graph")
    assert peak.measured.startswith(f"{100 * fraction:.1f} % at L=16K")
    assert peak.met == (fraction >= targets.PEAK_FRACTION)
    no_rate = _by_goal(df, {**meta, "peaks": {}})
    assert no_rate["≥ 40 % of the measured bf16 matmul rate at the longest L"].met is None


def test_the_peak_target_is_judged_over_the_highest_rate_the_run_measured() -> None:
    """A worker whose probe read low (a warm GPU) cannot make the target read met: the fraction
    is of the highest rate any worker measured on that GPU model, its own worker's beside it."""
    df = synthetic_table(seqlens=(1024, 16384), dstates=DSTATES, speedup=2.6)
    longest = df[df["seqlen"] == 16384]
    at_790, _ = best_fraction_of_peak(longest, synthetic_meta(), "cutile", "graph")
    low, high = 790.0 * at_790 / 0.45, 790.0 * at_790 / 0.35  # 45 % and 35 % of them

    def worker(name: str, rate: float, gpu: str = GPU) -> dict:
        return {"worker": name, "peaks": {"bf16_tflops": rate}, "env": {"gpu": {"name": gpu}}}

    first = {**synthetic_meta(), "peaks": {"bf16_tflops": low}}  # meta keeps the first worker's
    meta = {**first, "workers": [worker("synthetic:0", low), worker("cool:1", high)]}
    peak = _by_goal(df, meta)["≥ 40 % of the measured bf16 matmul rate at the longest L"]
    assert peak.met is False
    assert peak.measured == (
        f"35.0 % at L=16K H=32 N=256 of the run's highest rate, {high:.0f} TFLOP/s "
        "(45.0 % at L=16K H=32 N=256 of its own worker's)"
    )
    assert peak.needs == "cutile's time 12.5 % lower at L=16K H=32 N=256"
    elsewhere = {**first, "workers": [worker("synthetic:0", low), worker("b:1", high, "B200")]}
    assert _by_goal(df, elsewhere)[peak.goal].measured == "45.0 % at L=16K H=32 N=256"


@pytest.mark.parametrize("modes", [("eager",), ("graph", "kernels")])
def test_a_target_without_its_mode_is_not_judged(modes: tuple[str, ...]) -> None:
    found = _by_goal(synthetic_table(modes=modes, speedup=2.6))
    judged = {goal: t.met is not None for goal, t in found.items()}
    assert judged["never slower than triton in eager mode"] == ("eager" in modes)
    assert judged["geomean ≥ 2.0x"] == ("graph" in modes)


def test_the_section_marks_each_target() -> None:
    text = targets.section(synthetic_table(speedup=1.4), synthetic_meta(), "triton", "cutile")
    assert text.startswith("## Targets\n")
    assert "| geomean ≥ 2.0x (graph) | 1.400x over 12 points | **missed** |" in text
    assert "| ≥ 1.14x at every point (graph) | 1.400x–1.400x at 12 points" in text
    assert "| ≥ 2.5x at L ≥ 16K with dstate 256 (graph) | no point | — |" in text


def test_a_run_of_part_of_the_default_sweep_says_so() -> None:
    """12 synthetic points, all on the default grid: the section says they are 12 of its 63;
    points off the grid (seqlen 3000), or on it with another headdim, do not count."""
    df = synthetic_table(seqlens=(4096, 16384), dstates=DSTATES, speedup=2.6)
    assert targets.default_sweep_coverage(df) == (12, 63)
    text = targets.section(df, synthetic_meta(), "triton", "cutile")
    assert "This run has 12 of the default sweep's 63 points" in text
    assert "not the NVIDIA H200" not in text
    off = synthetic_table(seqlens=(3000,), dstates=DSTATES, speedup=2.6)
    assert targets.default_sweep_coverage(off) == (0, 63)
    wide = df.assign(point=df["point"].str.replace("_P64_", "_P128_"))
    assert targets.default_sweep_coverage(wide) == (0, 63)
    other = synthetic_table(seqlens=(4096,), gpu="NVIDIA H100 80GB HBM3")
    assert "measured on NVIDIA H100 80GB HBM3, not the NVIDIA H200" in targets.section(
        other, synthetic_meta(gpu="NVIDIA H100 80GB HBM3"), "triton", "cutile"
    )
    all_seqlens = (1024, 2048, 4096, 8192, 16384, 32768, 65536)
    whole = targets.default_sweep_coverage(
        synthetic_table(seqlens=all_seqlens, nheads=(32, 64, 128), dstates=DSTATES)
    )
    assert whole == (63, 63)


def test_a_missed_target_says_how_much_time_has_to_go_and_where_it_goes() -> None:
    def speedup(p: Problem) -> float:
        return 1.1 if (p.seqlen, p.nheads, p.dstate) == (4096, 64, 128) else 1.6

    df = synthetic_table(seqlens=(4096, 16384), dstates=DSTATES, speedup=speedup)
    found = _by_goal(df)
    every = found["≥ 1.14x at every point"]
    assert every.needs == (
        "1 of 12 points short: cutile's time 3.5 % lower, the most at L=4K H=64 N=128"
    )
    assert len(every.points) == 1 and "L4096_H64" in every.points[0]
    long = found["≥ 2.5x at L ≥ 16K with dstate 256"]
    assert long.needs.startswith("2 of 2 points short: cutile's time 36.0 % lower")
    geomean = found["geomean ≥ 2.0x"]
    cut = 100 * (1 - (1.6**11 * 1.1) ** (1 / 12) / 2.0)  # 11 points at 1.6x, one at 1.1x
    assert geomean.needs == f"cutile's time {cut:.1f} % lower at every point (in geometric mean)"
    assert len(geomean.points) == 12
    shares = targets.kernel_shares(df, "cutile", geomean.points)
    assert shares == "compute_out 50 %, fwd_pass_state 45 %, chunk_cumsum 5 %"


def test_met_targets_ask_for_nothing() -> None:
    df = synthetic_table(seqlens=(4096, 16384), dstates=DSTATES, speedup=2.6)
    meta = {**synthetic_meta(), "peaks": {"bf16_tflops": 1.0}}  # any rate is 40 % of that
    found = _by_goal(df, meta)
    assert len(found) == 5  # the five targets
    assert all(t.met and t.needs == "" and t.points == () for t in found.values())
    assert "what meeting it takes" not in targets.section(df, meta, "triton", "cutile")


def test_kernel_shares_name_a_kernel_that_runs_at_some_points_only() -> None:
    df = synthetic_table(speedup=1.4)
    kernels = (df["mode"] == "kernels") & (df["provider"] == "cutile")
    one = kernels & (df["seqlen"] == 1024) & (df["nheads"] == 32) & (df["dstate"] == 64)
    df.loc[one, "kernel_ms"] = json.dumps({"compute_out": 0.6, "segment_scan": 0.4})
    points = tuple(df.loc[kernels, "point"].unique())
    shares = targets.kernel_shares(df, "cutile", points)
    assert shares.startswith("compute_out 50 % (50–60 %)")
    assert "segment_scan 40 % at 1 of 12 points" in shares
    assert targets.kernel_shares(df[df["mode"] != "kernels"], "cutile", points) == (
        "no kernels-mode rows"
    )


def test_the_section_explains_each_missed_target() -> None:
    text = targets.section(synthetic_table(speedup=1.4), synthetic_meta(), "triton", "cutile")
    header = "| missed target | what meeting it takes | cutile's kernels at its points |"
    assert header in text
    assert (
        "| geomean ≥ 2.0x (graph) | cutile's time 30.0 % lower at every point (in geometric "
        "mean) | compute_out 50 %, fwd_pass_state 45 %, chunk_cumsum 5 % |"
    ) in text
