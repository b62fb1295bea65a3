"""The sweep loop end to end on CPU: fake providers (right, wrong, NaN, failing, picky) around the
float64 reference, a wall-clock timer standing in for CUDA, and the run directory on disk."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from harness import config, correctness, providers, records, runner
from harness.config import ConfigError
from harness.providers import Provider
from harness.timing import Call
from kernels import reference

PEAKS = {"bf16_tflops": 2.0, "copy_gbps": 4.0}
REFERENCE = reference.ssd_forward  # bound now: one test replaces the module's function
ENV = {"gpu": {"name": "cpu", "index": None}, "git": {"commit": "abc", "dirty": False}}
CALLS: Counter[str] = Counter()
#: Milliseconds the fakes "took" beyond their real compute: WallTimer adds them to its readings,
#: so a slow fake is slow by a fixed amount, not by a sleep the machine's load can blur.
PAUSED_MS = [0.0]


def pause(ms: float) -> None:
    PAUSED_MS[0] += ms


def _now_ms() -> float:
    return time.perf_counter() * 1e3 + PAUSED_MS[0]


def _answer(scale: float = 1.0, final_scale: float = 1.0, nan: bool = False):
    """A provider computing the float64 reference, cast as the contract says, then spoiled."""

    def ssd_forward(**kwargs):
        result = REFERENCE(**kwargs)
        out, final = result if kwargs["return_final_states"] else (result, None)
        out = (out * scale).to(kwargs["x"].dtype)
        if nan:
            out[0, -1, 0, 0] = math.nan
        return out if final is None else (out, (final * final_scale).float())

    return ssd_forward


def _counted(name: str, fn):
    def ssd_forward(**kwargs):
        CALLS[name] += 1
        return fn(**kwargs)

    return ssd_forward


def _broken(**kwargs):
    raise RuntimeError("kernel failed to compile\ntileiras said more")


def fake(name: str, fn, prefixes: tuple[str, ...] = ("k_",), supports=None) -> Provider:
    return Provider(
        name=name,
        load=lambda: _counted(name, fn),
        description="test",
        devices=("cpu",),
        kernel_prefixes=prefixes,
        supports=supports or (lambda p: None),
    )


@pytest.fixture(autouse=True)
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A private registry with the fakes; 'triton' replaced so per-point tuning runs on CPU."""
    monkeypatch.setattr(providers, "_PROVIDERS", dict(providers._PROVIDERS))
    monkeypatch.setitem(providers._PROVIDERS, "triton", fake("triton", _answer()))
    for provider in (
        fake("good", _answer()),
        fake("good2", _answer()),
        fake("wrong", _answer(scale=1.5)),
        fake("nan", _answer(nan=True)),
        fake("broken", _broken),
        fake("picky", _answer(), supports=lambda p: "seqlen > 32" if p.seqlen > 32 else None),
        fake("plain", _answer(), prefixes=()),
        fake("badfinal", _answer(final_scale=2.0)),
        fake("near", _answer(scale=1.004)),  # bf16 out 0.4 % off: inside the 1e-2 limit
        fake("close", _answer(scale=1.02)),  # 2 % off: twice the limit
    ):
        providers.register(provider)
    CALLS.clear()


class WallTimer:
    """The three modes emulated with the wall clock on CPU (tests only); kernels mode splits the
    time evenly over the provider's prefixes. `fail` names (provider, mode) pairs that raise."""

    def __init__(self, fail: set[tuple[str, str]] = frozenset()) -> None:
        self.fail = fail

    def synchronize(self) -> None:
        pass

    @contextmanager
    def sampler(self, mode: str, call: Call):
        if (call.name, mode) in self.fail:
            raise RuntimeError(f"cannot capture {call.name}")
        if mode == "graph" and call.verify is not None:  # as CudaTimer checks a first replay
            call.verify(call.fn())

        def take(n: int):
            samples = []
            for _ in range(n):
                start = _now_ms()
                call.fn()
                ms = _now_ms() - start
                share = {p: ms / len(call.kernel_prefixes) for p in call.kernel_prefixes}
                samples.append((ms, share if mode == "kernels" else {}))
            return samples

        yield take


def make_cfg(tmp_path: Path, names: list[str], *overrides: str) -> config.BenchConfig:
    small = ["sweep=smoke", "sweep.seqlen=[32,64]", "sweep.nheads=2", "sweep.headdim=8",
             "sweep.dstate=16", "sweep.chunk_size=16", "timing.warmup=1", "timing.min_reps=6",
             "timing.max_reps=6", "timing.kernels_batch=3", "progress=false",
             f"results_dir={tmp_path}", f"providers.names=[{','.join(names)}]"]  # fmt: skip
    return config.to_bench(config.compose([*small, *overrides]))


def sweep(cfg: config.BenchConfig, timer: WallTimer | None = None) -> Path:
    return runner.run(cfg, device="cpu", timer=timer or WallTimer(), peaks=PEAKS, env=ENV)


def by(df, provider: str, point_seqlen: int | None = None):
    rows = df[df["provider"] == provider]
    return rows if point_seqlen is None else rows[rows["seqlen"] == point_seqlen]


def test_the_limit_is_the_dtypes_tolerance(tmp_path: Path) -> None:
    """An answer a little inside the bf16 limit passes, one at twice it is wrong: the check is
    the tolerance table's, not merely a catch of gross errors."""
    df, _ = records.load_run(sweep(make_cfg(tmp_path, ["near", "close"])))
    assert set(by(df, "near")["status"]) == {"ok"}
    close = by(df, "close")
    assert set(close["status"]) == {"wrong"}
    assert close["error"].str.contains("above the bfloat16 tolerance 0.01").all()


