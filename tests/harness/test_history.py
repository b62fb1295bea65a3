"""harness.history on synthetic runs: the fastest baseline across runs, time changes, peak
fractions at the problem's chunk length, and the command's output and exit codes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from harness import history
from harness.problem import Problem, flops
from tests.harness.synthetic import PEAKS, build_run, synthetic_table

GRAPH = "graph"


def _scaled(table: pd.DataFrame, provider: str, factor: float, point: str | None = None):
    """A copy with the provider's graph-mode medians (and CIs) times `factor`, at one point or
    all."""
    table = table.copy()
    rows = (table["provider"] == provider) & (table["mode"] == GRAPH)
    if point is not None:
        rows &= table["point"] == point
    for column in ("median_ms", "ci_low_ms", "ci_high_ms"):
        table.loc[rows, column] *= factor
    return table


def test_against_fastest_takes_each_points_fastest_baseline_of_all_runs() -> None:
    older = synthetic_table(speedup=1.5)
    point = older["point"].iloc[0]
    last = _scaled(older, "triton", 1.3, point)  # a slow baseline pick at one point
    in_run = history.against_fastest(last, [last], "triton", "cutile", GRAPH)
    assert in_run[point] == pytest.approx(1.5 * 1.3)
    across = history.against_fastest(last, [older, last], "triton", "cutile", GRAPH)
    assert across[point] == pytest.approx(1.5)
    assert across.drop(point).to_numpy() == pytest.approx(1.5)


def test_against_fastest_leaves_out_points_the_candidate_did_not_time() -> None:
    table = synthetic_table()
    point = table["point"].iloc[0]
    broken = table.copy()
    broken.loc[(broken["point"] == point) & (broken["provider"] == "cutile"), "status"] = "error"
    result = history.against_fastest(broken, [table, broken], "triton", "cutile", GRAPH)
    assert point not in result.index
    assert len(result) == table["point"].nunique() - 1


def test_above_fastest_is_how_far_the_last_runs_own_times_lie_above_its_best() -> None:
    older = synthetic_table()
    point = older["point"].iloc[0]
    last = _scaled(_scaled(older, "triton", 0.9), "triton", 1.5, point)  # one slow pick
    above = history.above_fastest(last, [older, last], "triton", GRAPH)
    assert above[point] == pytest.approx(0.9 * 1.5)  # the older run's time is the fastest there
    assert above.drop(point).to_numpy() == pytest.approx(1.0)  # elsewhere the last is the best
    line = history._excess(above, last, "triton")
    assert line.startswith("triton's own time in this run against its fastest of all runs: +")
    assert "at most +35.0 %" in line


def test_time_change_is_last_over_previous_per_point() -> None:
    previous = synthetic_table()
    last = _scaled(previous, "cutile", 0.9)
    assert history.time_change(previous, last, "cutile", GRAPH).to_numpy() == pytest.approx(0.9)
    assert history.time_change(previous, last, "triton", GRAPH).to_numpy() == pytest.approx(1.0)


def _configured(table: pd.DataFrame, provider: str, config: dict, point: str | None = None):
    """A copy whose provider rows record `config` as their launch config (tuning column), at one
    point or all."""
    table = table.copy()
    rows = table["provider"] == provider
    if point is not None:
        rows &= table["point"] == point
    table.loc[rows, "tuning"] = json.dumps({"config": config, "chunk_size": 128})
    return table


def test_time_change_by_config_splits_the_points_whose_config_changed() -> None:
    """The unchanged points carry only the drift between the runs; a split that put a changed
    point among them, or dropped one, would hide what the change did."""
    previous = _configured(synthetic_table(), "cutile", {"state_latency": 2})
    point = previous["point"].iloc[0]
    last = _configured(_scaled(previous, "cutile", 0.98), "cutile", {"state_latency": 6}, point)
    last = _scaled(last, "cutile", 0.9 / 0.98, point)
    split = history.time_change_by_config(previous, last, "cutile", GRAPH)
    assert list(split["launch changed"].index) == [point]
    assert split["launch changed"][point] == pytest.approx(0.9)
    assert point not in split["launch unchanged"].index
    assert len(split["launch unchanged"]) == previous["point"].nunique() - 1
    assert split["launch unchanged"].to_numpy() == pytest.approx(0.98)
    triton = history.time_change_by_config(previous, last, "triton", GRAPH)
    assert triton["launch changed"].empty  # Triton ran the point's chunk in both


def test_a_provider_that_ran_another_chunk_length_changed_its_launch() -> None:
    """Triton records no config, only the chunk length chunk_policy=fastest ran (v44 -> v45: 9
    of 63 points flipped); a run that screened nothing records none and ran the point's own."""
    previous = synthetic_table()
    point = previous["point"].iloc[0]
    last = previous.copy()
    flipped = (last["provider"] == "triton") & (last["point"] == point)
    last.loc[flipped, "tuning"] = json.dumps({"chunk_size": 128})
    unscreened = (last["provider"] == "triton") & (last["point"] != point)
    last.loc[unscreened, "tuning"] = json.dumps({"chunk_size": None})
    split = history.time_change_by_config(previous, last, "triton", GRAPH)
    assert list(split["launch changed"].index) == [point]
    assert len(split["launch unchanged"]) == previous["point"].nunique() - 1


