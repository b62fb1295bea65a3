"""Scale-out on CPU: sharding, one GPU per local shard, concurrent writers into one run, resume
across shards, the SLURM launcher config, and mixed GPU models made visible."""

from __future__ import annotations

import errno
import importlib.util
import json
import multiprocessing
import os
import sys
import threading
import time
from pathlib import Path

import pytest
import submitit
from hydra import compose, initialize_config_dir
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from omegaconf import OmegaConf

from harness import config, gate, local_gpus, providers, records, report, runner, sharding
from harness.config import ConfigError
from tests.harness.synthetic import build_run, synthetic_meta, synthetic_table, write_run
from tests.harness.test_runner import CALLS, PEAKS, WallTimer, _answer, fake

REPO = Path(__file__).parents[2]
ENV = {"gpu": {"name": "cpu", "index": None}, "git": {"commit": "abc", "dirty": False}}
SMALL = ["sweep=smoke", "sweep.seqlen=[32,64,128]", "sweep.nheads=[2,4]", "sweep.headdim=8",
         "sweep.dstate=16", "sweep.chunk_size=16", "timing.warmup=1", "timing.min_reps=6",
         "timing.max_reps=6", "timing.kernels_batch=3", "progress=false",
         "providers.names=[good]"]  # fmt: skip


def bench(*overrides: str) -> config.BenchConfig:
    return config.to_bench(config.compose(overrides))


def points(name: str = "default") -> list:
    return config.validate(bench(f"sweep={name}"))


# --- splitting ------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 3, 7, 8, 64, 100])
def test_shards_partition_the_points_exactly_and_evenly(count: int) -> None:
    every = points()
    shards = [sharding.select(every, i, count) for i in range(count)]
    flat = [p for shard in shards for p in shard]
    assert sorted(flat, key=every.index) == every  # every point once, none twice
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    for shard in shards:
        assert shard == sorted(shard, key=every.index)  # sweep order kept inside a shard
    again = points()  # a fresh composition: the split depends on the point list only
    assert shards == [sharding.select(again, i, count) for i in range(count)]


def test_shards_share_the_large_points() -> None:
    """Sweep order deals all the longest sequences to one shard; the cost-ranked deal does not."""
    every = points()
    longest = max(p.seqlen for p in every)
    naive = [sum(p.seqlen == longest for p in every[i::7]) for i in range(7)]
    dealt = [sum(p.seqlen == longest for p in sharding.select(every, i, 7)) for i in range(7)]
    assert max(naive) == 9 and sorted(dealt) == [1, 1, 1, 1, 1, 2, 2]


def test_bad_shard_settings_are_config_errors() -> None:
    for overrides, message in [
        (["shard.count=2"], "shard.count > 1 needs an explicit run_id"),
        (["run_id=r", "shard.count=2", "shard.index=2"], r"shard.index must be in \[0, "),
        (["shard.count=0"], "shard.count must be >= 1"),
        (["gpus=0"], "gpus must be >= 1"),
        (["gpus=2", "run_id=r", "shard.count=2"], "gpus > 1 splits the sweep itself"),
        (["gpus=2", "device=1"], "leave device at 0"),
        (["gpus=2", "resume=true"], "needs the run_id of the run to resume"),
    ]:
        with pytest.raises(ConfigError, match=message):
            config.validate(bench(*overrides))
    config.validate(bench("gpus=2"))  # the launcher picks the run_id itself


# --- one process per GPU ------------------------------------------------------------------------


def test_visible_devices_follow_cuda_visible_devices() -> None:
    assert local_gpus.visible_devices(4, {}) == ["0", "1", "2", "3"]
    assert local_gpus.visible_devices(2, {"CUDA_VISIBLE_DEVICES": "5, 7"}) == ["5", "7"]
    uuids = "GPU-aaaa,GPU-bbbb,GPU-cccc"
    assert local_gpus.visible_devices(3, {"CUDA_VISIBLE_DEVICES": uuids}) == uuids.split(",")


