"""The regression gate on synthetic runs: verdicts, floor, exit codes and messages."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from harness import gate, records
from tests.harness.synthetic import build_run, synthetic_meta, synthetic_table, write_run

ROOT = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture, baseline: Path, candidate: Path, *extra: str):
    """gate.main in-process; returns (exit code, stdout, stderr)."""
    code = gate.main(["--baseline", str(baseline), "--candidate", str(candidate), *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_unusable(code: int, err: str, *words: str) -> None:
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    for word in words:
        assert word in err


@pytest.fixture
def baseline(tmp_path: Path) -> Path:
    return build_run(tmp_path / "base", run_id="base", ci_rel=0.01)


# --- the verdict rule itself ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("cand", "low", "high", "expected"),
    [
        (1.40, 1.35, 1.45, "same"),  # identical
        (1.35, 1.34, 1.36, "same"),  # disjoint, but a 3.6 % drop is within tolerance
        (1.20, 1.18, 1.22, "slower"),  # disjoint and 14 % lower
        (1.60, 1.58, 1.62, "faster"),
        (1.20, 1.00, 1.40, "ambiguous"),  # 14 % lower, but the intervals overlap
        (1.20, math.nan, math.nan, "slower"),  # no CI: judged by the estimate
        (1.60, math.nan, math.nan, "faster"),
        (1.38, math.nan, math.nan, "same"),
    ],
)
def test_verdict(cand: float, low: float, high: float, expected: str) -> None:
    assert gate.verdict(1.40, 1.36, 1.44, cand, low, high, tolerance=0.05) == expected


def test_a_baseline_without_an_interval_still_catches_a_drop() -> None:
    assert gate.verdict(1.40, math.nan, math.nan, 1.20, 1.18, 1.22, tolerance=0.05) == "slower"


@pytest.mark.parametrize(
    ("cand", "high", "expected"),
    [(1.0, 1.05, "below"), (1.05, 1.15, "near"), (1.2, 1.3, ""), (1.0, math.nan, "below")],
)
def test_floor_uses_the_upper_end(cand: float, high: float, expected: str) -> None:
    assert gate.floor_flag(cand, high, floor=1.1) == expected


# --- whole runs --------------------------------------------------------------------------------


def test_a_run_against_itself_passes(capsys, baseline: Path) -> None:
    code, out, _ = run(capsys, baseline, baseline, "--require-points", "all")
    assert code == 0 and out.startswith("gate: PASS: 12 point(s) compared (12 same)")


def test_a_crafted_regression_is_caught(capsys, tmp_path: Path, baseline: Path) -> None:
    slow_long = build_run(
        tmp_path / "cand", speedup=lambda p: 1.2 if p.seqlen == 16384 else 1.4, ci_rel=0.01
    )
    md, js = tmp_path / "gate.md", tmp_path / "gate.json"
    code, out, _ = run(
        capsys, baseline, slow_long, "--report-md", str(md), "--report-json", str(js)
    )
    assert code == 1 and "FAIL: 4 point(s) regressed (4 slower, 8 same)" in out
    assert "(time: cutile +16.7 %, triton +0.0 %)" in out  # which side moved
    result = json.loads(js.read_text())
    assert result["verdict"] == "fail" and result["exit_code"] == 1
    assert len(result["failing_points"]) == 4 and all(
        "L16384" in p for p in result["failing_points"]
    )
    assert result["counts"] == {"slower": 4, "same": 8}
    text = md.read_text()
    assert text.startswith("## ssdbench gate: FAIL") and "### Points to look at" in text
    assert "slower (fails)" in text and "-14.3 %" in text and "+16.7 % / +0.0 %" in text
    slow = [p for p in result["points"] if p["verdict"] == "slower"]
    assert all(p["cutile_time_change"] == pytest.approx(1.4 / 1.2) for p in slow)


def _triton_faster_at_16k(tmp_path: Path) -> Path:
    """A candidate whose Triton rows at L=16K are 20 % faster (median and CI), cuTile unchanged:
    what a per-point autotune pick does to the speedup."""
    table = synthetic_table()
    rows = (table["provider"] == "triton") & (table["seqlen"] == 16384)
    for column in ("median_ms", "ci_low_ms", "ci_high_ms", "p10_ms", "p90_ms"):
        table.loc[rows, column] *= 0.8
    return write_run(tmp_path / "cand", table, synthetic_meta())


def test_triton_getting_faster_fails_the_speedup_but_not_cutile_time(
    capsys, tmp_path: Path, baseline: Path
) -> None:
    triton_faster = _triton_faster_at_16k(tmp_path)
    code, out, _ = run(capsys, baseline, triton_faster)
    assert code == 1 and "4 slower" in out and "(time: cutile +0.0 %, triton -20.0 %)" in out
    js = tmp_path / "gate.json"
    code, out, _ = run(
        capsys, baseline, triton_faster, "--metric", "cutile-time", "--report-json", str(js)
    )
    assert code == 0 and out.startswith("gate: PASS: 12 point(s) compared (12 same)")
    result = json.loads(js.read_text())
    assert result["settings"]["metric"] == "cutile-time"
    assert [p["change"] for p in result["points"]] == [pytest.approx(1.0)] * 12


def _clocked(table: pd.DataFrame, sm_mhz: dict[int, str]) -> pd.DataFrame:
    """A copy whose rows record an SM clock per sequence length (nvidia-smi's text)."""
    table = table.copy()
    table["gpu_clocks"] = [
        json.dumps({"clocks.sm": sm_mhz[L], "clocks_throttle_reasons.active": "0x4"})
        if L in sm_mhz
        else None
        for L in table["seqlen"]
    ]
    return table


def test_a_slower_point_names_the_sm_clock_of_both_runs(capsys, tmp_path: Path) -> None:
    """A power-capped reading slows cuTile with no code changed (v25's 64K/64/256 at 1755 MHz
    against v24's 1950); the gate still fails the point but shows the clocks beside it."""
    clocks = {L: "1980" for L in (1024, 4096, 16384, 65536)}
    base = write_run(
        tmp_path / "base", _clocked(synthetic_table(ci_rel=0.01), clocks), synthetic_meta()
    )
    slow = synthetic_table(speedup=lambda p: 1.2 if p.seqlen == 16384 else 1.4, ci_rel=0.01)
    cand = write_run(tmp_path / "cand", _clocked(slow, {**clocks, 16384: "1755"}), synthetic_meta())
    md, js = tmp_path / "gate.md", tmp_path / "gate.json"
    code, out, _ = run(capsys, base, cand, "--metric", "cutile-time", "--report-md", str(md),
                       "--report-json", str(js))  # fmt: skip
    slower = [line for line in out.splitlines() if line.startswith("  slower")]
    assert code == 1 and len(slower) == 4
    assert all(line.endswith("; SM 1980 -> 1755 MHz)") for line in slower)
    assert "| 1980 → 1755 MHz |" in md.read_text() and "| 1980 → 1980 MHz |" in md.read_text()
    points = json.loads(js.read_text())["points"]
    assert {(p["baseline_sm_mhz"], p["candidate_sm_mhz"]) for p in points} == {
        (1980.0, 1755.0),
        (1980.0, 1980.0),
    }


def test_runs_without_clock_readings_show_none(capsys, tmp_path: Path, baseline: Path) -> None:
    slow = build_run(tmp_path / "cand", speedup=lambda p: 1.2 if p.seqlen == 16384 else 1.4)
    code, out, _ = run(capsys, baseline, slow)
    assert code == 1 and "MHz" not in out


def test_cutile_time_catches_a_slower_cutile(capsys, tmp_path: Path, baseline: Path) -> None:
    slow_long = build_run(
        tmp_path / "cand", speedup=lambda p: 1.2 if p.seqlen == 16384 else 1.4, ci_rel=0.01
    )
    md = tmp_path / "gate.md"
    code, out, _ = run(
        capsys, baseline, slow_long, "--metric", "cutile-time", "--report-md", str(md)
    )
    assert code == 1 and "FAIL: 4 point(s) regressed (4 slower, 8 same)" in out
    assert "verdicts on cutile's own time (triton's is shown, not judged)" in md.read_text()
    assert "-14.3 %" in md.read_text()  # the judged change: cuTile's rate, 1.2 / 1.4


def _one_point_failed(tmp_path: Path, provider: str, status: str) -> tuple[Path, str]:
    """A candidate run whose first point has `status` for `provider`; (run, point key)."""
    table = synthetic_table()
    point = table["point"].iloc[0]
    table.loc[(table["point"] == point) & (table["provider"] == provider), "status"] = status
    return write_run(tmp_path / "cand", table, synthetic_meta()), point


def test_cutile_time_compares_points_where_only_triton_failed(
    capsys, tmp_path: Path, baseline: Path
) -> None:
    triton_broken, point = _one_point_failed(tmp_path, "triton", "error")
    code, out, _ = run(capsys, baseline, triton_broken)
    assert code == 1 and f"broken: {point}" in out
    code, out, _ = run(capsys, baseline, triton_broken, "--metric", "cutile-time")
    assert code == 0 and "12 same" in out


def test_the_flags_name_the_providers_compared(capsys, tmp_path: Path, baseline: Path) -> None:
    """--provider / --against swap the sides: cuTile slower at 16K is Triton faster against it."""
    slow_long = build_run(
        tmp_path / "cand", speedup=lambda p: 1.2 if p.seqlen == 16384 else 1.4, ci_rel=0.01
    )
    md, js = tmp_path / "gate.md", tmp_path / "gate.json"
    code, out, _ = run(capsys, baseline, slow_long, "--provider", "triton", "--against", "cutile",
                       "--report-md", str(md), "--report-json", str(js))  # fmt: skip
    assert code == 0 and "4 faster, 8 same" in out
    result = json.loads(js.read_text())
    assert (result["settings"]["provider"], result["settings"]["against"]) == ("triton", "cutile")
    faster = [p for p in result["points"] if p["verdict"] == "faster"]
    assert all(p["change"] == pytest.approx(1.4 / 1.2) for p in faster)
    assert all(p["cutile_time_change"] == pytest.approx(1.4 / 1.2) for p in faster)
    text = md.read_text()
    assert "Speedup = cutile time / triton time" in text
    assert "time change triton / cutile" in text and "status (cutile/triton)" in text


def _renamed(tmp_path: Path, name: str) -> Path:
    """A run whose cuTile rows are recorded under another provider name."""
    table = synthetic_table()
    table.loc[table["provider"] == "cutile", "provider"] = name
    return write_run(tmp_path / name, table, synthetic_meta())


def test_another_registered_provider_can_be_gated(capsys, tmp_path: Path) -> None:
    other = _renamed(tmp_path, "cutile_next")
    assert_unusable(*run(capsys, other, other)[::2], "no cutile rows in graph mode",
                    "(providers: cutile_next, triton)", "--provider")  # fmt: skip
    code, out, _ = run(capsys, other, other, "--provider", "cutile_next")
    assert code == 0 and "12 same" in out
    code, out, _ = run(capsys, other, other, "--provider", "cutile_next",
                       "--metric", "cutile_next-time")  # fmt: skip
    assert code == 0 and "12 same" in out
    wrong = run(capsys, other, other, "--provider", "cutile_next", "--metric", "cutile-time")
    assert_unusable(*wrong[::2], "use speedup or cutile_next-time")
    same = run(capsys, other, other, "--provider", "triton")
    assert_unusable(*same[::2], "both triton")


def test_noisy_but_equal_runs_pass(capsys, tmp_path: Path) -> None:
    # Same true speedup; each run's medians jitter by ~1.5 % and its CIs say +-3 %.
    noisy = {"jitter": 0.015, "ci_rel": 0.03}
    a = build_run(tmp_path / "a", seed=1, **noisy)
    b = build_run(tmp_path / "b", seed=2, **noisy)
    code, out, _ = run(capsys, a, b)
    assert code == 0 and "slower" not in out


def test_a_noisy_drop_is_ambiguous_not_a_failure(capsys, tmp_path: Path, baseline: Path) -> None:
    wide = build_run(tmp_path / "cand", speedup=1.25, ci_rel=0.08)
    code, out, _ = run(capsys, baseline, wide)
    assert code == 0 and "12 ambiguous" in out
    code, _, _ = run(capsys, baseline, wide, "--fail-on-ambiguous")
    assert code == 1


def test_fail_on_ambiguous_fails_only_drops(capsys, tmp_path: Path, baseline: Path) -> None:
    """A noisy improvement is no regression, with or without --fail-on-ambiguous."""
    better = build_run(tmp_path / "cand", speedup=1.6, ci_rel=0.08)
    code, out, _ = run(capsys, baseline, better, "--fail-on-ambiguous")
    assert code == 0 and "12 ambiguous" in out


def test_a_large_drop_timed_without_an_interval_fails(
    capsys, tmp_path: Path, baseline: Path
) -> None:
    """A regression slow enough that its timing stopped before 6 repetitions (runs before the
    timing always took min_reps) has no interval: it fails, with --floor too."""
    slow = build_run(tmp_path / "cand", speedup=0.05, ci_rel=math.nan)
    code, out, _ = run(capsys, baseline, slow)
    assert code == 1 and "12 slower" in out
    code, out, _ = run(capsys, baseline, slow, "--floor", "1.1")
    assert code == 1 and "12 below floor 1.1x" in out


def test_a_point_that_stopped_working_fails(capsys, tmp_path: Path, baseline: Path) -> None:
    broken, point = _one_point_failed(tmp_path, "cutile", "wrong")
    code, out, _ = run(capsys, baseline, broken)
    assert code == 1 and f"broken: {point}" in out


def test_floor(capsys, tmp_path: Path, baseline: Path) -> None:
    assert run(capsys, baseline, baseline, "--floor", "1.3")[0] == 0
    code, out, _ = run(capsys, baseline, baseline, "--floor", "1.5")
    assert code == 1 and "12 below floor 1.5x" in out
    # 1.41 is above the 1.4x estimate but inside its interval: flagged "near", not failed.
    md = Path(baseline.parent / "near.md")
    assert run(capsys, baseline, baseline, "--floor", "1.41", "--report-md", str(md))[0] == 0
    assert "near floor" in md.read_text()


def test_points_only_in_one_run_are_listed_not_failed(capsys, tmp_path: Path, baseline) -> None:
    subset = build_run(tmp_path / "cand", seqlens=(1024, 4096, 65536))
    js, md = tmp_path / "gate.json", tmp_path / "gate.md"
    code, _, _ = run(capsys, baseline, subset, "--report-json", str(js), "--report-md", str(md))
    assert code == 0
    assert json.loads(js.read_text())["counts"] == {"same": 8, "missing": 4, "new": 4}
    # The points to look at are the baseline's lost ones; a new point timed cleanly is only in
    # the full list, one whose answer failed is to look at.
    look = md.read_text().split("### Points to look at")[1].split("<details>")[0]
    assert look.count("| missing |") == 4 and "| new |" not in look
    assert "| new | — → ok/ok |" in md.read_text()
    table = pd.read_parquet(subset / "results.parquet")
    new = (table["seqlen"] == 65536) & (table["nheads"] == 32) & (table["dstate"] == 64)
    table.loc[new & (table["provider"] == "cutile"), ["status", "error"]] = ["error", "CUDA error"]
    table.to_parquet(subset / "results.parquet")
    assert run(capsys, baseline, subset, "--report-md", str(md))[0] == 0
    look = md.read_text().split("### Points to look at")[1].split("<details>")[0]
    assert "| new | — → ok/error: CUDA error |" in look and look.count("| new |") == 1


# --- unusable inputs: exit 2 and one clear line ----------------------------------------------


def test_missing_file(capsys, tmp_path: Path, baseline: Path) -> None:
    code, _, err = run(capsys, baseline, tmp_path / "nope")
    assert_unusable(code, err, "candidate", "no such file")


def test_corrupt_parquet(capsys, tmp_path: Path, baseline: Path) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 this is not a parquet file")
    assert_unusable(*run(capsys, baseline, bad)[::2], "candidate", str(bad))


def test_foreign_parquet_without_metadata(capsys, tmp_path: Path, baseline: Path) -> None:
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pa.Table.from_pandas(synthetic_table(), preserve_index=False), foreign)
    assert_unusable(*run(capsys, foreign, baseline)[::2], "baseline", str(foreign))