def test_each_checked_call_allocates_from_a_poisoned_pool(tmp_path, monkeypatch) -> None:
    """On a GPU every checked call runs inside correctness.poisoned_allocations, as large as its
    provider's working set, after a first call outside it for a self-tuning provider (Triton
    tunes there); the fallback's answer, kept to check the others, is copied out of its pool.
    Here the sweep is told it is on CUDA and the pool is recorded."""
    events: list[tuple[str, int]] = []

    @contextmanager
    def poisoned(device, nbytes):
        events.append(("poison", nbytes))
        yield
        events.append(("left", nbytes))

    init = runner.Sweep.__init__

    def on_cuda(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        self.on_cuda = True

    copied = []
    copy = runner._copied
    monkeypatch.setattr(runner.Sweep, "__init__", on_cuda)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(correctness, "poisoned_allocations", poisoned)
    monkeypatch.setattr(runner, "_copied", lambda result: copied.append(1) or copy(result))
    answer = _answer()

    def good(**kwargs):
        events.append(("call", kwargs["x"].shape[1]))
        return answer(**kwargs)

    bound = {32: 1 << 20, 64: 3 << 20}  # its own, not problem.working_set_bytes
    tunes = providers.SelfTuning(lambda: None, lambda: None, lambda picks: None)  # as Triton
    provider = dataclasses.replace(
        fake("good", good), working_set=lambda p: bound[p.seqlen], self_tuning=tunes
    )
    monkeypatch.setitem(providers._PROVIDERS, "good", provider)
    cfg = make_cfg(tmp_path, ["good"], "timing.modes=[eager]")
    df, _ = records.load_run(sweep(cfg))
    assert set(df["status"]) == {"ok"}
    entered = [i for i, (kind, _) in enumerate(events) if kind == "poison"]
    assert len(entered) == len(bound)  # one checked call per point (one chunk length)
    for i in entered:
        seqlen = events[i + 1][1]
        assert events[i - 1] == ("call", seqlen), events  # the first call, outside
        assert events[i + 1][0] == "call" and events[i][1] == bound[seqlen], events
        assert events[i + 2] == ("left", bound[seqlen]), events  # the call, and only it, inside
    assert not copied  # against the float64 reference: nothing kept
    fallback = make_cfg(tmp_path, ["good"], "timing.modes=[eager]", "check.reference_max_gib=0",
                        "check.fallback=good", "run_id=r1")  # fmt: skip
    sweep(fallback)
    assert len(copied) == len(bound)
    # A resume adding a provider runs the fallback again for its answer alone, poisoned alike.
    events.clear()
    resumed = make_cfg(tmp_path, ["good", "good2"], "timing.modes=[eager]",
                       "check.reference_max_gib=0", "check.fallback=good", "run_id=r1")  # fmt: skip
    df, _ = records.load_run(sweep(resumed))
    assert set(by(df, "good2")["check_against"]) == {"provider:good"}
    assert len(copied) == 2 * len(bound)
    fallbacks = [n for kind, n in events if kind == "poison" and n in bound.values()]
    assert fallbacks == [bound[32], bound[64]]  # good2's are its own bound's


def test_full_sweep_records_statuses_and_timings(tmp_path: Path) -> None:
    names = ["good", "wrong", "nan", "broken", "picky", "plain"]
    run_dir = sweep(make_cfg(tmp_path, names))
    assert run_dir.parent == tmp_path / "cpu" and run_dir.name.startswith("smoke-")
    df, meta = records.load_run(run_dir)
    assert len(df) == 2 * len(names) * 3
    assert meta["peaks"] == PEAKS and meta["env"]["git"]["commit"] == "abc"
    assert meta["config"]["providers"]["names"] == names and meta["run_id"] == run_dir.name
    assert (run_dir / records.RESULTS_FILE).is_file()

    good = by(df, "good")
    assert set(good["status"]) == {"ok"} and set(good["check_against"]) == {"float64"}
    assert (good["rel_err"] < 1e-2).all() and (good["reps"] == 6).all()
    assert (good["median_ms"] > 0).all() and (good["ci_low_ms"] <= good["median_ms"]).all()
    assert good["frac_peak_flops"].tolist() == pytest.approx((good["tflops"] / 2.0).tolist())
    assert good["frac_peak_bw"].tolist() == pytest.approx((good["gbps"] / 4.0).tolist())
    kernels = good[good["mode"] == "kernels"]["kernel_ms"].map(json.loads)
    assert all(set(k) == {"k_"} for k in kernels)
    assert set(good[good["mode"] != "kernels"]["kernel_ms"]) == {"{}"}
    assert set(good["l2"]) == {"cold"} and set(good["gpu_name"]) == {"cpu"}
    assert set(good["device_index"]) == {-1} and set(good["seed"]) == {0}

    for name, err in (
        ("wrong", "rel_err 0.5 above the bfloat16 tolerance"),
        ("nan", "rel_err nan"),
    ):
        rows = by(df, name)
        assert set(rows["status"]) == {"wrong"}, name
        assert rows["error"].str.startswith(err).all(), rows["error"].iloc[0]
        assert rows["median_ms"].isna().all() and (rows["reps"] == 0).all()  # never timed
    assert by(df, "nan")["rel_err"].isna().all()

    broken = by(df, "broken")
    assert set(broken["status"]) == {"error"}
    assert set(broken["error"]) == {"RuntimeError: kernel failed to compile"}

    assert set(by(df, "picky", 32)["status"]) == {"ok"}
    assert set(by(df, "picky", 64)["status"]) == {"unsupported"}
    assert set(by(df, "picky", 64)["error"]) == {"seqlen > 32"}

    plain = by(df, "plain")
    assert set(plain[plain["mode"] != "kernels"]["status"]) == {"ok"}
    assert set(plain[plain["mode"] == "kernels"]["status"]) == {"unsupported"}


def test_the_flop_peak_fraction_is_only_for_bfloat16(tmp_path: Path) -> None:
    df, _ = records.load_run(sweep(make_cfg(tmp_path, ["good"], "sweep.dtype=[float32,float16]")))
    assert set(df["status"]) == {"ok"} and set(df["dtype"]) == {"float32", "float16"}
    assert df["frac_peak_flops"].isna().all() and (df["tflops"] > 0).all()
    assert df["frac_peak_bw"].tolist() == pytest.approx((df["gbps"] / 4.0).tolist())


def test_rerun_with_the_same_run_id_skips_finished_points(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path, ["good"], "run_id=r1")
    sweep(cfg)
    first = CALLS["good"]
    sweep(cfg)
    assert CALLS["good"] == first  # nothing measured twice
    bigger = make_cfg(tmp_path, ["good", "good2"], "run_id=r1", "sweep.seqlen=[32,64,128]")
    sweep(bigger)
    assert CALLS["good"] == first * 3 // 2  # only the new point
    df, _ = records.load_run(tmp_path / "cpu" / "r1")
    assert len(df) == 3 * 3 + 3 * 3  # good at 3 points, good2 at all 3 (it was new everywhere)


def _interrupted_at_the_second_point(
    tmp_path: Path, monkeypatch
) -> tuple[config.BenchConfig, Path]:
    """Run a two-point sweep that a KeyboardInterrupt stops before its second point; the real
    point() is back in place on return. Returns (config, run directory)."""
    cfg = make_cfg(tmp_path, ["good"], "run_id=r1")
    real = runner.Sweep.point

    def interrupt_second(self, problem, provs):
        if problem.seqlen == 64:
            raise KeyboardInterrupt
        return real(self, problem, provs)

    monkeypatch.setattr(runner.Sweep, "point", interrupt_second)
    with pytest.raises(KeyboardInterrupt):
        sweep(cfg)
    monkeypatch.setattr(runner.Sweep, "point", real)
    return cfg, tmp_path / "cpu" / "r1"


def test_interrupted_sweep_keeps_what_was_measured(tmp_path: Path, monkeypatch) -> None:
    cfg, run_dir = _interrupted_at_the_second_point(tmp_path, monkeypatch)
    assert records.completed_points(run_dir) == {(p, "good") for p in _keys(cfg)[:1]}
    df, _ = records.load_run(run_dir / records.RESULTS_FILE)  # consolidated on the way out
    assert set(df["seqlen"]) == {32}
    sweep(cfg)
    assert records.completed_points(run_dir) == {(p, "good") for p in _keys(cfg)}


def test_a_committed_partial_run_resumes_from_its_results_table(
    tmp_path: Path, monkeypatch
) -> None:
    """A run folder committed to git keeps results.parquet but not parts/: a rerun in another
    session measures only the points missing from that table, and the table ends whole."""
    cfg, run_dir = _interrupted_at_the_second_point(tmp_path, monkeypatch)
    shutil.rmtree(run_dir / records.PARTS_DIR)
    before = CALLS["good"]
    sweep(cfg)
    assert CALLS["good"] == 2 * before  # the second point only: each point makes as many calls
    df, _ = records.load_run(run_dir / records.RESULTS_FILE)
    assert sorted(set(df["seqlen"])) == [32, 64] and len(df) == 2 * len(records.MODES)


def test_each_worker_divides_its_rows_by_its_own_gpus_rates(tmp_path: Path, monkeypatch) -> None:
    """A run resumed on another node: the later worker measures that GPU's rates, records them
    and divides its rows by them; meta.json keeps the first worker's, and so do its rows."""
    cfg, run_dir = _interrupted_at_the_second_point(tmp_path, monkeypatch)
    first = runner.worker_id()
    monkeypatch.setattr(runner, "worker_id", lambda: "node2:1")
    other = {"bf16_tflops": 4.0, "copy_gbps": 16.0}
    runner.run(cfg, device="cpu", timer=WallTimer(), peaks=other, env=ENV)
    df, meta = records.load_run(run_dir)
    assert meta["peaks"] == PEAKS
    assert {w["worker"]: w["peaks"] for w in meta["workers"]} == {first: PEAKS, "node2:1": other}
    for worker, rates in ((first, PEAKS), ("node2:1", other)):
        rows = df[df["worker"] == worker]
        assert len(rows) == len(records.MODES)
        assert rows["frac_peak_flops"].tolist() == pytest.approx(
            (rows["tflops"] / rates["bf16_tflops"]).tolist()
        )
        assert rows["frac_peak_bw"].tolist() == pytest.approx(
            (rows["gbps"] / rates["copy_gbps"]).tolist()
        )


def test_each_worker_records_the_clocks_read_right_after_its_rates(
    tmp_path: Path, monkeypatch
) -> None:
    """A GPU still held down by earlier work measures a low rate, which flatters every frac_peak_*
    column: each worker records the clock reading taken right after its rates, before any point;
    a worker with nothing left to measure measures neither."""
    readings = iter([HELD, *[FREE] * 20])
    cfg = make_cfg(tmp_path, ["good"], "sweep.seqlen=[32]", "run_id=r1")
    for name in ("node1:1", "node2:1"):  # the second call finds every point measured
        monkeypatch.setattr(runner, "worker_id", lambda name=name: name)
        runner.run(cfg, device="cpu", timer=WallTimer(), peaks=PEAKS, env=ENV,
                   read_clocks=lambda: next(readings))  # fmt: skip
    first, idle = sorted(records.read_workers(tmp_path / "cpu" / "r1"), key=lambda w: w["worker"])
    assert (first["peaks"], first["peaks_clocks"]) == (PEAKS, HELD)
    assert (idle["peaks"], idle["peaks_clocks"]) == (None, None)


def test_two_calls_of_one_process_on_one_run_keep_a_record_each(tmp_path: Path) -> None:
    """A Hydra multirun runs its jobs in one process; two of them on one run_id must not share a
    worker name, or the second's record replaces the first's (its rates and points)."""
    cfg = make_cfg(tmp_path, ["good"], "sweep.seqlen=[32]", "run_id=r1")
    sweep(cfg)
    df, meta = records.load_run(sweep(make_cfg(tmp_path, ["good"], "run_id=r1")))
    first, second = (w["worker"] for w in meta["workers"])
    assert second == f"{first}.2" and [w["measured"] for w in meta["workers"]] == [1, 1]
    assert set(df["worker"]) == {first, second}


def test_worker_names_stay_unique_where_pids_repeat(monkeypatch) -> None:
    """Fresh nodes boot alike, so a resumed run's calls may get the same pid (and a requeued SLURM
    task keeps its id): each interpreter's worker name carries a token of its own, so that no
    worker's record replaces an earlier one's."""
    code = "from harness.runner import worker_id; print(worker_id())"
    root = Path(__file__).resolve().parents[2]
    names = [
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
        ).stdout.strip()
        for _ in range(2)
    ]
    hosts, tokens = zip(*(name.rsplit("-", 1) for name in names), strict=True)
    assert all(host.startswith(f"{socket.gethostname()}:") for host in hosts)
    assert tokens[0] != tokens[1]
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    assert runner.worker_id() == f"slurm:77_3-{runner._PROCESS_TOKEN}"


