"""ssdbench's main job: sweep the configured points on this machine's CUDA GPU, cuTile and
mamba_ssm Triton side by side, into results/<gpu-slug>/<run-id>/ (see conf/config.yaml).

    python run_bench.py [sweep=default|paper|models|smoke] [timing=default|quick|thorough]
                        [providers=all|triton|cutile|with_reference] [key=value ...]
    python run_bench.py -m sweep.seqlen=1024,4096      # Hydra multirun: one run per job
    python run_bench.py sweep=default gpus=4           # one sweep over 4 GPUs of this node
    python run_bench.py sweep=models dry_run=true      # what it would measure; no GPU needed
    python run_bench.py -m hydra/launcher=ssdbench_slurm hydra.launcher.partition=gpu
                        run_id=big shard.count=8 'shard.index=range(8)'  # 8 SLURM jobs, one sweep

Before any GPU work it composes and validates every job's config, then checks that a CUDA GPU
exists (not with a hydra/launcher=..., whose jobs check on their own nodes); both failures are one
line on stderr and a non-zero exit (2 and 1), so a typo is named on a machine without a GPU too.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from harness.config import BenchConfig

NO_GPU = (
    "ssdbench: no CUDA GPU found; run_bench.py measures on a GPU. "
    "On this machine run the tests: make test"
)
# Hydra flags that only print information: they need neither a GPU nor a valid sweep.
INFO_FLAGS = {"-h", "--help", "--hydra-help", "--version", "-c", "--cfg", "--info", "-i"}
MULTIRUN_FLAGS = {"-m", "--multirun"}
DRY_RUN_OFF = {"false", "no", "off", "n", "0"}  # what OmegaConf reads as False
CONF_DIR = Path(__file__).resolve().parent / "conf"


def cuda_device_count() -> int:
    """CUDA devices the driver reports, asked through libcuda directly (no torch import)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def _asks_dry_run(arg: str) -> bool:
    """Whether an override may set dry_run (`_task` reads the composed value and checks the GPU
    where it does not): `dry_run=…`, `++dry_run=…`, any value OmegaConf would not read as off."""
    key, _, value = arg.partition("=")
    return key.lstrip("+") == "dry_run" and value.strip("'\"").lower() not in DRY_RUN_OFF


def _fail(message: str, code: int) -> None:
    print(message, file=sys.stderr)
    sys.exit(code)


def _duration(seconds: float) -> str:
    minutes, s = divmod(round(seconds), 60)
    hours, m = divmod(minutes, 60)
    return f"{hours}h{m:02d}m{s:02d}s" if hours else f"{m}m{s:02d}s" if m else f"{seconds:.1f}s"


def _task(cfg: DictConfig) -> None:
    """One Hydra job: build the config object and run the sweep (its shards, with gpus > 1), or
    print its plan (dry_run, where main's preflight did not: --config-name and the like)."""
    from harness import config

    start = time.monotonic()
    try:
        bench = config.to_bench(cfg)
        if bench.dry_run:
            from harness import plan

            print(plan.render(bench), end="")
            return
    except config.ConfigError as exc:
        _fail(f"ssdbench: config error: {exc}", 2)
    count = cuda_device_count()
    if count == 0:  # jobs of a remote launcher land here without the early check
        _fail(NO_GPU, 1)
    try:
        config.check_device(bench, count)
        run_dirs, failure, code = (
            _spread(bench, count) if bench.gpus > 1 else ([_sweep(bench)], "", 0)
        )
    except config.ConfigError as exc:
        _fail(f"ssdbench: config error: {exc}", 2)
    except KeyboardInterrupt:
        _fail("ssdbench: interrupted", 130)
    where = ", ".join(str(d) for d in run_dirs) or "no run directory"
    print(
        f"ssdbench: results in {where}; wall time {_duration(time.monotonic() - start)}",
        file=sys.stderr,
    )
    if failure:
        _fail(failure, code)
    points, names = owned(bench)
    not_passed = failed_line(run_dirs, points, names)
    if not_passed:
        from harness.local_gpus import NOT_PASSED

        if _jobs_share_this_process():  # the jobs after this one still run; main() exits 5
            NOT_PASSED_JOBS.append(not_passed)
            print(not_passed, file=sys.stderr)
            return
        _fail(not_passed, NOT_PASSED)