def test_schema_version_mismatch(capsys, tmp_path: Path, baseline: Path) -> None:
    meta = synthetic_meta() | {"schema_version": 99}
    future = write_run(tmp_path / "future", synthetic_table(), meta)
    assert_unusable(*run(capsys, baseline, future)[::2], "candidate", "99")


def test_different_gpus(capsys, tmp_path: Path, baseline: Path) -> None:
    other = build_run(tmp_path / "h100", gpu="NVIDIA H100 80GB HBM3", ci_rel=0.01)
    assert_unusable(*run(capsys, baseline, other)[::2], "different GPUs", "H100")
    assert run(capsys, baseline, other, "--allow-different-gpus")[0] == 0


def test_a_run_without_rows_or_gpu_names_says_so(capsys, tmp_path: Path, baseline: Path) -> None:
    """Not "different GPUs", which would send the reader to --allow-different-gpus."""
    empty = tmp_path / "empty"
    empty.mkdir()
    records.write_meta(empty, synthetic_meta("empty"))
    assert_unusable(*run(capsys, baseline, empty)[::2], "no rows in graph mode (has: none)")
    table = synthetic_table()
    table["gpu_name"] = None
    nameless = write_run(tmp_path / "nameless", table, synthetic_meta())
    assert_unusable(*run(capsys, baseline, nameless)[::2], "record no GPU name")


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("tune", "cached", "tune='off' in the baseline, 'cached' in the candidate"),
        ("triton_autotune", "per_point", "triton_autotune='once' in the baseline, 'per_point'"),
        ("chunk_policy", "fastest", "chunk_policy='fixed' in the baseline, 'fastest' in the"),
        ("timing.l2", "warm", "timing.l2='cold' in the baseline, 'warm' in the candidate"),
        ("seed", 1, "seed=0 in the baseline, 1 in the candidate"),
    ],
)
def test_different_settings(capsys, tmp_path: Path, baseline: Path, key, value, shown) -> None:
    other = build_run(tmp_path / "cand", settings={key: value}, ci_rel=0.01)
    assert_unusable(*run(capsys, baseline, other)[::2], "different settings", shown)
    js = tmp_path / "gate.json"
    code, _, _ = run(
        capsys, baseline, other, "--allow-different-settings", "--report-json", str(js)
    )
    assert code == 0
    (note,) = json.loads(js.read_text())["notes"]
    assert note.startswith("Different settings allowed") and shown in note