def test_a_run_whose_results_table_is_unreadable_is_not_resumed(tmp_path: Path) -> None:
    """Measuring again over a torn results.parquet would replace the rows only it held (a
    committed run keeps no parts), so the resume stops first and says why."""
    cfg = make_cfg(tmp_path, ["good"], "run_id=r1")
    sweep(cfg)
    run_dir = tmp_path / "cpu" / "r1"
    (run_dir / records.RESULTS_FILE).write_bytes(b"PAR1 torn write")
    calls = CALLS["good"]
    with pytest.raises(ConfigError, match="run r1 cannot be resumed: .*is unreadable"):
        sweep(cfg)
    assert CALLS["good"] == calls and len(records.read_workers(run_dir)) == 1


def test_time_limit_stops_between_points_and_a_rerun_measures_the_rest(
    tmp_path: Path, monkeypatch
) -> None:
    """Each point takes 10 s of a fake clock; with 15 s the second would end at 20 s, so the
    sweep records the first, says what is left and stops; a rerun without the limit finishes."""
    cfg = make_cfg(tmp_path, ["good"], "run_id=r1", "time_limit_s=15")
    now = [100.0]
    real = runner.Sweep.point

    def ten_seconds(self, problem, provs):
        now[0] += 10
        return real(self, problem, provs)

    monkeypatch.setattr(runner.Sweep, "point", ten_seconds)
    run = functools.partial(
        runner.run, device="cpu", timer=WallTimer(), peaks=PEAKS, env=ENV, clock=lambda: now[0]
    )
    with pytest.raises(runner.OutOfTime, match="time_limit_s=15 reached with 1 of 2 points left"):
        run(cfg)
    run_dir = tmp_path / "cpu" / "r1"
    assert records.completed_points(run_dir) == {(p, "good") for p in _keys(cfg)[:1]}
    assert [w["state"] for w in records.read_workers(run_dir)] == ["out_of_time"]
    assert set(records.load_run(run_dir / records.RESULTS_FILE)[0]["seqlen"]) == {32}
    run(make_cfg(tmp_path, ["good"], "run_id=r1"))
    assert records.completed_points(run_dir) == {(p, "good") for p in _keys(cfg)}