def test_each_shard_gets_a_gpu_of_its_own() -> None:
    gpus = ["GPU-a", "GPU-b", "GPU-c", "GPU-d"]
    for n in range(1, 5):
        chosen = local_gpus.assign(n, gpus)
        assert chosen == gpus[:n] and len(set(chosen)) == n
    with pytest.raises(ConfigError, match=r"gpus=5, but this node shows 4 GPU\(s\)"):
        local_gpus.assign(5, gpus)
    with pytest.raises(ConfigError, match="names a GPU twice"):
        local_gpus.assign(2, ["3", "3"])


def test_shard_overrides_fix_run_id_and_shard(tmp_path: Path) -> None:
    user = ["sweep=smoke", "gpus=2", "run_id=mine", "+shard.index=1", "device=0", "timing=quick"]
    args = [
        local_gpus.shard_overrides(user, "r7", tmp_path / "res", i, 2, tmp_path / "log")
        for i in range(2)
    ]
    for i, shard in enumerate(args):
        assert shard[:2] == ["sweep=smoke", "timing=quick"]
        assert f"shard.index={i}" in shard and "shard.count=2" in shard and "gpus=1" in shard
        assert "run_id=r7" in shard and "run_id=mine" not in shard
        assert f"results_dir='{tmp_path / 'res'}'" in shard
    with initialize_config_dir(config_dir=str(config.CONF_DIR), version_base="1.3"):
        composed = compose("config", overrides=args[1], return_hydra_config=True)
    assert composed.hydra.run.dir == str(tmp_path / "log" / "shard-1")  # each its own
    shard = config.to_bench(config.compose(args[1][:-1]))  # the job config, without hydra.*
    config.validate(shard)
    assert (shard.run_id, shard.shard.index, shard.results_dir) == ("r7", 1, str(tmp_path / "res"))


def test_new_run_id_is_unused_under_every_gpu_model(tmp_path: Path) -> None:
    from datetime import datetime, timezone

    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert local_gpus.new_run_id(tmp_path, "smoke", now) == "smoke-20260102-030405"
    (tmp_path / "nvidia-h200" / "smoke-20260102-030405").mkdir(parents=True)
    assert local_gpus.new_run_id(tmp_path, "smoke", now) == "smoke-20260102-030405-2"


FAKE_RUN_BENCH = """
import json, os, sys, time
args = dict(a.split("=", 1) for a in sys.argv[1:])
start = time.time()
time.sleep(1.5)
out = os.path.join(os.environ["FAKE_OUT"], "shard-" + args["shard.index"] + ".json")
record = {"args": sys.argv[1:], "device": os.environ["CUDA_VISIBLE_DEVICES"], "start": start,
          "end": time.time()}
with open(out, "w") as f:
    json.dump(record, f)
run = os.path.join(args["results_dir"].strip("'"), "cpu", args["run_id"])
os.makedirs(run, exist_ok=True)
with open(os.path.join(run, "meta.json"), "w") as f:
    json.dump({"run_id": args["run_id"]}, f)
if args["shard.index"] == "1":
    print("ssdbench: stopped: the fake shard 1 fails", file=sys.stderr)
    sys.exit(3)
if args["shard.index"] == "0" and os.environ.get("FAKE_NOT_PASSED"):
    print("ssdbench: 1 wrong (point, provider) pair(s) did not pass", file=sys.stderr)
    sys.exit(5)
if args["shard.index"] == "2" and os.environ.get("FAKE_OUT_OF_TIME"):
    print("ssdbench: stopped: time_limit_s=60 reached with 3 of 5 points left", file=sys.stderr)
    sys.exit(4)
if args["shard.index"] == "2" and os.environ.get("FAKE_CRASH_AT_EXIT"):
    import datetime, signal
    os.makedirs(os.path.join(run, "workers"), exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with open(os.path.join(run, "workers", "fake_2.json"), "w") as f:
        json.dump({"shard": {"index": 2, "count": 3}, "started": now, "state": "done"}, f)
    print("ssdbench: results in somewhere", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)
"""


