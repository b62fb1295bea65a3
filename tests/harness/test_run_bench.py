"""run_bench.py on a machine without a CUDA GPU: one line, non-zero exit, no traceback; config
errors are one line too, before any GPU work."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]
SCRIPT = REPO / "run_bench.py"


def run_script(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def load_module():
    spec = importlib.util.spec_from_file_location("run_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(load_module().cuda_device_count() > 0, reason="this machine has a CUDA GPU")
@pytest.mark.parametrize("args", [(), ("sweep=smoke", "timing=quick"), ("-m", "sweep.seqlen=1,2")])
def test_without_a_gpu_it_exits_at_once_with_one_line(args: tuple[str, ...]) -> None:
    done = run_script(*args)
    assert done.returncode != 0
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "ssdbench: no CUDA GPU found; run_bench.py measures on a GPU. "
        "On this machine run the tests: make test"
    ]


def test_a_dry_run_needs_no_gpu(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """dry_run=true prints each job's plan (harness/plan.py) and exits 0 before the GPU check."""
    module = load_module()
    monkeypatch.setattr(module, "cuda_device_count", lambda: 0)
    with pytest.raises(SystemExit) as exit_:
        module.main(["-m", "dry_run=true", "sweep=smoke,paper"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "sweep smoke: 4 of 4 points x 2 providers" in out
    assert "sweep paper: 15 of 15 points x 2 providers" in out
    with pytest.raises(SystemExit) as exit_:
        module.main(["-m", "dry_run=true,false", "sweep=smoke"])
    assert exit_.value.code == 2
    assert "dry_run must be the same in every job" in capsys.readouterr().err


@pytest.mark.skipif(load_module().cuda_device_count() > 0, reason="this machine has a CUDA GPU")
def test_a_dry_run_past_the_preflight_is_a_dry_run_too(tmp_path: Path) -> None:
    """With --config-name the preflight is Hydra's, and the job itself prints the plan: it must
    never start a sweep (nor want a GPU)."""
    out = f"hydra.run.dir={tmp_path}"
    done = run_script("--config-name=config", "dry_run=true", "sweep=smoke", out)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("sweep smoke: 4 of 4 points x 2 providers")
    done = run_script("--config-name=config", "dry_run=false", "sweep=smoke", out)
    assert done.returncode == 1 and "no CUDA GPU found" in done.stderr


@pytest.mark.parametrize(
    ("arg", "asks"),
    [("dry_run=true", True), ("++dry_run=True", True), ("dry_run=y", True), ("dry_run='1'", True),
     ("dry_run=false", False), ("dry_run=Off", False), ("sweep=dry_run", False)],
)  # fmt: skip
def test_which_overrides_may_ask_for_a_dry_run(arg: str, asks: bool) -> None:
    assert load_module()._asks_dry_run(arg) is asks


def test_printing_the_config_needs_no_gpu() -> None:
    done = run_script("--cfg", "job", "sweep=models")
    assert done.returncode == 0, done.stderr
    assert "name: models" in done.stdout and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["sweep.seqlen=-1"], "ssdbench: config error: sweep: seqlen must be >= 1, got -1"),
        (["sweep.seqlenn=1"], "ssdbench: config error: Could not override 'sweep.seqlenn'."),
        (["-m", "sweep.seqlen=1024,-1"], "ssdbench: config error: sweep: seqlen must be >= 1"),
        (["hydra/launcher=slrum"], "ssdbench: config error: In 'hydra/config': Could not find"),
        (["hydra.launcher.partition=gpu"], "ssdbench: config error: Could not override 'hydra."),
    ],
)
@pytest.mark.parametrize("gpus", [1, 0])
def test_config_errors_are_one_line_before_any_gpu_work(
    args: list[str], message: str, gpus: int, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Also without a GPU: a typo is named (exit 2) before the missing GPU (exit 1)."""
    module = load_module()
    monkeypatch.setattr(module, "cuda_device_count", lambda: gpus)
    with pytest.raises(SystemExit) as exit_:
        module.main(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(message)


@pytest.mark.parametrize(
    "code,status,err", [(3, 3, ""), (None, 0, ""), ("stopped", 1, "stopped\n")]
)
def test_the_exit_keeps_the_status_and_output_but_skips_teardown(code, status, err) -> None:
    program = (
        "import atexit, sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "import run_bench\n"
        "atexit.register(print, 'teardown ran')\n"
        "print('last line', end='')  # still buffered: the exit must flush it\n"
        f"run_bench.exit_without_teardown({code!r})\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (status, "last line", err)


@pytest.mark.parametrize(
    ("error", "status"),
    [("SweepAborted", 3), ("OutOfTime", 4)],
)
def test_a_sweep_that_stops_early_exits_with_its_own_status_in_one_line(
    error: str, status: int, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """A broken CUDA context (3) and the time limit (4) both leave a resumable run; a script
    tells them apart by the status."""
    from harness import config, runner

    def stop(bench):
        raise getattr(runner, error)("left 3 of 5 points; rerun with run_id=r1")

    monkeypatch.setattr(runner, "run", stop)
    with pytest.raises(SystemExit) as exit_:
        load_module()._sweep(config.BenchConfig())
    assert exit_.value.code == status
    err = capsys.readouterr().err
    assert err == "ssdbench: stopped: left 3 of 5 points; rerun with run_id=r1\n"


def test_a_run_with_errors_or_wrong_answers_says_so_in_one_line(tmp_path: Path) -> None:
    """Every point measured is not every point passed: the job's last line counts those that did
    not (exit 5 in _task) and names the resume that measures the errors again."""
    from tests.harness.synthetic import build_run, synthetic_meta, synthetic_table, write_run

    module = load_module()
    both = {"cutile", "triton"}
    clean = build_run(tmp_path, run_id="clean")
    assert module.failed_line([clean], set(synthetic_table()["point"]), both) == ""
    table = synthetic_table(run_id="mixed")
    table.loc[(table["provider"] == "cutile") & (table["seqlen"] == 1024), "status"] = "error"
    table.loc[(table["provider"] == "triton") & (table["seqlen"] == 4096), "status"] = "wrong"
    mixed = write_run(tmp_path / "mixed", table, synthetic_meta("mixed"))
    points = set(table["point"])
    assert module.failed_line([mixed], points, both) == (
        "ssdbench: 4 error, 4 wrong (point, provider) pair(s) did not pass (their rows say why; "
        "report.md lists them); rerun with run_id=mixed retry_errors=true to measure the errors "
        "again"
    )
    # a job answers for its own points and providers, not another shard's or an earlier sweep's
    others = set(table.loc[table["seqlen"] == 16384, "point"])
    assert module.failed_line([mixed], others, both) == ""
    one = set(table.loc[table["seqlen"] == 1024, "point"][:1])
    assert module.failed_line([mixed], one, both).startswith("ssdbench: 1 error (point, provider)")
    # wrong answers only: retrying would change nothing, so no retry is offered
    assert module.failed_line([mixed], points, {"triton"}) == (
        "ssdbench: 4 wrong (point, provider) pair(s) did not pass (their rows say why; "
        "report.md lists them)"
    )


def test_shards_compose_the_config_their_launcher_composed() -> None:
    """gpus=N with --config-name/--config-dir: each shard is started with them, or it would
    measure conf/config.yaml's sweep instead."""
    from types import SimpleNamespace as NS

    hydra_cfg = NS(
        job=NS(config_name="mine"),
        runtime=NS(
            config_sources=[
                NS(provider="hydra", path="pkg://hydra.conf"),
                NS(provider="main", path="file:///repo/conf"),
                NS(provider="command-line", path="file:///tmp/conf2"),
            ]
        ),
    )
    assert load_module().config_source_args(hydra_cfg) == [
        "--config-name=mine",
        "--config-dir=/tmp/conf2",
    ]


def test_a_multirun_job_whose_pairs_did_not_pass_lets_the_next_jobs_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit 5 from the first job would cancel the others (the basic launcher runs them in this
    process): the process exits 5 after the last job instead."""
    module = load_module()
    jobs = []
    monkeypatch.setattr(module, "cuda_device_count", lambda: 1)
    monkeypatch.setattr(module, "_sweep", lambda bench: jobs.append(bench.sweep.seqlen) or tmp_path)
    monkeypatch.setattr(module, "owned", lambda bench: (set(), set()))
    monkeypatch.setattr(module, "failed_line", lambda dirs, points, names: "ssdbench: 1 wrong")
    monkeypatch.chdir(tmp_path)
    args = ["-m", "sweep=smoke", "sweep.seqlen=1024,2048", f"hydra.sweep.dir={tmp_path / 'mr'}"]
    monkeypatch.setattr(sys, "argv", ["run_bench.py", *args])
    with pytest.raises(SystemExit) as exit_:
        module.main(args)
    assert exit_.value.code == 5 and jobs == [1024, 2048]