# Lines of the jobs of an in-process multirun whose pairs did not all pass (main() exits 5).
NOT_PASSED_JOBS: list[str] = []


def _jobs_share_this_process() -> bool:
    """Whether this is one of several Hydra jobs run one after another in this process (a
    multirun on the basic launcher), where an exit would cancel the jobs after it."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    launcher = str(hydra_cfg.launcher.get("_target_", ""))
    return hydra_cfg.mode == RunMode.MULTIRUN and launcher.endswith("BasicLauncher")


def owned(bench: BenchConfig) -> tuple[set[str], set[str]]:
    """(keys of the points this process owns: its shard's, all of the sweep's for gpus > 1 or
    unsharded; the providers it runs): a job answers for these, not for what an earlier sweep
    under the same run_id or another shard measured."""
    from harness import config, sharding

    problems = sharding.select(config.validate(bench), bench.shard.index, bench.shard.count)
    return {problem.key() for problem in problems}, set(bench.providers.names)


def failed_line(run_dirs: list[Path], points: set[str], providers: set[str]) -> str:
    """One line on the (point, provider) pairs of the runs among `points` and `providers` that
    did not pass, "" if none: a run whose every point was measured still fails its job when an
    answer was wrong or errored."""
    from harness import records

    counts: dict[str, int] = {}
    for run_dir in run_dirs:
        table = records.load_run(run_dir)[0]
        table = table[table["point"].isin(points) & table["provider"].isin(providers)]
        for status, pairs in records.failed_pairs(table).items():
            counts[status] = counts.get(status, 0) + len(pairs)
    if not counts:
        return ""
    found = ", ".join(f"{n} {status}" for status, n in counts.items())
    line = f"ssdbench: {found} (point, provider) pair(s) did not pass (their rows say why; "
    if "error" not in counts:
        return line + "report.md lists them)"
    return (
        f"{line}report.md lists them); rerun with run_id={run_dirs[0].name} retry_errors=true "
        "to measure the errors again"
    )


def _sweep(bench: BenchConfig) -> Path:
    """The sweep (or one shard of it) on this process's GPU."""
    from harness import runner

    try:
        return runner.run(bench)
    except runner.SweepAborted as exc:
        _fail(f"ssdbench: stopped: {exc}", 3)
    except runner.OutOfTime as exc:
        _fail(f"ssdbench: stopped: {exc}", 4)


def config_source_args(hydra_cfg) -> list[str]:
    """This job's --config-name and --config-dir, so that its shards compose the same config."""
    args = [f"--config-name={hydra_cfg.job.config_name}"]
    for source in hydra_cfg.runtime.config_sources:
        if source.provider == "command-line":
            args.append(f"--config-dir={source.path.removeprefix('file://')}")
    return args