def _launch_fakes(tmp_path: Path, monkeypatch, devices: str, **env: str) -> local_gpus.Outcome:
    """local_gpus.launch of three FAKE_RUN_BENCH shards on `devices`, with `env` set."""
    script = tmp_path / "fake_run_bench.py"
    script.write_text(FAKE_RUN_BENCH)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", devices)
    for key, value in {"FAKE_OUT": str(tmp_path), **env}.items():
        monkeypatch.setenv(key, value)
    cfg = bench("sweep=smoke", f"results_dir={tmp_path / 'results'}", "gpus=3")
    return local_gpus.launch(cfg, ["sweep=smoke", "gpus=3"], tmp_path / "log", 3, script)


def test_local_launch_runs_one_process_per_gpu_at_once(tmp_path: Path, monkeypatch) -> None:
    """With a stand-in for run_bench.py: every shard on its own GPU of a fake list, all at the
    same time, into one run_id; a failing shard is reported."""
    outcome = _launch_fakes(tmp_path, monkeypatch, "5,7,9")
    shards = [json.loads((tmp_path / f"shard-{i}.json").read_text()) for i in range(3)]
    assert [s["device"] for s in shards] == ["5", "7", "9"]
    assert all(f"shard.index={i}" in s["args"] for i, s in enumerate(shards))
    assert len({a for s in shards for a in s["args"] if a.startswith("run_id=")}) == 1
    assert max(s["start"] for s in shards) < min(s["end"] for s in shards)  # ran in parallel
    assert outcome.run_id.startswith("smoke-")
    assert outcome.run_dirs == [tmp_path / "results" / "cpu" / outcome.run_id]
    assert (
        len(outcome.failed) == 1 and "shard 1 (GPU 7) failed (exit status 3)" in outcome.failed[0]
    )
    assert "ssdbench: stopped: the fake shard 1 fails" in outcome.failed[0]