def test_eager_order_matters_only_in_eager_mode(capsys, tmp_path: Path) -> None:
    """eager_after_self moves an eager sample by up to 90 µs: two runs that differ in it are
    refused in eager mode, and compared in graph mode, whose samples it does not touch."""
    modes = ("eager", "graph")
    base = build_run(tmp_path / "base", modes=modes, ci_rel=0.01)
    other = build_run(
        tmp_path / "cand", modes=modes, settings={"timing.eager_after_self": True}, ci_rel=0.01
    )
    shown = "timing.eager_after_self=False in the baseline, True in the candidate"
    assert_unusable(*run(capsys, base, other, "--mode", "eager")[::2], "different settings", shown)
    assert run(capsys, base, other, "--mode", "graph")[0] == 0


def test_how_precisely_a_run_was_timed_does_not_matter(capsys, tmp_path, baseline) -> None:
    # timing=quick against the default timing, fewer modes, another flush size: comparable.
    quick = {"timing.warmup": 2, "timing.min_reps": 6, "timing.max_reps": 30,
             "timing.max_seconds": 1.0, "timing.ci_target": 0.03, "timing.kernels_batch": 6,
             "timing.modes": ["graph"], "timing.flush_mib": 1024}  # fmt: skip
    other = build_run(tmp_path / "cand", settings=quick, ci_rel=0.01)
    assert run(capsys, baseline, other)[0] == 0


