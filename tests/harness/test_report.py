"""The report command on synthetic run directories: figures, report.md, errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from harness import records, report
from tests.harness.synthetic import build_run, synthetic_meta, synthetic_table, write_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FIGURES = {
    "speedup_vs_seqlen_graph.png",
    "speedup_vs_seqlen_eager.png",
    "speedup_vs_seqlen_kernels.png",
    "speedup_heatmap_graph.png",
    "times_graph.png",
    "roofline_graph.png",
    "kernel_breakdown.png",
}


def test_report_writes_figures_and_markdown_into_the_run(tmp_path: Path) -> None:
    run = build_run(tmp_path)
    assert report.main([str(run)]) == 0
    for name in FIGURES:
        assert (run / name).read_bytes()[:8] == PNG_MAGIC, name
    text = (run / "report.md").read_text()
    for heading in (
        "## Environment",
        "## Speedup",
        "## Figures",
        "## Points (graph mode)",
        "## Failures",
        "## Wide confidence intervals",
    ):
        assert heading in text
    assert "NVIDIA H200" in text and "580.159.04" in text and "0123456789abcdef" in text
    assert "| graph | 12 | 12 | 1.400x | 1.400x | 1.400x | 0 |" in text
    axes = text.split("## Speedup by axis (graph mode)")[1].split("## Points")[0]
    assert "| 16384 | 4/4 | 1.400x | 1.400x | 1.400x |" in axes
    assert "| 64 | 6/6 | 1.400x |" in axes and "| nheads |" in axes and "| dstate |" in axes
    for name in FIGURES:
        assert f"]({name})" in text


def test_report_lists_failures_and_wide_cis(tmp_path: Path) -> None:
    table = synthetic_table()
    point = table["point"].iloc[0]
    broken = (table["point"] == point) & (table["provider"] == "cutile")
    table.loc[broken, ["status", "error"]] = ["error", "CompileError: tile too large\ntrace..."]
    noisy = (table["point"] == table["point"].iloc[-1]) & (table["provider"] == "triton")
    table.loc[noisy, ["ci_wide", "ci_rel"]] = [True, 0.083]
    run = write_run(tmp_path / "run", table, synthetic_meta())
    assert report.main([str(run), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "report.md").read_text()
    failures = text.split("## Failures")[1].split("##")[0]
    assert f"| {point} | cutile | graph | error | CompileError: tile too large |" in failures
    assert "trace..." not in failures
    assert "8.3 %" in text.split("## Wide confidence intervals")[1]
    assert "ok / error" in text
    assert not (run / "report.md").exists()


def test_report_lists_the_autotuning_draws_that_landed_apart(tmp_path: Path) -> None:
    table = synthetic_table()
    assert report.autotune_section(table) is None
    triton = table["provider"] == "triton"
    first = table["point"] == table["point"].iloc[0]
    close = {"256": 0.050, "256 retuned": 0.051}  # 2 % apart: counted, not listed
    table.loc[triton, "tuning"] = json.dumps({"autotune_screen_ms": close, "autotune_kept": "256"})
    apart = {"256": 0.05, "256 retuned": 0.08}
    table.loc[triton & first, "tuning"] = json.dumps(
        {"autotune_screen_ms": apart, "autotune_kept": "256"}
    )
    run = write_run(tmp_path / "run", table, synthetic_meta())
    assert report.main([str(run)]) == 0
    section = (run / "report.md").read_text().split("## Autotuning draws")[1].split("##")[0]
    points = table["point"].nunique()
    assert f"over {points} (point, chunk) pairs and by more than 5 % at 1;" in section
    assert f"timed at 0 of {points} points" in section
    point = table["point"].iloc[0]
    assert f"| {point} | triton | 256 | 0.05 | 0.08 | +60.0 % | 256 |" in section
    assert section.count(" | triton | ") == 1


def test_report_counts_the_chunk_lengths_run_only_when_they_were_chosen(tmp_path: Path) -> None:
    table = synthetic_table()
    assert report.chunks_section(table) is None
    cutile = table["provider"] == "cutile"
    first = table["point"] == table["point"].iloc[0]
    table.loc[cutile, "tuning"] = json.dumps({"chunk_policy": "fastest", "chunk_size": 256})
    table.loc[cutile & first, "tuning"] = json.dumps({"chunk_policy": "fastest", "chunk_size": 128})
    run = write_run(tmp_path / "run", table, synthetic_meta())
    assert report.main([str(run)]) == 0
    section = (run / "report.md").read_text().split("## Chunk lengths run")[1].split("##")[0]
    points = table["point"].nunique()
    assert "| cutile | 256 | 128 | 1 |" in section
    assert f"| cutile | 256 | 256 | {points - 1} |" in section
    assert f"| triton | 256 | 256 | {points} |" in section


def test_report_without_kernels_mode_skips_the_breakdown(tmp_path: Path) -> None:
    run = build_run(tmp_path, modes=("graph",))
    written = report.write_report(*records.load_run(run), tmp_path / "out")
    names = {p.name for p in written}
    assert "kernel_breakdown.png" not in names and "speedup_heatmap_graph.png" in names


def test_report_on_a_missing_run_says_so(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert report.main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("report: cannot load") and "Traceback" not in err


def test_report_refuses_a_provider_the_run_does_not_have(tmp_path: Path, capsys) -> None:
    """A run folder passed as --baseline (the gate's flag names) must not overwrite report.md
    with a report of nothing timed."""
    run = build_run(tmp_path, run_id="a")
    assert report.main([str(run), "--baseline", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"not a provider: '{run}'" in err and "this run has cutile, triton" in err
    assert not (run / "report.md").exists()


def test_report_of_a_run_of_one_provider(tmp_path: Path) -> None:
    """providers=triton measures one side: its report has times, no speedups, and no refusal."""
    run = build_run(tmp_path, run_id="triton-only")
    table = pd.read_parquet(run / "results.parquet")
    table[table["provider"] == "triton"].to_parquet(run / "results.parquet")
    assert report.main([str(run)]) == 0
    assert (run / "report.md").exists()


def test_latest_run_skips_baselines(tmp_path: Path) -> None:
    older = build_run(tmp_path, run_id="older")
    newer = build_run(tmp_path, run_id="newer")
    baseline = write_run(
        tmp_path / "baselines" / "nvidia-h200", synthetic_table(), synthetic_meta()
    )
    os.utime(older / "meta.json", (1, 1))
    os.utime(older / "results.parquet", (1, 1))
    for f in baseline.iterdir():  # the newest of all, yet not a run of its own
        os.utime(f, (2**31, 2**31))
    assert report.latest_run(tmp_path) == newer
    with pytest.raises(FileNotFoundError):
        report.latest_run(tmp_path / "empty")


def test_latest_run_goes_by_when_a_run_was_created_not_by_its_files(tmp_path: Path) -> None:
    """In a fresh clone every file carries the checkout's time, in no useful order: the newest
    run is the one its meta.json says was created last. A run without a readable meta.json
    competes by its files' time."""
    meta = {**synthetic_meta("a"), "created": "2026-12-04T21:00:00+00:00"}
    created_last = write_run(tmp_path / "nvidia-h200" / "a", synthetic_table(), meta)
    touched_last = write_run(tmp_path / "nvidia-h200" / "b", synthetic_table(), synthetic_meta("b"))
    for f in created_last.iterdir():
        os.utime(f, (1, 1))
    for f in touched_last.iterdir():  # files from 2038, a run created on 2026-11-29
        os.utime(f, (2**31, 2**31))
    assert report.latest_run(tmp_path) == created_last
    (created_last / "meta.json").write_text("{torn")
    os.utime(created_last / "meta.json", (1, 1))  # its files' time, 1970, against 2026-11-29
    assert report.latest_run(tmp_path) == touched_last


def test_latest_run_passes_over_a_run_cut_short(tmp_path: Path) -> None:
    """A run resumed later (a time limit, a lost node) is the newest while it is partial: the
    default is then the newest complete run, and the newest partial one only when none is
    complete."""
    axes = {"sweep.seqlen": [1024, 4096, 16384], "sweep.nheads": [32, 64]}
    axes |= {"sweep.dstate": [64, 128], "providers.names": ["cutile", "triton"]}
    runs = {}
    for name, created in (("full", "21:00"), ("cut", "22:00")):
        rows = synthetic_table(run_id=name)
        if name == "cut":
            rows = rows[rows["point"] != rows["point"].iloc[-1]]
        meta = {**synthetic_meta(name, settings=axes), "created": f"2026-12-05T{created}:00+00:00"}
        runs[name] = write_run(tmp_path / "nvidia-h200" / name, rows, meta)
    assert report.latest_run(tmp_path) == runs["full"]
    (runs["full"] / "meta.json").write_text("{torn")  # unreadable: not known to be complete
    assert report.latest_run(tmp_path) == runs["cut"]


def test_report_on_a_run_with_nothing_timed(tmp_path: Path) -> None:
    table = synthetic_table(modes=("graph",))
    table.loc[table["provider"] == "cutile", ["status", "error"]] = ["unsupported", "no sm_90"]
    run = write_run(tmp_path / "run", table, synthetic_meta())
    assert report.main([str(run)]) == 0
    assert (run / "speedup_heatmap_graph.png").read_bytes()[:8] == PNG_MAGIC
    text = (run / "report.md").read_text()
    assert "| graph | 12 | 0 | — | — | — | 0 |" in text
    assert text.count("| unsupported | no sm_90 |") == 12


def test_report_summarises_the_gpu_clocks_read_after_timing(tmp_path: Path) -> None:
    table = synthetic_table(modes=("graph",))
    sm = {p: 1980 - 5 * i for i, p in enumerate(sorted(table["point"].unique()))}
    table["gpu_clocks"] = [
        json.dumps({"clocks.sm": str(sm[p]), "temperature.gpu": "41", "power.draw": "610.2",
                    "clocks_throttle_reasons.active": "0x0000000000000000"})
        for p in table["point"]
    ]  # fmt: skip
    run = write_run(tmp_path / "run", table, synthetic_meta())
    assert report.main([str(run)]) == 0
    text = (run / "report.md").read_text()
    low, high = min(sm.values()), max(sm.values())
    assert f"| graph | {len(sm)} | {low} / " in text and f" / {high} | 41 | 610 | 0 | 0 |" in text
    assert "below 95 %" not in text  # 1980 down to 1925: within 5 %
    slowest, second = sorted(sm, key=lambda p: sm[p])[:2]
    table["gpu_clocks"] = [
        json.dumps({"clocks.sm": "1755" if p == slowest else "1980", "power.draw": "688.6",
                    "clocks_throttle_reasons.active": "0x0000000000000004"})
        for p in table["point"]
    ]  # fmt: skip
    table["timings"] = [3 if p == slowest else 2 if p == second else 1 for p in table["point"]]
    capped = write_run(tmp_path / "capped", table, synthetic_meta())
    report.main([str(capped)])
    text = (capped / "report.md").read_text()
    assert f" | 689 | {len(sm)} | 2 |" in text  # all capped, two points re-timed
    assert f"| graph | `{slowest}` | 1755 | 689 | 0x4 |" in text
    assert text.count("| 1980 | 689 |") == 0  # only the slow reading is listed
    table["gpu_clocks"] = [
        json.dumps({"clocks.sm": "1500" if p == slowest else "1980", "power.draw": "600",
                    "clocks_throttle_reasons.active": "[N/A]"})
        for p in table["point"]
    ]  # fmt: skip
    unknown = write_run(tmp_path / "unknown", table, synthetic_meta())
    assert report.main([str(unknown)]) == 0  # a reading without its reasons is listed as such
    assert f"| graph | `{slowest}` | 1500 | 600 | — |" in (unknown / "report.md").read_text()
    plain = write_run(tmp_path / "plain", synthetic_table(), synthetic_meta())
    report.main([str(plain)])
    assert "Not recorded" in (plain / "report.md").read_text()


def test_report_names_the_points_a_run_cut_short_did_not_measure(tmp_path: Path) -> None:
    """The sweep and providers in the meta give the planned points; a point one provider lacks
    counts as not measured, and a full run is said to be full."""
    axes = {"sweep.seqlen": [1024, 4096, 16384], "sweep.nheads": [32, 64]}
    axes |= {"sweep.dstate": [64, 128], "providers.names": ["cutile", "triton"]}
    table = synthetic_table()
    last = table["point"].iloc[-1]
    cut = table[~((table["point"] == last) & (table["provider"] == "cutile"))]
    for name, rows, expected in (("cut", cut, 11), ("full", table, 12)):
        run = write_run(tmp_path / name, rows, synthetic_meta(settings=axes))
        assert report.main([str(run)]) == 0
        text = (run / "report.md").read_text()
        coverage = text.split("## Coverage")[1].split("##")[0]
        assert f"{expected} of the sweep's 12 points measured by every provider" in coverage
        assert (f"- `{last}`" in coverage) == (name == "cut")
        assert ("Partial run" in coverage) == (name == "cut")
    plain = write_run(tmp_path / "plain", table, synthetic_meta())
    assert report.main([str(plain)]) == 0
    assert "## Coverage" not in (plain / "report.md").read_text()


def test_a_worker_left_running_before_a_resume_of_its_shard_reads_as_killed() -> None:
    """A killed worker's record still says `running`; once a later worker of the same shard, or
    of another shard count (a resume may shard anew), has started, the report says it was killed.
    The last one of a shard may really be running."""

    def worker(name: str, index: int, started: str, state: str) -> dict:
        shard = {"index": index, "count": 2}
        return {"worker": name, "shard": shard, "started": started, "state": state, "measured": 3}

    first = worker("vm:1", 0, "2026-11-30T16:01:00+00:00", "running")
    other_shard = worker("vm:2", 1, "2026-11-30T16:01:00+00:00", "running")
    resume = worker("vm:3", 0, "2026-11-30T17:03:10+00:00", "done")
    workers = [first, other_shard, resume]
    assert report.worker_state(first, workers) == "killed (no end recorded)"
    assert report.worker_state(other_shard, workers) == "running"
    assert report.worker_state(resume, workers) == "done"
    table = report.workers_table(workers)
    assert table.count("killed (no end recorded)") == 1 and "| done | 3 |" in table
    unsharded = {**resume, "worker": "vm:4", "shard": {"index": 0, "count": 1}}
    assert report.worker_state(other_shard, [*workers, unsharded]) == "killed (no end recorded)"


def test_the_workers_table_says_what_each_prepare_step_compiled() -> None:
    """The sweep compiles cuTile's launches before its first point; a failed or slow prepare
    explains a worker's first points, so each worker's row says what it did."""
    done = {"specialisations": 94, "compiled": 94, "failed": 0, "workers": 16, "seconds": 41.4}
    assert report.prepared_text({"cutile": done}) == "cutile: 94 of 94 in 41 s"
    assert report.prepared_text({"cutile": {**done, "compiled": 92, "failed": 2}}) == (
        "cutile: 92 of 94 in 41 s, 2 failed"
    )
    assert report.prepared_text({"cutile": {"error": "RuntimeError: no tileiras\nmore"}}) == (
        "cutile: failed (RuntimeError: no tileiras)"
    )
    assert report.prepared_text({}) == ""
    worker = {"worker": "vm:1", "state": "done", "measured": 63, "prepared": {"cutile": done}}
    assert "| done | 63 |  | cutile: 94 of 94 in 41 s |" in report.workers_table([worker])


def test_the_workers_table_gives_the_rates_each_worker_measured() -> None:
    """Each worker's rows divide by its own GPU's measured rates (harness.peaks): a resumed run's
    workers on other nodes show theirs; older records have none."""
    rates = {"bf16_tflops": 771.6, "copy_gbps": 4098.2}
    workers = [
        {"worker": "vm:1", "state": "done", "measured": 7},
        {"worker": "vm:2", "state": "done", "measured": 56, "peaks": rates},
    ]
    table = report.workers_table(workers)
    assert "| done | 7 |  |" in table and "| done | 56 | 772, 4098 |" in table
    clocks = {"clocks.sm": "1980", "clocks_throttle_reasons.active": "0x1"}  # idle: not named
    workers[1]["peaks_clocks"] = clocks
    assert "| 772, 4098 (1980 MHz) |" in report.workers_table(workers)
    workers[1]["peaks_clocks"] = {"clocks.sm": "1455", "clocks_throttle_reasons.active": "0x5"}
    assert "| 772, 4098 (1455 MHz, reasons 0x4) |" in report.workers_table(workers)
    workers[1]["peaks_clocks"] = {"clocks.sm": "[N/A]"}
    assert "| 772, 4098 |" in report.workers_table(workers)