def test_a_shard_whose_pairs_did_not_all_pass_finished_its_work(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """Exit 5 (every point measured, some answer wrong or an error) is no shard failure: the
    launcher counts those pairs over the whole run itself (run_bench.failed_line)."""
    outcome = _launch_fakes(tmp_path, monkeypatch, "0,1,2", FAKE_NOT_PASSED="1")
    assert [line[:8] for line in outcome.failed] == ["shard 1 "]
    assert "ssdbench: shard 0 finished" in capsys.readouterr().err


def test_a_shard_stopped_by_its_time_limit_did_not_fail(tmp_path: Path, monkeypatch) -> None:
    """Exit 4 (time_limit_s reached, what was measured recorded) is no failure: the run is
    resumed by its run_id, and run_bench.py exits 4 for it, not 3."""
    outcome = _launch_fakes(tmp_path, monkeypatch, "0,1,2", FAKE_OUT_OF_TIME="1")
    assert [line[:8] for line in outcome.failed] == ["shard 1 "]
    assert outcome.out_of_time == [
        "shard 2 (GPU 2): ssdbench: stopped: time_limit_s=60 reached with 3 of 5 points left"
    ]


@pytest.mark.parametrize(
    ("failed", "reached", "code"),
    [([], "with 3 of 5 points left", 4), ([], "before the first point", 4),
     (["shard 0 (GPU 0) failed"], "with 3 of 5 points left", 3)],
)  # fmt: skip
def test_gpus_2_exits_4_when_shards_ran_out_of_time(
    tmp_path, monkeypatch, capsys, failed: list[str], reached: str, code: int
) -> None:
    """A failed shard outranks one out of time (3: something broke); alone, out of time is 4,
    and a rerun is advised only where it would measure something."""
    module = _run_bench()
    monkeypatch.setattr(module, "cuda_device_count", lambda: 2)
    monkeypatch.chdir(tmp_path)
    run = build_run(tmp_path, run_id="smoke-2gpu")
    stopped = [f"shard 1 (GPU 1): ssdbench: stopped: time_limit_s=60 reached {reached}"]
    outcome = local_gpus.Outcome("smoke-2gpu", [run], failed=failed, out_of_time=stopped)
    monkeypatch.setattr(local_gpus, "launch", lambda *args: outcome)
    args = ["sweep=smoke", "timing=quick", "run_id=smoke-2gpu", "gpus=2"]
    monkeypatch.setattr(sys, "argv", ["run_bench.py", *args])
    with pytest.raises(SystemExit) as exit_:
        module.main(args)
    assert exit_.value.code == code
    last = capsys.readouterr().err.strip().splitlines()[-1]
    if code == 4 and reached.startswith("with"):
        assert last == (
            "ssdbench: stopped: 1 of 2 shards reached time_limit_s with points left; rerun the "
            "command with run_id=smoke-2gpu to measure them"
        )
    elif code == 4:
        assert last == (
            "ssdbench: stopped: 1 of 2 shards reached time_limit_s while setting up (above); "
            "raise time_limit_s"
        )


def test_a_shard_that_crashes_after_its_last_word_is_told_apart(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """A shard killed after printing its results line (a crash at interpreter exit, say) whose
    worker record says done is a warning, not a failure: its points are all in the run. It is
    still reported with the signal, so its normal-looking last line does not hide what happened.
    The end of each such or failed shard's log is printed, since the log stays where the shards
    ran."""
    outcome = _launch_fakes(tmp_path, monkeypatch, "0,1,2", FAKE_CRASH_AT_EXIT="1")
    assert outcome.died_after_done == [
        "shard 2 (GPU 2) died (killed by SIGSEGV) after recording all its points: "
        "ssdbench: results in somewhere"
    ]
    assert len(outcome.failed) == 1
    assert outcome.failed[0].startswith("shard 1 (GPU 1) failed (exit status 3): ")
    err = capsys.readouterr().err
    assert f"ssdbench: warning: {outcome.died_after_done[0]}" in err
    after_header = err[err.index("the end of shard 1's output") :].splitlines()[1]
    assert after_header == "  | ssdbench: stopped: the fake shard 1 fails"
    assert "  | Traceback" not in err
    assert "the end of shard 2's output" in err and "the end of shard 0's output" not in err


STUBBORN_SHARD = """
import os, sys, time
args = dict(a.split("=", 1) for a in sys.argv[1:])
out = os.environ["FAKE_OUT"]
try:
    with open(os.path.join(out, "pid-" + args["shard.index"]), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(120)
except KeyboardInterrupt:
    open(os.path.join(out, "interrupted-" + args["shard.index"]), "w").close()
"""

LAUNCHER = """
import sys
from pathlib import Path
from harness import config, local_gpus
results, log, script = sys.argv[1:]
cfg = config.to_bench(config.compose(["sweep=smoke", "results_dir=" + results, "gpus=2"]))
local_gpus.launch(cfg, ["sweep=smoke", "gpus=2"], Path(log), 2, Path(script))
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_a_launcher_stopped_or_killed_leaves_no_shard_measuring(tmp_path: Path, sig: str) -> None:
    """Interrupted (kill -INT, a CI cancel's SIGTERM) the launcher stops every shard and waits
    for it before printing the line to rerun; killed outright, the kernel stops them (Linux).
    A shard left measuring would share its GPU with the rerun's."""
    import signal
    import subprocess

    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN_SHARD)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0,1", "FAKE_OUT": str(tmp_path)}
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(tmp_path / "res"), str(tmp_path / "log"), str(script)],
        cwd=REPO, env=env, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as from a terminal
    )  # fmt: skip
    pids = [tmp_path / f"pid-{i}" for i in range(2)]
    deadline = time.monotonic() + 60
    while not all(p.exists() and p.read_text() for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    launcher.send_signal(getattr(signal, sig))
    _, err = launcher.communicate(timeout=120)
    assert launcher.returncode != 0
    for i, pid in enumerate(int(p.read_text()) for p in pids):
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), f"shard {i} still running after {sig}"
        assert (tmp_path / f"interrupted-{i}").exists()  # told to stop, not killed
    if sig != "SIGKILL":
        assert "interrupted; rerun with run_id=smoke-" in err