def test_a_time_limit_the_set_up_outlasts_says_so(tmp_path: Path, monkeypatch) -> None:
    """Rates and compiles take 20 s of a fake clock before the first point: with 15 s no point
    can start, in this call or any rerun, so the message says to raise the limit."""
    now = [100.0]
    real = runner.Sweep.prepare

    def slow_prepare(self, todo):
        now[0] += 20
        return real(self, todo)

    monkeypatch.setattr(runner.Sweep, "prepare", slow_prepare)
    cfg = make_cfg(tmp_path, ["good"], "run_id=r1", "time_limit_s=15")
    with pytest.raises(runner.OutOfTime, match="before the first point: .*took 20 s; raise"):
        runner.run(cfg, device="cpu", timer=WallTimer(), peaks=PEAKS, env=ENV, clock=lambda: now[0])


@pytest.mark.parametrize(
    ("limit", "elapsed", "longest", "stop"),
    [(0, 1e9, 1e9, False), (10, 5, 4, False), (10, 5, 6, True), (10, 11, 0, True)],
)
def test_out_of_time_when_a_point_as_long_as_the_longest_would_end_past_the_limit(
    limit, elapsed, longest, stop
) -> None:
    assert runner.out_of_time(limit, elapsed, longest) is stop


def _keys(cfg: config.BenchConfig) -> list[str]:
    return [p.key() for p in config.validate(cfg)]


def test_resumed_run_must_keep_its_measurement_settings(tmp_path: Path) -> None:
    sweep(make_cfg(tmp_path, ["good"], "run_id=r1"))
    with pytest.raises(ConfigError, match=r"run r1 was measured with timing.ci_target=0.01"):
        sweep(make_cfg(tmp_path, ["good"], "run_id=r1", "timing.ci_target=0.02"))
    with pytest.raises(ConfigError, match=r"chunk_policy='fixed' there, 'fastest' now"):
        sweep(make_cfg(tmp_path, ["good"], "run_id=r1", "chunk_policy=fastest"))


def test_a_run_recorded_before_chunk_policy_resumes_as_fixed(tmp_path: Path) -> None:
    """So do runs recorded before timing.eager_after_self, as interleaved eager timing."""
    run_dir = sweep(make_cfg(tmp_path, ["good"], "run_id=r1"))
    meta_file = run_dir / records.META_FILE
    meta = json.loads(meta_file.read_text())
    del meta["config"]["chunk_policy"], meta["config"]["timing"]["eager_after_self"]
    meta_file.write_text(json.dumps(meta))
    sweep(make_cfg(tmp_path, ["good"], "run_id=r1", "sweep.seqlen=[32,64,128]"))
    with pytest.raises(ConfigError, match="chunk_policy"):
        sweep(make_cfg(tmp_path, ["good"], "run_id=r1", "chunk_policy=fastest"))