def test_a_knob_only_the_later_run_records_is_no_config_change() -> None:
    """A config field added between two runs (state_store_tma after v24) is absent from the
    older rows; counting it as a change would put every point among the changed ones."""
    previous = _configured(synthetic_table(), "cutile", {"state_latency": 2})
    last = _configured(previous, "cutile", {"state_latency": 2, "state_store_tma": 1})
    split = history.time_change_by_config(previous, last, "cutile", GRAPH)
    assert split["launch changed"].empty
    assert len(split["launch unchanged"]) == previous["point"].nunique()
    assert not history.same_launch({"state_latency": 2}, {"state_latency": 6, "state_store_tma": 1})


def test_a_knob_added_away_from_its_default_is_a_config_change() -> None:
    """v44's change-76 points set state_cb=1, a knob v43 does not record; reading them as
    unchanged put change 76's effect among the nodes' drift."""
    previous = _configured(synthetic_table(), "cutile", {"state_latency": 2})
    point = previous["point"].iloc[0]
    last = _configured(previous, "cutile", {"state_latency": 2, "state_cb": 0})
    last = _configured(last, "cutile", {"state_latency": 2, "state_cb": 1}, point)
    split = history.time_change_by_config(previous, last, "cutile", GRAPH)
    assert list(split["launch changed"].index) == [point]
    assert len(split["launch unchanged"]) == previous["point"].nunique() - 1
    assert not history.same_launch({}, {"state_cb": 1}, {"state_cb": 0})
    assert history.same_launch({}, {"state_cb": 0}, {"state_cb": 0})
    assert history.same_launch({}, {"unknown_knob": 3}, {"state_cb": 0})


def test_gpu_uuids_come_from_the_workers_else_the_environment() -> None:
    def env(uuid: str) -> dict:
        return {"gpu": {"name": "NVIDIA H200", "uuid": uuid}}

    two_workers = {"env": env("a"), "workers": [{"env": env("b")}, {"env": env("c")}]}
    assert history.gpu_uuids(two_workers) == {"b", "c"}
    assert history.gpu_uuids({"env": env("a")}) == {"a"}
    assert history.gpu_uuids({"env": {"gpu": {"name": "NVIDIA H200"}}}) == set()