def test_stop_kills_a_shard_that_ignores_the_interrupt_and_what_it_started(tmp_path) -> None:
    """A shard stuck where SIGINT does nothing, and a worker it started (compile processes), are
    killed once the grace is over, even if the launcher is interrupted again meanwhile."""
    import signal

    code = (
        "import signal, subprocess, sys, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        "print(child.pid, flush=True); time.sleep(120)"
    )
    log = tmp_path / "shard.log"
    process = local_gpus._start([sys.executable, "-c", code], "0", log)
    deadline = time.monotonic() + 30
    while not log.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.1)
    grandchild = int(log.read_text().split()[0])
    shard = local_gpus.Shard(0, "0", log, process)
    previous = signal.signal(signal.SIGTERM, local_gpus._interrupt)
    try:
        again = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
        again.start()  # a second interrupt, during the grace
        local_gpus.stop([shard], grace_s=1.0)
        again.join()
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert process.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(grandchild)


def test_a_shard_killed_by_a_real_time_signal_is_reported() -> None:
    assert local_gpus._failure(-40) == "killed by signal 40"
    assert local_gpus._failure(-9) == "killed by SIGKILL"


def test_gpus_2_starts_a_shard_per_gpu_and_reports_failures(tmp_path, monkeypatch, capsys) -> None:
    """run_bench.py's gpus=2 path through Hydra on CPU: the shards (real run_bench.py processes)
    find no GPU here and fail; the launcher says so, with the run_id to rerun and the wall time."""
    module = _run_bench()
    monkeypatch.setattr(module, "cuda_device_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.chdir(tmp_path)
    args = ["sweep=smoke", "timing=quick", "run_id=smoke-2gpu", "gpus=2"]
    monkeypatch.setattr(sys, "argv", ["run_bench.py", *args])
    with pytest.raises(SystemExit) as exit_:
        module.main(args)
    err = capsys.readouterr().err
    assert exit_.value.code == 3, err
    assert "shard 0 of 2 on GPU 0" in err and "shard 1 of 2 on GPU 1" in err
    # Each shard's exit status and own last word.
    assert err.count("failed (exit status 1): ssdbench: no CUDA GPU found") == 2
    assert "wall time" in err
    assert err.strip().splitlines()[-1].startswith("ssdbench: 2 of 2 shards failed")
    assert "run_id=smoke-2gpu" in err.strip().splitlines()[-1]


def test_gpus_2_exits_0_when_shards_died_only_after_recording_everything(
    tmp_path, monkeypatch, capsys
) -> None:
    """A run whose shards all recorded their points is complete: run_bench.py warns about the
    shard that died at exit instead of failing the job (which would fail a CI pipeline over a
    complete table)."""
    module = _run_bench()
    monkeypatch.setattr(module, "cuda_device_count", lambda: 2)
    monkeypatch.chdir(tmp_path)
    died = "shard 1 (GPU 1) died (killed by SIGABRT) after recording all its points: ssdbench: …"
    run = build_run(tmp_path, run_id="smoke-2gpu")
    outcome = local_gpus.Outcome("smoke-2gpu", [run], died_after_done=[died])
    monkeypatch.setattr(local_gpus, "launch", lambda *args: outcome)
    args = ["sweep=smoke", "timing=quick", "run_id=smoke-2gpu", "gpus=2"]
    monkeypatch.setattr(sys, "argv", ["run_bench.py", *args])
    module.main(args)  # no SystemExit
    err = capsys.readouterr().err
    assert "ssdbench: warning: 1 of 2 shards died after recording all their points" in err
    assert "shards failed" not in err


# --- one run directory, several writers ---------------------------------------------------------


def _register_fakes() -> None:
    providers.register(fake("good", _answer()))


def _sweep(tmp_path: Path, *overrides: str, timer: WallTimer | None = None) -> Path:
    cfg = bench(*SMALL, f"results_dir={tmp_path}", *overrides)
    return runner.run(cfg, device="cpu", timer=timer or WallTimer(), peaks=PEAKS, env=ENV)


def _shard_process(tmp_path: str, index: int, count: int, barrier) -> None:
    """One shard in a process of its own (spawned: no state shared with the test)."""
    _register_fakes()
    barrier.wait(timeout=120)  # both shards open the run together
    _sweep(Path(tmp_path), "run_id=shared", f"shard.index={index}", f"shard.count={count}")


@pytest.fixture
def good(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(providers, "_PROVIDERS", dict(providers._PROVIDERS))
    _register_fakes()
    CALLS.clear()


def _pairs(df) -> set[tuple[str, str, str]]:
    return set(zip(df["point"], df["provider"], df["mode"], strict=True))


def test_two_shards_at_once_fill_one_run_like_a_single_process(tmp_path: Path, good) -> None:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    procs = [
        context.Process(target=_shard_process, args=(str(tmp_path), i, 2, barrier))
        for i in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=180)
    assert [p.exitcode for p in procs] == [0, 0]
    run_dir = tmp_path / "cpu" / "shared"
    merged, meta = records.load_run(run_dir)
    consolidated, _ = records.load_run(run_dir / records.RESULTS_FILE)  # the last one's table
    single, _ = records.load_run(_sweep(tmp_path, "run_id=single"))
    assert _pairs(merged) == _pairs(consolidated) == _pairs(single)
    assert len(merged) == len(single) == 6 * 3  # every point once
    workers = meta["workers"]
    assert sorted(w["shard"]["index"] for w in workers) == [0, 1]
    assert {w["state"] for w in workers} == {"done"} and sum(w["measured"] for w in workers) == 6
    assert set(merged["worker"]) == {w["worker"] for w in workers}
    assert not list(run_dir.rglob(".*.tmp"))


def _open(tmp_path: str, queue, barrier) -> None:
    def slow_peaks() -> dict:
        time.sleep(0.5)  # a window for a second creator, were there no lock
        return {"by": os.getpid()}

    cfg = bench(*SMALL, f"results_dir={tmp_path}", "run_id=r")
    env = {**ENV, "hostname": str(os.getpid())}
    barrier.wait(timeout=120)
    queue.put(runner.open_run(cfg, env, slow_peaks)[1])


def test_meta_json_is_created_once_when_shards_start_together(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    queue, barrier = context.Queue(), context.Barrier(3)
    procs = [context.Process(target=_open, args=(str(tmp_path), queue, barrier)) for _ in range(3)]
    for p in procs:
        p.start()
    metas = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    on_disk = records.read_meta(tmp_path / "cpu" / "r")
    assert all(m == on_disk for m in metas)  # one creator; the others read what it wrote


def test_without_file_locks_the_run_is_still_written(tmp_path: Path, monkeypatch) -> None:
    def no_locks(f, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(records.fcntl, "lockf", no_locks)
    run_dir = build_run(tmp_path)
    with pytest.warns(UserWarning, match="cannot lock .*going on unlocked"):
        records.consolidate(run_dir)
    assert len(records.load_run(run_dir / records.RESULTS_FILE)[0]) > 0


def test_new_runs_started_in_the_same_second_get_their_own_directories(tmp_path: Path) -> None:
    dirs = {runner._new_run_dir(tmp_path, "smoke") for _ in range(3)}
    assert len(dirs) == 3 and all(d.is_dir() for d in dirs)


def test_rerunning_fills_the_holes_a_dead_shard_left(tmp_path: Path, monkeypatch, good) -> None:
    every = [p.key() for p in config.validate(bench(*SMALL))]
    _sweep(tmp_path, "run_id=r", "shard.index=0", "shard.count=2")
    per_point = CALLS["good"] // 3  # the same for every point of this sweep (fixed reps)
    real = runner.Sweep.point
    calls = {"n": 0}

    def die_on_second(self, problem, provs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # the worker dies with this point in flight
        return real(self, problem, provs)

    monkeypatch.setattr(runner.Sweep, "point", die_on_second)
    monkeypatch.setattr(runner, "worker_id", lambda: "host:2")  # another process, in effect
    with pytest.raises(KeyboardInterrupt):
        _sweep(tmp_path, "run_id=r", "shard.index=1", "shard.count=2")
    run_dir = tmp_path / "cpu" / "r"
    assert len(records.completed_points(run_dir)) == 4  # shard 0's three and shard 1's first
    states = {w["shard"]["index"]: w["state"] for w in records.read_workers(run_dir)}
    assert states == {0: "done", 1: "interrupted"}
    monkeypatch.setattr(runner.Sweep, "point", real)
    before = CALLS["good"]
    _sweep(tmp_path, "run_id=r")  # the whole sweep in one process: only the holes are measured
    assert CALLS["good"] - before == 2 * per_point
    assert records.completed_points(run_dir) == {(p, "good") for p in every}


def test_a_killed_workers_record_counts_the_points_it_wrote(
    tmp_path: Path, monkeypatch, good
) -> None:
    real = runner.Sweep.point
    seen = []

    def read_record_first(self, problem, provs):
        seen.append([(w["state"], w["measured"]) for w in records.read_workers(self.run_dir)])
        return real(self, problem, provs)

    monkeypatch.setattr(runner.Sweep, "point", read_record_first)
    _sweep(tmp_path, "run_id=r")
    points = len(config.validate(bench(*SMALL)))
    assert seen == [[("running", i)] for i in range(points)]  # what a kill at each point leaves


# --- SLURM ------------------------------------------------------------------------------------


def test_slurm_launcher_asks_one_gpu_per_array_task(tmp_path: Path, monkeypatch) -> None:
    """conf/hydra/launcher/ssdbench_slurm.yaml through submitit's own sbatch writer, the way
    hydra-submitit-launcher hands it over (no SLURM needed)."""
    overrides = ["hydra/launcher=ssdbench_slurm", "hydra.launcher.partition=gpu",
                 "hydra.launcher.account=acct", "hydra.launcher.timeout_min=90"]  # fmt: skip
    with initialize_config_dir(config_dir=str(config.CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
    params = OmegaConf.to_container(cfg.hydra.launcher)
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 2))
    executor = submitit.AutoExecutor(
        cluster="slurm", folder=tmp_path, slurm_max_num_timeout=params["max_num_timeout"]
    )
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    skip = {"_target_", "submitit_folder", "max_num_timeout"}
    executor.update_parameters(
        **{k if k in base else f"slurm_{k}": v for k, v in params.items() if k not in skip}
    )
    slurm = executor._executor
    slurm.parameters["map_count"] = 8
    sbatch = slurm._make_submission_file_text("python -m submitit.core._submit x", "uid")
    wanted = ["--gpus-per-node=1", "--ntasks-per-node=1", "--nodes=1", "--partition=gpu",
              "--account=acct", "--time=90", "--array=0-7%8", "--job-name=ssdbench"]  # fmt: skip
    for line in wanted:
        assert f"#SBATCH {line}\n" in sbatch, line


def _run_bench():
    spec = importlib.util.spec_from_file_location("run_bench", REPO / "run_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_slurm_submission_needs_no_gpu_on_the_login_node(monkeypatch, capsys) -> None:
    module = _run_bench()
    monkeypatch.setattr(module, "cuda_device_count", lambda: 0)
    launched = []
    monkeypatch.setattr("hydra.main", lambda **kwargs: lambda task: lambda: launched.append(task))
    args = ["-m", "hydra/launcher=ssdbench_slurm", "run_id=big", "shard.count=2",
            "shard.index=range(2)"]  # fmt: skip
    monkeypatch.setattr(module.shutil, "which", lambda name: None)  # off a cluster
    with pytest.raises(SystemExit) as exit_:
        module.main(args)
    assert exit_.value.code == 2 and "needs srun on PATH" in capsys.readouterr().err
    monkeypatch.setattr(module.shutil, "which", lambda name: f"/usr/bin/{name}")
    module.main(args)
    assert launched == [module._task]  # submitted; the jobs check for their GPU themselves
    with pytest.raises(SystemExit) as exit_:
        module.main([a for a in args if a != "run_id=big"])
    assert exit_.value.code == 2
    assert "shard.count > 1 needs an explicit run_id" in capsys.readouterr().err


def test_wall_time_reads_well() -> None:
    module = _run_bench()
    assert [module._duration(s) for s in (4.25, 75, 3725)] == ["4.2s", "1m15s", "1h02m05s"]


# --- GPU models never mix silently ------------------------------------------------------------


def _mixed_run(root: Path) -> Path:
    table = synthetic_table(run_id="mixed")
    half = table["seqlen"] == table["seqlen"].max()
    table.loc[half, "gpu_name"] = "NVIDIA H100 80GB HBM3"
    return write_run(root / "mixed", table, synthetic_meta("mixed"))


def test_gate_refuses_a_run_that_mixes_gpus(tmp_path: Path, capsys) -> None:
    base, mixed = build_run(tmp_path / "base"), _mixed_run(tmp_path)
    code = gate.main(["--baseline", str(base), "--candidate", str(mixed)])
    err = capsys.readouterr().err
    assert code == 2 and "candidate" in err and "mixes GPUs" in err and "H100" in err
    assert gate.main(["--baseline", str(mixed), "--candidate", str(mixed)]) == 2
    allowed = ["--baseline", str(mixed), "--candidate", str(mixed), "--allow-different-gpus"]
    assert gate.main(allowed) == 0


def test_report_warns_about_mixed_gpus_and_lists_workers(tmp_path: Path) -> None:
    mixed = _mixed_run(tmp_path)
    gpu = {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-x"}
    env = {"hostname": "node1", "cuda_visible_devices": "1", "gpu": gpu}
    worker = {"worker": "node1:42", "shard": {"index": 1, "count": 2}, "state": "done",
              "measured": 3, "env": env}  # fmt: skip
    records.write_worker(mixed, worker)
    assert report.main([str(mixed)]) == 0
    text = (mixed / "report.md").read_text()
    assert "Warning: the rows were measured on 2 GPU models" in text
    assert "| node1:42 | 1 of 2 | NVIDIA H100 80GB HBM3 | GPU-x | node1 | 1 | done | 3 |" in text
    _, meta = records.load_run(records.consolidate(mixed))  # worker records travel in the file
    assert meta["workers"] == [worker]


def test_rows_name_the_worker_gpu_not_the_run_creator(tmp_path: Path, good) -> None:
    run_dir = _sweep(tmp_path, "run_id=r", "shard.index=0", "shard.count=2")
    meta = records.read_meta(run_dir)
    meta["env"] = {**meta["env"], "gpu": {"name": "another GPU"}}
    records.write_meta(run_dir, meta)  # as if a GPU of another name had created the run
    _sweep(tmp_path, "run_id=r", "shard.index=1", "shard.count=2")
    df, _ = records.load_run(run_dir)
    assert set(df["gpu_name"]) == {"cpu"}


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