def _spread(bench: BenchConfig, device_count: int) -> tuple[list[Path], str, int]:
    """The sweep as one shard per GPU of this node, in parallel (harness/local_gpus.py): the run
    directories written, a line on why the run is not complete ("" when it is; a shard that died
    only after recording all its points is a warning) and the exit status it calls for: 3 when
    a shard failed, else 4 when shards stopped at time_limit_s with points left."""
    from hydra.core.hydra_config import HydraConfig

    from harness import local_gpus

    hydra_cfg = HydraConfig.get()
    log_dir = Path(hydra_cfg.runtime.output_dir) / "gpus"
    overrides = [*config_source_args(hydra_cfg), *hydra_cfg.overrides.task]
    outcome = local_gpus.launch(bench, overrides, log_dir, device_count, Path(__file__).resolve())
    if len(outcome.run_dirs) > 1:
        print(
            "ssdbench: warning: this node's GPUs are of different models; each model's shards "
            f"wrote a run of their own, every one with holes: {outcome.run_dirs}",
            file=sys.stderr,
        )
    if outcome.died_after_done and not outcome.failed:
        print(
            f"ssdbench: warning: {len(outcome.died_after_done)} of {bench.gpus} shards died after "
            "recording all their points (above); the run is complete",
            file=sys.stderr,
        )
    if outcome.failed:
        return outcome.run_dirs, (
            f"ssdbench: {len(outcome.failed)} of {bench.gpus} shards failed (logs in {log_dir}); "
            f"rerun the command with run_id={outcome.run_id} to measure what they left"
        ), 3  # fmt: skip
    if outcome.out_of_time:
        stopped = f"ssdbench: stopped: {len(outcome.out_of_time)} of {bench.gpus} shards reached "
        if all("before the first point" in line for line in outcome.out_of_time):
            line = f"{stopped}time_limit_s while setting up (above); raise time_limit_s"
        else:
            line = (
                f"{stopped}time_limit_s with points left; rerun the command with "
                f"run_id={outcome.run_id} to measure them"
            )
        return outcome.run_dirs, line, local_gpus.OUT_OF_TIME
    return outcome.run_dirs, "", 0


def main(args: list[str]) -> None:
    flags = {a.split("=")[0] for a in args if a.startswith("-")}
    try:
        import hydra

        from harness import config  # registers bench_schema in Hydra's ConfigStore
    except ModuleNotFoundError as exc:
        _fail(f"ssdbench: {exc.name} is not installed; set up the environment with: make venv", 1)
    # Other flags (--config-name …) change what the jobs compose to; Hydra reports those itself.
    # The config first, so that a typo is named (exit 2) on a machine without a GPU too.
    preflight = not flags & INFO_FLAGS and flags <= MULTIRUN_FLAGS
    if preflight:
        try:
            jobs = config.preflight(args)
        except config.ConfigError as exc:
            _fail(f"ssdbench: config error: {exc}", 2)
        dry_runs = {job.dry_run for job in jobs}
        if dry_runs == {True, False}:
            _fail("ssdbench: config error: dry_run must be the same in every job", 2)
        if dry_runs == {True}:
            from harness import plan

            print("\n".join(plan.render(job) for job in jobs), end="")
            sys.exit(0)
    if config.uses_slurm(args) and not flags & INFO_FLAGS and not shutil.which("srun"):
        _fail("ssdbench: config error: the SLURM launcher needs srun on PATH (a cluster node)", 2)
    if not flags & INFO_FLAGS:
        # A remote launcher's jobs check on their own nodes; a dry run the preflight did not
        # see (--config-name …) needs no GPU, _task prints its plan.
        remote = any(a.startswith("hydra/launcher=") for a in args)
        dry = not preflight and any(_asks_dry_run(a) for a in args)
        if not (remote or dry) and cuda_device_count() == 0:
            _fail(NO_GPU, 1)
    hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")(_task)()
    if NOT_PASSED_JOBS:
        from harness.local_gpus import NOT_PASSED

        _fail(
            f"ssdbench: {len(NOT_PASSED_JOBS)} job(s) had pairs that did not pass (above)",
            NOT_PASSED,
        )


def exit_without_teardown(code: int | str | None) -> NoReturn:
    """End the process with `code` (as SystemExit would) but skip the interpreter's teardown.

    Everything a run writes is on disk, fsynced, before this is reached; what teardown adds on a
    GPU node is the native libraries' clean-up, and there glibc has aborted finished runs
    ("double free or corruption", "free(): invalid pointer", exit 134) after their last line:
    shards of the H200 sweeps v7, v8 and v11, the 1-GPU resume of v15, a one-point Triton-only
    run (docs/scale-out.md). A script or CI step must see the run's own status instead.
    """
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code or 0)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except SystemExit as exc:
        exit_without_teardown(exc.code)
    exit_without_teardown(0)