def test_settings_keys_are_measurement_keys() -> None:
    from harness import runner

    for mode in records.MODES:
        keys = {key.split(".")[0] for key in gate.settings_keys(mode)}
        assert keys <= set(runner.MEASUREMENT_KEYS), mode


def test_ci_sweeps_with_the_settings_of_the_committed_baseline() -> None:
    """The workflow's smoke sweep, composed as it runs it, is comparable with every baseline."""
    from harness import config, runner

    workflow = (ROOT / ".github" / "workflows" / "gpu-bench.yml").read_text()
    (line,) = [ln for ln in workflow.splitlines() if "run_bench.py" in ln and "$RUN_ID" in ln]
    fixed = [t for t in line.split() if "=" in t and "$" not in t]
    cfg = runner.config_dict(config.to_bench(config.compose(["sweep=smoke", *fixed])))
    ci_run = gate.Run("candidate", ROOT, pd.DataFrame(), {"config": cfg})
    baselines = sorted((ROOT / "results" / "baselines").glob("*/meta.json"))
    assert baselines
    for meta_file in baselines:
        base = gate.Run(
            "baseline", meta_file.parent, pd.DataFrame(), json.loads(meta_file.read_text())
        )
        for mode in records.MODES:
            assert gate.different_settings(base, ci_run, mode) == [], (meta_file, mode)