def test_resume_true_continues_the_newest_run_of_the_same_sweep(tmp_path: Path) -> None:
    first = sweep(make_cfg(tmp_path, ["good"]))
    calls = CALLS["good"]
    assert sweep(make_cfg(tmp_path, ["good"], "resume=true")) == first
    assert CALLS["good"] == calls
    other = sweep(make_cfg(tmp_path, ["good"], "resume=true", "sweep.seqlen=[32]"))
    assert other != first  # a different sweep section starts its own run
    assert sweep(make_cfg(tmp_path, ["good"])) not in (first, other)  # resume=false: always new


def test_without_the_reference_providers_are_checked_against_the_fallback(tmp_path: Path) -> None:
    names = ["wrong", "good2", "good"]
    cfg = make_cfg(tmp_path, names, "check.reference_max_gib=0", "check.fallback=good")
    df, _ = records.load_run(sweep(cfg))
    good = by(df, "good")
    assert set(good["status"]) == {"ok"} and set(good["check_against"]) == {""}
    assert good["rel_err"].isna().all()
    assert set(by(df, "good2")["check_against"]) == {"provider:good"}
    assert set(by(df, "good2")["status"]) == {"ok"}
    assert set(by(df, "wrong")["status"]) == {"wrong"}
    assert set(by(df, "wrong")["check_against"]) == {"provider:good"}


def test_without_the_reference_or_the_fallback_nothing_passes_unchecked(tmp_path: Path) -> None:
    """An answer that nothing can check is never `ok`. Before any work: the reference out of
    reach and the fallback not run is a config error naming both keys. During a run: where the
    fallback fails, the others are errors that say what to change."""
    lone = make_cfg(tmp_path, ["wrong"], "check.reference_max_gib=0", "check.fallback=good")
    with pytest.raises(ConfigError, match=r"check\.fallback=good is not in providers\.names"):
        sweep(lone)
    assert CALLS.get("wrong", 0) == 0
    cfg = make_cfg(tmp_path, ["broken", "wrong", "good"], "check.reference_max_gib=0",
                   "check.fallback=broken")  # fmt: skip
    df, _ = records.load_run(sweep(cfg))
    assert set(by(df, "broken")["status"]) == {"error"}
    for name in ("wrong", "good"):
        assert set(by(df, name)["status"]) == {"error"}
        assert by(df, name)["error"].str.startswith("nothing to check the answer against").all()


def test_a_resume_checks_against_a_fallback_measured_before(tmp_path: Path) -> None:
    """A resume that measures only the providers added since still checks them against the
    fallback, which it runs again for its answer alone (not recorded twice)."""
    first = make_cfg(tmp_path, ["good"], "check.reference_max_gib=0", "check.fallback=good",
                     "run_id=r1")  # fmt: skip
    sweep(first)
    resumed = make_cfg(tmp_path, ["good", "wrong"], "check.reference_max_gib=0",
                       "check.fallback=good", "run_id=r1")  # fmt: skip
    df, _ = records.load_run(sweep(resumed))
    wrong = by(df, "wrong")
    assert set(wrong["status"]) == {"wrong"} and set(wrong["check_against"]) == {"provider:good"}
    assert len(by(df, "good")) == 2 * len(records.MODES)


