"""Speedup and per-kernel tables on synthetic runs with known answers."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from harness import analysis
from tests.harness.synthetic import CUTILE_KERNELS, TRITON_KERNELS, synthetic_table


def test_speedup_and_interval_follow_the_recorded_cis() -> None:
    table = analysis.speedups(synthetic_table(speedup=1.5, ci_rel=0.02))
    assert len(table) == 12 and table["timed"].all()
    assert table["speedup"].to_numpy() == pytest.approx(1.5)
    # Extreme ends: baseline low over candidate high, and the reverse.
    assert table["speedup_low"].to_numpy() == pytest.approx(1.5 * 0.98 / 1.02)
    assert table["speedup_high"].to_numpy() == pytest.approx(1.5 * 1.02 / 0.98)
    assert list(table[["baseline", "candidate", "mode"]].iloc[0]) == ["triton", "cutile", "graph"]


def test_table_is_sorted_by_shape_and_keeps_shape_columns() -> None:
    table = analysis.speedups(synthetic_table())
    assert set(analysis.POINT_COLUMNS) <= set(table.columns)
    keys = list(zip(table["seqlen"], table["nheads"], table["dstate"], strict=True))
    assert keys == sorted(keys)


def test_modes_are_separate() -> None:
    df = synthetic_table(speedup=1.5)
    graph = analysis.speedups(df, mode="graph")
    eager = analysis.speedups(df, mode="eager")
    assert (eager["speedup"] < graph["speedup"]).all()  # eager adds the same host time to both


def test_only_ok_rows_are_timed() -> None:
    df = synthetic_table()
    point = df["point"].iloc[0]
    bad = (df["point"] == point) & (df["provider"] == "cutile")
    df.loc[bad, ["status", "error"]] = ["wrong", "rel_err 0.5 > 0.01"]
    table = analysis.speedups(df)
    row = table[table["point"] == point].iloc[0]
    assert not row["timed"] and math.isnan(row["speedup"]) and math.isnan(row["speedup_low"])
    assert (row["baseline_status"], row["candidate_status"]) == ("ok", "wrong")
    assert row["candidate_error"] == "rel_err 0.5 > 0.01"
    assert table["timed"].sum() == len(table) - 1


def test_a_provider_without_rows_reads_missing() -> None:
    df = synthetic_table()
    table = analysis.speedups(df[df["provider"] == "triton"])
    assert (table["candidate_status"] == "missing").all() and not table["timed"].any()


def test_a_repeated_row_counts_once_the_latest_wins() -> None:
    df = synthetic_table(speedup=1.5, modes=("graph",))
    again = df[df["provider"] == "cutile"].copy()
    again["median_ms"] *= 1.5  # re-measured later at parity
    again["timestamp"] = "2026-11-30T00:00:00+00:00"
    table = analysis.speedups(pd.concat([again, df]))
    assert len(table) == 12 and table["speedup"].to_numpy() == pytest.approx(1.0)


def test_summary_geomean_and_range() -> None:
    table = analysis.speedups(synthetic_table(speedup=lambda p: 2.0 if p.dstate == 64 else 0.5))
    summary = analysis.summarize(table)
    assert summary["timed"] == summary["points"] == 12
    assert summary["geomean"] == pytest.approx(1.0)
    assert (summary["min"], summary["max"]) == pytest.approx((0.5, 2.0))


def test_by_axis_sums_up_each_value_of_the_axis() -> None:
    def speedup(p) -> float:
        return {1024: 1.2, 4096: 1.5, 16384: 2.0}[p.seqlen] * (1.1 if p.dstate == 64 else 1)

    df = synthetic_table(speedup=speedup)
    point = df[df["seqlen"] == 4096]["point"].iloc[0]
    df.loc[(df["point"] == point) & (df["provider"] == "cutile"), "status"] = "error"
    table = analysis.by_axis(analysis.speedups(df), "seqlen")
    assert list(table["seqlen"]) == [1024, 4096, 16384]
    assert list(table["points"]) == [4, 4, 4] and list(table["timed"]) == [4, 3, 4]
    assert table["min"].to_numpy() == pytest.approx([1.2, 1.5, 2.0])
    assert table["max"].to_numpy() == pytest.approx([1.32, 1.65, 2.2])
    assert table["geomean"].iloc[0] == pytest.approx(1.2 * 1.1**0.5)


def test_summary_of_nothing_timed_is_nan() -> None:
    df = synthetic_table()
    df["status"] = "error"
    summary = analysis.summarize(analysis.speedups(df))
    assert summary["timed"] == 0 and math.isnan(summary["geomean"]) and math.isnan(summary["min"])


def test_kernel_breakdown_keeps_launch_order_and_shares() -> None:
    df = synthetic_table()
    point = df["point"].iloc[0]
    df.loc[(df["point"] == point) & (df["provider"] == "triton"), "status"] = "error"
    kb = analysis.kernel_breakdown(df)
    assert set(kb["provider"]) == {"triton", "cutile"}
    first = kb[(kb["point"] == kb["point"].iloc[0]) & (kb["provider"] == "cutile")]
    assert list(first["kernel"]) == list(CUTILE_KERNELS)
    assert first["share"].to_numpy() == pytest.approx(list(CUTILE_KERNELS.values()))
    sums = kb.groupby(["point", "provider"])["share"].sum()
    assert sums.to_numpy() == pytest.approx(1.0)
    # The failed row contributes nothing; the other 11 points keep all of Triton's kernels.
    assert len(kb[kb["provider"] == "triton"]) == 11 * len(TRITON_KERNELS)
    row = df[(df["mode"] == "kernels") & (df["provider"] == "cutile")].iloc[0]
    assert first["kernels_total_ms"].iloc[0] == pytest.approx(
        sum(json.loads(row.kernel_ms).values())
    )


def test_kernel_breakdown_without_kernels_mode_is_empty() -> None:
    kb = analysis.kernel_breakdown(synthetic_table(modes=("graph",)))
    assert kb.empty and "kernel" in kb.columns


def test_varying_columns() -> None:
    df = synthetic_table(dstates=(128,))
    assert analysis.varying_columns(df) == ["seqlen", "nheads"]


def test_chunks_run_reads_the_choice_from_the_tuning_column() -> None:
    table = synthetic_table()
    picked = table["provider"] == "cutile"
    table.loc[picked, "tuning"] = json.dumps({"chunk_policy": "fastest", "chunk_size": 128})
    chunks = analysis.chunks_run(table)
    assert len(chunks) == table["point"].nunique() * 2
    cutile = chunks[chunks["provider"] == "cutile"]
    assert set(cutile["chunk_run"]) == {128} and set(cutile["chunk_policy"]) == {"fastest"}
    triton = chunks[chunks["provider"] == "triton"]
    assert (triton["chunk_run"] == triton["chunk_size"]).all()
    assert set(triton["chunk_policy"]) == {"fixed"}


def test_autotune_draws_pair_the_two_tunings_of_each_chunk_length() -> None:
    table = synthetic_table()
    assert analysis.autotune_draws(table).empty  # no run of triton_autotune=twice
    triton = table["provider"] == "triton"
    first = table["point"] == table["point"].iloc[0]
    screened = {"256": 0.05, "256 retuned": 0.08, "128": 0.06, "128 retuned": "RuntimeError: x"}
    table.loc[triton, "tuning"] = json.dumps(
        {"autotune_screen_ms": screened, "autotune_kept": "256"}
    )
    table.loc[triton & first, "status"] = "wrong"  # not timed: left out
    draws = analysis.autotune_draws(table)
    assert len(draws) == 2 * (table["point"].nunique() - 1)
    assert set(draws["provider"]) == {"triton"} and set(draws["kept"]) == {"256"}
    at_256 = draws[draws["chunk"] == "256"]
    assert at_256["spread"].to_numpy() == pytest.approx(0.6)  # 0.08 / 0.05 - 1
    failed = draws[draws["chunk"] == "128"]
    assert failed["first_ms"].to_numpy() == pytest.approx(0.06)
    assert failed["retuned_ms"].isna().all() and failed["spread"].isna().all()


def test_gpu_clocks_parse_readings_and_tell_held_from_idle_or_set() -> None:
    table = synthetic_table(modes=("graph",))
    points = sorted(table["point"].unique())
    readings = {
        points[0]: {"clocks.sm": "1980", "temperature.gpu": "40", "power.draw": "520.5",
                    "clocks_throttle_reasons.active": "0x0000000000000001"},  # idle only
        points[1]: {"clocks.sm": "1755", "temperature.gpu": "[N/A]", "power.draw": "700.0",
                    "clocks_throttle_reasons.active": "0x0000000000000004"},  # power cap
        points[2]: {"clocks.sm": "1500", "temperature.gpu": "38", "power.draw": "400.0",
                    "clocks_throttle_reasons.active": "0x0000000000000002"},  # clocks set
    }  # fmt: skip
    table["gpu_clocks"] = [
        json.dumps(readings[p]) if p in readings else None for p in table["point"]
    ]
    read = analysis.gpu_clocks(table).set_index("point")
    assert len(read) == 3  # one reading per point and mode, shared by both providers
    assert read.loc[points[0], "sm_mhz"] == 1980 and not read.loc[points[0], "held"]
    assert read.loc[points[1], "reasons"] == 4 and read.loc[points[1], "held"]
    assert math.isnan(read.loc[points[1], "temperature_c"])
    assert read.loc[points[2], "reasons"] == 2 and not read.loc[points[2], "held"]


def test_gpu_clocks_of_a_run_without_them_are_empty() -> None:
    assert analysis.gpu_clocks(synthetic_table()).empty
    assert analysis.gpu_clocks(synthetic_table().drop(columns="gpu_clocks")).empty