def _workflow() -> tuple[str, dict]:
    path = ROOT / ".github" / "workflows" / "gpu-bench.yml"
    return path.read_text(), yaml.safe_load(path.read_text())


def test_ci_dispatch_inputs_are_declared_and_used() -> None:
    """Every `inputs.X` the workflow reads is a workflow_dispatch input, and every input is read:
    an undeclared one is always empty on GitHub, so its default would be used silently."""
    text, workflow = _workflow()
    declared = set(workflow[True]["workflow_dispatch"]["inputs"])  # YAML 1.1 reads `on` as True
    used = set(re.findall(r"inputs\.(\w+)", text))
    assert used == declared


def _dispatch_defaults(workflow: dict) -> dict[str, str]:
    """The gate's variables as the workflow sets them when no input is given."""
    env = workflow["jobs"]["bench"]["env"]
    pattern = r"\$\{\{ inputs\.\w+ \|\| '([^']+)' \}\}"
    names = ("GATE_PROVIDER", "GATE_AGAINST", "GATE_METRIC")
    return {name: re.fullmatch(pattern, env[name]).group(1) for name in names}


def _run_step(workflow: dict, name: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """One step of the workflow, run by bash -e as GitHub runs it, with this Python as $PY."""
    (step,) = [s for s in workflow["jobs"]["bench"]["steps"] if s.get("name", "").startswith(name)]
    variables = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "PY": sys.executable}
    return subprocess.run(
        ["bash", "-e", "-c", step["run"]],
        cwd=cwd,
        env={**variables, "SSDBENCH_ENV": "", **env},
        capture_output=True,
        text=True,
    )