def test_reference_out_of_memory_falls_back_to_a_peer(tmp_path: Path, monkeypatch) -> None:
    def oom(**kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 40 GiB")

    cfg = make_cfg(tmp_path, ["good", "wrong"], "check.fallback=good")
    monkeypatch.setattr(reference, "ssd_forward", oom)
    df, _ = records.load_run(sweep(cfg))
    assert set(by(df, "wrong")["check_against"]) == {"provider:good"}
    assert set(by(df, "wrong")["status"]) == {"wrong"}


def test_a_failing_point_is_recorded_and_the_sweep_goes_on(tmp_path: Path, monkeypatch) -> None:
    real = runner.make_inputs

    def inputs(problem, seed, device):
        if problem.seqlen == 32:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return real(problem, seed, device)

    monkeypatch.setattr(runner, "make_inputs", inputs)
    df, _ = records.load_run(sweep(make_cfg(tmp_path, ["good", "good2"])))
    first = df[df["seqlen"] == 32]
    assert set(first["status"]) == {"error"}
    assert set(first["error"]) == {"OutOfMemoryError: CUDA out of memory"}
    assert set(df[df["seqlen"] == 64]["status"]) == {"ok"}


def test_a_failing_mode_is_isolated(tmp_path: Path) -> None:
    timer = WallTimer(fail={("good", "graph")})
    df, _ = records.load_run(sweep(make_cfg(tmp_path, ["good", "good2"]), timer))
    good = by(df, "good")
    assert set(good[good["mode"] == "graph"]["status"]) == {"error"}
    assert set(good[good["mode"] == "graph"]["error"]) == {"RuntimeError: cannot capture good"}
    assert set(good[good["mode"] != "graph"]["status"]) == {"ok"}
    assert set(by(df, "good2")["status"]) == {"ok"}


def test_a_graph_replay_that_answers_wrong_makes_its_rows_wrong(tmp_path: Path) -> None:
    """Graph mode times a replay, not the eager call the check judged: a forward right when
    checked and wrong afterwards (as one launching otherwise under capture would be) must not
    get a graph-mode time."""
    calls = Counter()

    def right_then_wrong(**kwargs):
        calls["n"] += 1
        return _answer(scale=1.0 if calls["n"] == 1 else 1.5)(**kwargs)

    providers.register(fake("drifting", right_then_wrong))
    df, _ = records.load_run(sweep(make_cfg(tmp_path, ["good", "drifting"], "sweep.seqlen=[32]")))
    drifting = by(df, "drifting")
    graph = drifting[drifting["mode"] == "graph"]
    assert set(graph["status"]) == {"wrong"}
    assert graph["error"].iloc[0].startswith("ReplayMismatch: the graph's replay answers wrong")
    assert set(drifting[drifting["mode"] != "graph"]["status"]) == {"ok"}
    assert set(by(df, "good")["status"]) == {"ok"}


def test_each_modes_rows_carry_the_gpu_clocks_read_as_its_timing_ended(tmp_path: Path) -> None:
    readings = iter(range(100))

    def clocks() -> dict:
        return {"clocks.sm": str(1980 - next(readings))}  # a new value at every reading

    cfg = make_cfg(tmp_path, ["good", "good2", "wrong"])
    run_dir = runner.run(cfg, device="cpu", timer=WallTimer(), peaks=PEAKS, env=ENV,
                         read_clocks=clocks)  # fmt: skip
    df, _ = records.load_run(run_dir)
    good, good2 = (by(df, name).sort_values(["seqlen", "mode"]) for name in ("good", "good2"))
    assert len(set(good["gpu_clocks"])) == 2 * 3  # one reading per point and mode …
    assert list(good["gpu_clocks"]) == list(good2["gpu_clocks"])  # … shared by the interleaved
    assert by(df, "wrong")["gpu_clocks"].isna().all()  # failed its check: never timed
    off_cuda, _ = records.load_run(sweep(make_cfg(tmp_path / "cpu-run", ["good"])))
    assert off_cuda["gpu_clocks"].isna().all()


HELD = {"clocks.sm": "1785", "clocks.max.sm": "1980", "clocks_throttle_reasons.active": "0x4"}
FREE = {"clocks.sm": "1980", "clocks.max.sm": "1980", "clocks_throttle_reasons.active": "0x0"}


def _held_run(tmp_path: Path, readings: list[dict], *overrides: str):
    """One point, graph mode only, the clocks read after each timing taken from `readings`
    (the last repeated; the worker's reading after its rates comes first, FREE); returns (rows,
    the cooldowns slept, timings made)."""
    left = iter([FREE, *readings])
    read: list[dict] = []

    def clocks() -> dict:
        read.append(next(left, readings[-1]))
        return read[-1]

    slept: list[float] = []
    cfg = make_cfg(tmp_path, ["good", "good2"], "sweep.seqlen=[32]", "timing.modes=[graph]",
                   *overrides)  # fmt: skip
    run_dir = runner.run(cfg, device="cpu", timer=WallTimer(), peaks=PEAKS, env=ENV,
                         read_clocks=clocks, sleep=slept.append)  # fmt: skip
    df, _ = records.load_run(run_dir)
    return df, slept, len(read) - 1


def test_a_mode_timed_at_a_held_clock_is_timed_again_after_a_cooldown(tmp_path: Path) -> None:
    df, slept, timed = _held_run(tmp_path, [HELD, FREE], "timing.held_cooldown_s=7")
    assert timed == 2 and slept == [7.0]
    assert set(df["timings"]) == {2}  # both providers, timed together again
    assert [json.loads(c) for c in df["gpu_clocks"]] == [FREE, FREE]  # the reading kept is the last
    assert set(df["status"]) == {"ok"}


def test_re_timing_stops_after_held_retimes(tmp_path: Path) -> None:
    df, slept, timed = _held_run(tmp_path, [HELD], "timing.held_retimes=2")
    assert timed == 3 and len(slept) == 2
    assert set(df["timings"]) == {3} and set(df["status"]) == {"ok"}
    assert [json.loads(c) for c in df["gpu_clocks"]] == [
        HELD,
        HELD,
    ]  # still held: the report shows it
    df, slept, timed = _held_run(tmp_path / "off", [HELD], "timing.held_retimes=0")
    assert (timed, slept, set(df["timings"])) == (1, [], {1})


def test_a_free_or_unread_clock_is_timed_once(tmp_path: Path) -> None:
    for name, reading in (
        ("free", FREE),
        ("idle", {**HELD, "clocks_throttle_reasons.active": "0x1"}),
    ):
        df, slept, timed = _held_run(tmp_path / name, [reading])
        assert (timed, slept, set(df["timings"])) == (1, [], {1})
    df, _ = records.load_run(sweep(make_cfg(tmp_path / "cpu-run", ["good", "wrong"])))
    assert set(by(df, "good")["timings"]) == {1}
    assert set(by(df, "wrong")["timings"]) == {0}  # failed its check: never timed


def test_a_run_recorded_before_re_timing_resumes_only_without_it(tmp_path: Path) -> None:
    run_dir = sweep(make_cfg(tmp_path, ["good"], "run_id=r1"))
    meta_file = run_dir / records.META_FILE
    meta = json.loads(meta_file.read_text())
    for key in ("held_retimes", "held_floor", "held_cooldown_s"):
        del meta["config"]["timing"][key]
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match=r"timing.held_retimes=0 there, 2 now"):
        sweep(make_cfg(tmp_path, ["good"], "run_id=r1", "sweep.seqlen=[32,64,128]"))
    sweep(make_cfg(tmp_path, ["good"], "run_id=r1", "sweep.seqlen=[32,64,128]",
                   "timing.held_retimes=0"))  # fmt: skip


def test_final_states_are_checked(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path, ["good", "badfinal"], "sweep.return_final_states=true")
    df, _ = records.load_run(sweep(cfg))
    assert (by(df, "good")["final_rel_err"] < 1e-6).all()
    assert set(by(df, "good")["status"]) == {"ok"}
    bad = by(df, "badfinal")
    assert set(bad["status"]) == {"wrong"} and bad["error"].str.startswith("final_rel_err 1").all()


class FakeAutotuner:
    """A provider that tunes itself as Triton does: its first call after `forget` picks the next
    of `picks` (in turn) and later calls run with that pick; a "slow" pick takes 1 s more."""

    def __init__(self, picks: list[str]) -> None:
        self.picks, self.turn = picks, 0
        self.pick: str | None = None
        self.forgets = 0

    def forget(self) -> None:
        self.pick, self.forgets = None, self.forgets + 1

    def restore(self, pick: str | None) -> None:
        self.pick = pick

    def forward(self, **kwargs):
        if self.pick is None:
            self.pick, self.turn = self.picks[self.turn % len(self.picks)], self.turn + 1
        if self.pick == "slow":
            pause(1000)
        return _answer()(**kwargs)

    def provider(self) -> Provider:
        return dataclasses.replace(
            fake("triton", self.forward),
            tuning_report=lambda: {"k": self.pick},
            self_tuning=providers.SelfTuning(self.forget, lambda: self.pick, self.restore),
        )