def test_the_command_splits_time_by_config_and_names_runs_on_other_gpus(capsys, tmp_path) -> None:
    old = build_run(tmp_path, run_id="old")
    new = build_run(tmp_path, run_id="new")
    for run, uuid, factor in ((old, "GPU-a", 1.0), (new, "GPU-b", 0.97)):
        table = _scaled(pd.read_parquet(run / "results.parquet"), "cutile", factor)
        table = _configured(table, "cutile", {"state_latency": 2})
        if run == new:
            point = table["point"].iloc[0]
            table = _configured(table, "cutile", {"state_latency": 6}, point)
        table.to_parquet(run / "results.parquet")
        meta = json.loads((run / "meta.json").read_text())
        meta["env"]["gpu"]["uuid"] = uuid
        (run / "meta.json").write_text(json.dumps(meta))
    assert history.main([str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "share no GPU (GPU-a against GPU-b)" in out
    assert "| cutile, launch unchanged | 11 | -3.0 % (" in out
    assert "| cutile, launch changed | 1 |" in out
    assert "| triton, launch" not in out  # no point's changed


def _screened(table: pd.DataFrame, provider: str, screens: dict) -> pd.DataFrame:
    """A copy whose provider rows carry `screens` (chunk length → ms, or an error) as their
    chunk screening, the same at every point."""
    table = table.copy()
    tuning = json.dumps({"chunk_policy": "fastest", "chunk_screen_ms": screens})
    table.loc[table["provider"] == provider, "tuning"] = tuning
    return table


def test_screen_change_is_last_over_previous_per_chunk_length() -> None:
    """The length not run is timed only in the screening, so its change must show per length;
    a length whose screening failed in either run has no ratio."""
    previous = _screened(synthetic_table(), "cutile", {"256": 0.5, "128": 0.4, "64": 0.3})
    last = _screened(synthetic_table(), "cutile", {"256": 0.55, "128": 0.4, "64": "error"})
    point = last["point"].iloc[0]
    rows = (last["provider"] == "cutile") & (last["point"] == point)
    last.loc[rows, "tuning"] = json.dumps({"chunk_screen_ms": {"256": 0.45, "128": 0.4}})
    changes = history.screen_change(previous, last, "cutile", GRAPH)
    assert list(changes) == ["128", "256"]
    assert changes["128"].to_numpy() == pytest.approx(1.0)
    assert changes["256"][point] == pytest.approx(0.9)
    assert changes["256"].drop(point).to_numpy() == pytest.approx(1.1)
    assert history.screen_change(previous, last, "triton", GRAPH) == {}


def test_best_fraction_of_peak_counts_the_problems_flops() -> None:
    """FLOPs of the problem as posed, whatever the rows' own rates say: a provider that ran a
    shorter chunk recorded fewer FLOPs in tflops and frac_peak_flops, which must not count."""
    table = synthetic_table()
    rows = (table["provider"] == "cutile") & (table["mode"] == GRAPH)
    table.loc[rows, ["tflops", "frac_peak_flops"]] *= 0.5  # as if counted at a shorter chunk
    fraction, point = history.best_fraction_of_peak(table, {"peaks": PEAKS}, "cutile", GRAPH)
    best = table[rows & (table["point"] == point)].iloc[0]
    problem = Problem(
        seqlen=int(best["seqlen"]), nheads=int(best["nheads"]), dstate=int(best["dstate"])
    )
    expected = flops(problem) / (best["median_ms"] * 1e-3) / 1e12 / PEAKS["bf16_tflops"]
    assert fraction == pytest.approx(expected)
    assert fraction == pytest.approx(2 * table.loc[rows, "frac_peak_flops"].max())


def test_best_fraction_of_peak_divides_each_row_by_its_workers_rate() -> None:
    """A run resumed on a node with a higher measured rate: the best point's rows, timed there,
    count against that node's rate, not the first node's in meta["peaks"]."""
    table = synthetic_table()
    _, point = history.best_fraction_of_peak(table, {"peaks": PEAKS}, "cutile", GRAPH)
    table["worker"] = table["worker"].where(table["point"] != point, "node2:1")
    faster = {**PEAKS, "bf16_tflops": 2 * PEAKS["bf16_tflops"]}
    meta = {"peaks": PEAKS, "workers": [{"worker": "node2:1", "peaks": faster}]}
    fraction, best = history.best_fraction_of_peak(table, meta, "cutile", GRAPH)
    rows = table[(table["provider"] == "cutile") & (table["mode"] == GRAPH)].set_index("point")
    expected = {
        p: flops(Problem(seqlen=int(r["seqlen"]), nheads=int(r["nheads"]), dstate=int(r["dstate"])))
        / (r["median_ms"] * 1e-3)
        / 1e12
        / (faster if p == point else PEAKS)["bf16_tflops"]
        for p, r in rows.iterrows()
    }
    assert fraction == pytest.approx(max(expected.values()))
    assert best == max(expected, key=expected.get)


def test_best_fraction_of_peak_is_nan_without_a_measured_rate() -> None:
    fraction, point = history.best_fraction_of_peak(synthetic_table(), {}, "cutile", GRAPH)
    assert math.isnan(fraction) and point == ""


def test_the_command_prints_every_run_and_the_last_ones_comparisons(capsys, tmp_path) -> None:
    old = build_run(tmp_path, run_id="old", speedup=1.4)
    new = build_run(tmp_path, run_id="new", speedup=1.6)
    assert history.main([str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "| `old` |" in out and "| `new` |" in out
    assert "1.400x" in out and "1.600x" in out
    assert "against the fastest triton of all 2" in out
    assert "triton's own time in this run against its fastest of all runs: +0.0 %" in out
    assert "Time against `old`" in out
    assert "share no GPU" not in out  # neither run records a GPU uuid
    assert "launch changed" not in out  # no point's launch changed
    assert "Chunk screening" not in out  # neither run screened chunk lengths


def test_the_command_prints_the_chunk_screening_where_both_runs_have_it(capsys, tmp_path) -> None:
    screens = {"256": 0.5, "128": 0.4}
    old = build_run(tmp_path, run_id="old")
    new = build_run(tmp_path, run_id="new")
    for run, factor in ((old, 1.0), (new, 1.2)):
        table = pd.read_parquet(run / "results.parquet")
        scaled = {chunk: ms * factor for chunk, ms in screens.items()}
        _screened(table, "cutile", scaled).to_parquet(run / "results.parquet")
    assert history.main([str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "## Chunk screening against `old`" in out
    assert "| cutile | 128 | 12 | +20.0 % (" in out and "| cutile | 256 | 12 | +20.0 % (" in out
    assert "| triton |" not in out.split("## Chunk screening")[1]


def test_a_run_holding_fewer_points_than_its_sweep_says_so(capsys, tmp_path) -> None:
    axes = {"sweep.nheads": [32, 64], "sweep.dstate": [64, 128]}
    full = build_run(tmp_path, run_id="full", settings={"sweep.seqlen": [1024, 4096, 16384]} | axes)
    cut = build_run(
        tmp_path, run_id="cut", settings={"sweep.seqlen": [1024, 4096, 16384, 65536]} | axes
    )
    assert history.main([str(full), str(cut)]) == 0
    out = capsys.readouterr().out
    assert "| `full` | 0123456789ab | 12/12 |" in out
    assert "| `cut` | 0123456789ab | 12/12 of 16 |" in out


def _unusable(capsys, argv: list[str], *words: str) -> None:
    assert history.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    for word in words:
        assert word in err


def test_runs_on_different_gpu_models_are_refused(capsys, tmp_path: Path) -> None:
    h200 = build_run(tmp_path, run_id="a")
    h100 = build_run(tmp_path, run_id="b", gpu="NVIDIA H100 80GB HBM3")
    _unusable(capsys, [str(h200), str(h100)], "different GPU models", "H100", "H200")


def test_a_missing_run_or_mode_is_reported(capsys, tmp_path: Path) -> None:
    _unusable(capsys, [str(tmp_path / "nope")], "no such file")
    run = build_run(tmp_path, run_id="eager-only", modes=("eager",))
    _unusable(capsys, [str(run)], "no rows in graph mode")


def test_runs_measured_with_other_settings_are_named(capsys, tmp_path) -> None:
    """The fastest Triton may come from a run that autotuned otherwise: the reader must know."""
    runs = [
        build_run(tmp_path, run_id="a", settings={"triton_autotune": "per_point"}),
        build_run(tmp_path, run_id="b", settings={"triton_autotune": "per_point"}),
        build_run(tmp_path, run_id="c", settings={"chunk_policy": "fastest"}),
        build_run(tmp_path, run_id="d"),
    ]
    assert history.main([str(run) for run in runs]) == 0
    out = capsys.readouterr().out
    assert "## Settings" in out and "The last run's: tune='off', triton_autotune='once'" in out
    assert "- `a`, `b`: triton_autotune='per_point'" in out
    assert "- `c`: chunk_policy='fastest'" in out
    assert history.main([str(runs[3]), str(runs[3])]) == 0
    assert "## Settings" not in capsys.readouterr().out


def test_the_series_itself_is_checked(capsys, tmp_path: Path) -> None:
    """Runs out of time order, one run twice, a run of another sweep: each named in a note."""
    axes = {"sweep.nheads": [32, 64], "sweep.dstate": [64, 128]}
    old = build_run(tmp_path, run_id="old", settings={"sweep.seqlen": [1024, 4096, 16384]} | axes)
    new = build_run(tmp_path, run_id="new", settings={"sweep.seqlen": [1024, 4096, 16384]} | axes)
    table = pd.read_parquet(new / "results.parquet")
    table["timestamp"] = "2026-11-30T12:00:00+00:00"  # a day after `old`
    table.to_parquet(new / "results.parquet")
    smoke = build_run(tmp_path, run_id="smoke", settings={"sweep.seqlen": [1024]} | axes)
    assert history.main([str(old), str(new)]) == 0
    assert "Note:" not in capsys.readouterr().out
    assert history.main([str(new), str(old), str(old)]) == 0
    out = capsys.readouterr().out
    assert "Note: `old` was first measured before `new`, listed before it" in out
    assert "Note: `old` is listed twice." in out
    assert history.main([str(smoke), str(new)]) == 0
    out = capsys.readouterr().out
    assert "Note: `smoke` is a run of another sweep (4 points, 4 of them in the last run's 12)" in (
        out
    )


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--baseline", "results/nvidia-h200/x"], ["not a provider: 'results/nvidia-h200/x'"]),
        (["--candidate", "triton"], ["baseline and candidate are both 'triton'"]),
        (["--baseline", "reference"], ["no rows of provider 'reference'"]),
    ],
)
def test_providers_that_are_not_in_the_run_are_refused(capsys, tmp_path, flags, words) -> None:
    run = build_run(tmp_path, run_id="a")
    _unusable(capsys, [*flags, str(run)], *words, "cutile, triton")