def test_ci_dispatch_defaults_gate_cutile_against_triton() -> None:
    assert _dispatch_defaults(_workflow()[1]) == {
        "GATE_PROVIDER": "cutile",
        "GATE_AGAINST": "triton",
        "GATE_METRIC": "speedup",
    }


def test_ci_checks_the_gate_inputs_on_the_committed_baselines() -> None:
    """The step before any GPU work accepts the defaults and stops at a flag the gate refuses."""
    workflow = _workflow()[1]
    defaults = _dispatch_defaults(workflow)
    assert _run_step(workflow, "Check the gate's inputs", ROOT, **defaults).returncode == 0
    cutile_time = {**defaults, "GATE_METRIC": "cutile-time"}
    assert _run_step(workflow, "Check the gate's inputs", ROOT, **cutile_time).returncode == 0
    for wrong in ({"GATE_METRIC": "cutile-tme"}, {"GATE_PROVIDER": "cutile_next"}):
        done = _run_step(workflow, "Check the gate's inputs", ROOT, **{**defaults, **wrong})
        assert done.returncode == 2
        assert "gate: unusable input" in done.stderr and "Traceback" not in done.stderr


def test_ci_gate_step_with_the_dispatch_defaults(tmp_path: Path, baseline: Path) -> None:
    """The workflow's gate step, run as the workflow runs it, passes two matching runs and
    writes its reports and exit code."""
    workflow = _workflow()[1]
    shutil.copytree(baseline, tmp_path / "results" / "baselines" / "some-gpu")
    candidate = build_run(tmp_path / "cand", run_id="cand", ci_rel=0.01)
    output = tmp_path / "github-output"
    done = _run_step(
        workflow,
        "Gate against",
        tmp_path,
        GPU_SLUG="some-gpu",
        RUN_DIR=str(candidate),
        GITHUB_OUTPUT=str(output),
        **_dispatch_defaults(workflow),
    )
    assert done.returncode == 0, done.stderr
    assert output.read_text() == "exit_code=0\n"
    settings = json.loads((candidate / "gate.json").read_text())["settings"]
    assert (settings["provider"], settings["against"], settings["metric"]) == (
        "cutile",
        "triton",
        "speedup",
    )
    assert (candidate / "gate.md").exists()