def _autotuned(tmp_path: Path, monkeypatch, picks: list[str], *overrides: str):
    tuner = FakeAutotuner(picks)
    monkeypatch.setitem(providers._PROVIDERS, "triton", tuner.provider())
    df, _ = records.load_run(sweep(make_cfg(tmp_path, ["triton", "good"], *overrides)))
    assert set(df["status"]) == {"ok"}
    return tuner, by(df, "triton"), [json.loads(t) for t in by(df, "triton")["tuning"]]


@pytest.mark.parametrize("policy, forgets", [("once", 0), ("per_point", 2)])
def test_triton_autotuning_is_forgotten_per_point_and_recorded(
    tmp_path: Path, monkeypatch, policy: str, forgets: int
) -> None:
    tuner, _, tunings = _autotuned(tmp_path, monkeypatch, ["fast"], f"triton_autotune={policy}")
    assert tuner.forgets == forgets and tuner.turn == max(forgets, 1)  # tuned once per forget
    assert all(t["triton_autotune"] == policy and "matmul_policy" in t for t in tunings)
    assert not any("autotune_screen_ms" in t for t in tunings)


@pytest.mark.parametrize(
    "picks, kept", [(["slow", "fast"], "16 retuned"), (["fast", "slow"], "16")]
)
def test_triton_autotuning_twice_times_the_faster_tuning(
    tmp_path: Path, monkeypatch, picks: list[str], kept: str
) -> None:
    tuner, rows, tunings = _autotuned(tmp_path, monkeypatch, picks, "triton_autotune=twice")
    assert tuner.forgets == 4 and tuner.turn == 4  # before each point, and between its tunings
    for t in tunings:
        assert t["triton_autotune"] == "twice" and t["autotune_kept"] == kept
        assert t["picks"] == {"k": "fast"}  # the kept tuning's picks, recorded at its check
        screen = t["autotune_screen_ms"]
        assert set(screen) == {"16", "16 retuned"}
        assert screen[{"16": "16 retuned", "16 retuned": "16"}[kept]] > screen[kept] + 500
        assert "chunk_screen_ms" not in t  # one chunk length
    # The fast picks were put back before timing, even when the slow ones were tuned last.
    assert (rows["median_ms"] < 500).all() and (rows["rel_err"] < 1e-2).all()


def test_triton_autotuning_twice_at_each_chunk_length(tmp_path: Path, monkeypatch) -> None:
    """Four candidates (two lengths, two tunings each); the chunk record keeps each length's
    faster tuning. The fake's pick is not per shape, so a point tunes three times: 32 (slow),
    32 again (fast), 16 with the pick it finds (fast), 16 again (fast)."""
    _, rows, tunings = _autotuned(
        tmp_path, monkeypatch, ["slow", "fast", "fast"],
        "triton_autotune=twice", "chunk_policy=fastest", "sweep.chunk_size=32",
    )  # fmt: skip
    for t in tunings:
        screen = t["autotune_screen_ms"]
        assert set(screen) == {"32", "32 retuned", "16", "16 retuned"} and screen["32"] > 500
        assert t["chunk_screen_ms"] == {"32": screen["32 retuned"], "16": min(
            screen["16"], screen["16 retuned"])}  # fmt: skip
        assert t["autotune_kept"] != "32" and t["picks"] == {"k": "fast"}
    assert (rows["median_ms"] < 500).all()


def _slow_at(slow_chunk: int, wrong: bool = False):
    """A right answer that takes 1 s longer at `slow_chunk` (or is wrong there): far more than
    the reference itself varies between chunk lengths, even on a loaded CPU."""
    right, spoiled = _answer(), _answer(scale=1.5)

    def ssd_forward(**kwargs):
        if kwargs["chunk_size"] == slow_chunk:
            if wrong:
                return spoiled(**kwargs)
            pause(1000)
        return right(**kwargs)

    return ssd_forward


def _chunk_tuning(df, provider: str) -> list[dict]:
    return [json.loads(t) for t in by(df, provider)["tuning"]]


def test_chunk_policy_fastest_runs_each_provider_at_its_faster_chunk(tmp_path: Path) -> None:
    for name, slow in (("likes32", 16), ("likes16", 32)):
        providers.register(fake(name, _slow_at(slow)))
    cfg = make_cfg(tmp_path, ["likes32", "likes16"], "sweep.chunk_size=32", "chunk_policy=fastest")
    df, meta = records.load_run(sweep(cfg))
    assert set(df["status"]) == {"ok"} and set(df["chunk_size"]) == {32}
    assert meta["config"]["chunk_policy"] == "fastest"
    for name, chosen in (("likes32", 32), ("likes16", 16)):
        tunings = _chunk_tuning(df, name)
        assert {t["chunk_size"] for t in tunings} == {chosen}, name
        assert all(t["chunk_policy"] == "fastest" for t in tunings)
        screen = tunings[0]["chunk_screen_ms"]
        assert set(screen) == {"32", "16"} and screen[str(48 - chosen)] > screen[str(chosen)] + 500
        assert (by(df, name)["rel_err"] < 1e-2).all()
    # TFLOP/s come from the FLOP model at the chunk length that ran.
    row = by(df, "likes16", 64).query("mode == 'graph'").iloc[0]
    problem = next(p for p in config.validate(cfg) if p.seqlen == 64)
    ran = runner.flops(dataclasses.replace(problem, chunk_size=16))
    assert ran != runner.flops(problem)
    assert row["tflops"] == pytest.approx(ran / (row["median_ms"] * 1e-3) / 1e12)


def test_chunk_policy_fastest_fails_a_provider_wrong_at_either_chunk(tmp_path: Path) -> None:
    providers.register(fake("wrong16", _slow_at(16, wrong=True)))
    cfg = make_cfg(tmp_path, ["wrong16"], "sweep.chunk_size=32", "chunk_policy=fastest")
    df, _ = records.load_run(sweep(cfg))
    assert set(df["status"]) == {"wrong"}
    assert df["error"].str.startswith("at chunk_size 16: rel_err 0.5").all()