def test_required_points_missing(capsys, tmp_path: Path, baseline: Path) -> None:
    subset = build_run(tmp_path / "cand", seqlens=(1024,))
    assert_unusable(
        *run(capsys, baseline, subset, "--require-points", "all")[::2],
        "candidate lacks 8 required point(s)",
    )
    key = "b1_L16384_H32_P64_N64_G1_Q256_bfloat16_D_bias_sp"
    assert_unusable(*run(capsys, baseline, subset, "--require-points", key)[::2], key)
    listed = tmp_path / "required.txt"
    listed.write_text(f"# the points CI must keep\n{key}\n")
    assert_unusable(*run(capsys, baseline, subset, "--require-points", str(listed))[::2], key)
    present = "b1_L1024_H32_P64_N64_G1_Q256_bfloat16_D_bias_sp"
    assert run(capsys, baseline, subset, "--require-points", present)[0] == 0
    typo = str(tmp_path / "requried.txt")
    assert_unusable(*run(capsys, baseline, subset, "--require-points", typo)[::2], "no such file")


def test_no_comparable_points(capsys, tmp_path: Path, baseline: Path) -> None:
    elsewhere = build_run(tmp_path / "cand", seqlens=(2048,))
    assert_unusable(*run(capsys, baseline, elsewhere)[::2], "no point in common")
    other_mode = build_run(tmp_path / "eager", modes=("eager",))
    assert_unusable(*run(capsys, baseline, other_mode)[::2], "no rows in graph mode")
    table = synthetic_table()
    table.loc[table["provider"] == "triton", "status"] = "error"
    untimed = write_run(tmp_path / "untimed", table, synthetic_meta())
    assert_unusable(*run(capsys, untimed, untimed)[::2], "no point has both providers timed")


def test_unusable_input_still_writes_the_reports(capsys, tmp_path: Path, baseline: Path) -> None:
    md, js = tmp_path / "gate.md", tmp_path / "gate.json"
    run(capsys, baseline, tmp_path / "nope", "--report-md", str(md), "--report-json", str(js))
    assert json.loads(js.read_text())["verdict"] == "error"
    assert md.read_text().startswith("## ssdbench gate: ERROR (unusable input)")


def test_command_line_exit_codes(tmp_path: Path, baseline: Path) -> None:
    command = [sys.executable, "-m", "harness.gate", "--baseline", str(baseline), "--candidate"]
    ok = subprocess.run([*command, str(baseline)], cwd=ROOT, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    missing = subprocess.run(
        [*command, str(tmp_path / "x")], cwd=ROOT, capture_output=True, text=True
    )
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.strip().splitlines() == [
        f"gate: unusable input: candidate {tmp_path / 'x'}: no such file or directory"
    ]


def test_a_run_of_schema_version_1_is_still_a_baseline(capsys, tmp_path: Path) -> None:
    """Runs committed before the gpu_clocks column (every H200 run up to v10) stay comparable."""
    old = tmp_path / "v1"
    old.mkdir()
    meta = synthetic_meta(run_id="v1") | {"schema_version": 1}
    table = pa.Table.from_pandas(synthetic_table(run_id="v1", ci_rel=0.01), preserve_index=False)
    table = table.drop_columns(["gpu_clocks", "timings"]).replace_schema_metadata(
        {b"ssdbench": json.dumps(meta).encode()}
    )
    pq.write_table(table, old / "results.parquet")
    (old / "meta.json").write_text(json.dumps(meta))
    candidate = build_run(tmp_path / "new", run_id="new", ci_rel=0.01)
    code, out, err = run(capsys, old, candidate)
    assert code == 0, err


@pytest.mark.parametrize("flag", ["--report-md", "--report-json"])
def test_a_report_path_that_cannot_be_a_file_is_a_usage_error(
    capsys, tmp_path: Path, baseline: Path, flag: str
) -> None:
    """Exit 1 means a regression to CI: a report path that cannot be written must not read so."""
    for path in (tmp_path, baseline / "meta.json" / "gate.md"):
        with pytest.raises(SystemExit) as exit_:
            gate.main(["--baseline", str(baseline), "--candidate", str(baseline), flag, str(path)])
        assert exit_.value.code == 2
        assert f"{flag} {path}: not a file path" in capsys.readouterr().err