def test_chunk_policy_tries_only_lengths_the_provider_supports(tmp_path: Path) -> None:
    supports = lambda p: "chunk_size < 32" if p.chunk_size < 32 else None  # noqa: E731
    providers.register(fake("only32", _answer(), supports=supports))
    cfg = make_cfg(tmp_path, ["only32", "good"], "sweep.chunk_size=32", "chunk_policy=fastest")
    df, _ = records.load_run(sweep(cfg))
    assert set(df["status"]) == {"ok"}
    # as under fixed: no second check, no screen; one more call: the replay WallTimer checks
    assert CALLS["only32"] == 2 * (1 + 3 * (1 + 6) + 1)
    assert "chunk_screen_ms" not in _chunk_tuning(df, "only32")[0]
    assert set(_chunk_tuning(df, "good")[0]["chunk_screen_ms"]) == {"32", "16"}


def _preparing(name: str, prepare) -> Provider:
    return dataclasses.replace(fake(name, _answer()), prepare=prepare)


def test_prepare_gets_every_point_to_run_at_each_chunk_tried_once(tmp_path: Path) -> None:
    """Before the first point: the problems the provider will run (not those done, not those it
    does not support), at both chunk lengths under chunk_policy=fastest; the record goes into
    the worker's."""
    asked = []

    def prepare(problems, policy):
        asked.append((sorted((p.seqlen, p.chunk_size) for p in problems), policy, dict(CALLS)))
        return {"compiled": len(problems)}

    providers.register(_preparing("prepared", prepare))
    providers.register(dataclasses.replace(_preparing("picky2", prepare), supports=_not_64))
    cfg = make_cfg(tmp_path, ["prepared", "picky2", "good"], "sweep.chunk_size=32",
                   "chunk_policy=fastest", "run_id=r1")  # fmt: skip
    sweep(cfg)
    assert asked == [
        ([(32, 16), (32, 32), (64, 16), (64, 32)], "off", {}),  # before any call
        ([(32, 16), (32, 32)], "off", {}),
    ]
    workers = records.read_workers(tmp_path / "cpu" / "r1")
    assert workers[0]["prepared"] == {"prepared": {"compiled": 4}, "picky2": {"compiled": 2}}
    asked.clear()
    sweep(cfg)  # nothing left to measure: nothing to prepare
    assert asked == []


def _not_64(problem) -> str | None:
    return "seqlen 64" if problem.seqlen == 64 else None


def test_a_failing_prepare_is_recorded_and_every_point_still_measured(tmp_path: Path) -> None:
    def prepare(problems, policy):
        raise RuntimeError("tileiras not found")

    providers.register(_preparing("prepared", prepare))
    run_dir = sweep(make_cfg(tmp_path, ["prepared"], "run_id=r1"))
    df, _ = records.load_run(run_dir)
    assert set(df["status"]) == {"ok"} and df["seqlen"].nunique() == 2
    prepared = records.read_workers(run_dir)[0]["prepared"]
    assert prepared == {"prepared": {"error": "RuntimeError: tileiras not found"}}


def test_chunk_policy_fixed_runs_the_problems_chunk_once(tmp_path: Path) -> None:
    df, _ = records.load_run(sweep(make_cfg(tmp_path, ["good"], "sweep.chunk_size=32")))
    # check, then warm-up and reps in 3 modes, and the graph replay WallTimer checks
    assert CALLS["good"] == 2 * (1 + 3 * (1 + 6) + 1)
    assert all("chunk_size" not in t for t in _chunk_tuning(df, "good"))


def test_broken_device_stops_the_sweep_after_recording_the_culprit(
    tmp_path: Path, monkeypatch
) -> None:
    broken = {"on": False}

    def sync(self):
        if broken["on"]:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def crash(**kwargs):
        broken["on"] = True
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setitem(providers._PROVIDERS, "broken", fake("broken", crash))
    monkeypatch.setattr(runner.Sweep, "_sync", sync)
    cfg = make_cfg(tmp_path, ["broken", "good"], "run_id=r1")
    with pytest.raises(runner.SweepAborted, match="run_id=r1 to resume"):
        sweep(cfg)
    run_dir = tmp_path / "cpu" / "r1"
    first = _keys(cfg)[0]
    assert records.completed_points(run_dir) == {(first, "broken")}
    broken["on"] = False
    monkeypatch.setitem(providers._PROVIDERS, "broken", fake("broken", _broken))
    sweep(cfg)  # resumes: good measured at the first point, broken not retried there
    df, _ = records.load_run(run_dir)
    assert len(df) == 2 * 2 * 3
    assert set(by(df, "good")["status"]) == {"ok"}


def test_a_resume_with_retry_errors_measures_the_errored_pairs_again(tmp_path: Path) -> None:
    """A transient failure (out of memory, say) is recorded as `error`; a plain resume leaves it,
    one with retry_errors=true measures those pairs again and keeps the others."""
    failing = {"on": True}
    right = _answer()

    def flaky(**kwargs):
        if failing["on"]:
            raise RuntimeError("CUDA out of memory (transient)")
        return right(**kwargs)

    providers.register(fake("flaky", flaky))
    first = make_cfg(tmp_path, ["good", "flaky"], "run_id=r1")
    df, _ = records.load_run(sweep(first))
    assert set(by(df, "flaky")["status"]) == {"error"} and set(by(df, "good")["status"]) == {"ok"}
    failing["on"] = False
    CALLS.clear()
    df, _ = records.load_run(sweep(first))
    assert CALLS.get("flaky", 0) == 0 and set(by(df, "flaky")["status"]) == {"error"}
    df, _ = records.load_run(sweep(make_cfg(tmp_path, ["good", "flaky"], "run_id=r1",
                                            "retry_errors=true")))  # fmt: skip
    assert CALLS["flaky"] > 0 and CALLS.get("good", 0) == 0
    assert set(by(df, "flaky")["status"]) == {"ok"} and len(df) == 2 * 2 * 3
