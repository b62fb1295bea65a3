"""`gpus=N`: one sweep spread over N GPUs of this node, exactly one measuring process per GPU.

Two processes timing on one GPU corrupt each other's numbers. So the sweep is split into N shards
(harness/sharding.py) and shard i runs as its own `run_bench.py` process that sees only the i-th
GPU (CUDA_VISIBLE_DEVICES), started and watched by submitit's LocalExecutor (one job per shard,
its log under this job's Hydra output directory). submitit's own GPU option is not used: it gives
every job of an executor the same GPUs, which would stack all shards on GPU 0.

The run_id is fixed here, before any shard starts, so that all of them write into one run
directory (a new `<sweep>-<UTC date-time>` one when none is given). Each shard skips the points
already there, so rerunning the same command with that run_id fills the holes a failed shard left.
Once every shard has ended the run is consolidated a last time.

A shard that dies after its worker record says `done` (every point it owned measured, checked and
written) is a warning, not a failure: its part of the run is complete, and a rerun would measure
nothing. H200 shards of default-h200-v7 to v9 did this at interpreter exit, after their last
line (glibc's "double free or corruption" in v7 and v8, SIGSEGV in v9). The signal and the
shard's last lines are still printed.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from harness import environment, records
from harness.config import BenchConfig, ConfigError

# Overrides the launcher sets for each shard; the user's values for these are dropped.
OWNED_KEYS = {"gpus", "run_id", "results_dir", "device", "shard", "shard.index", "shard.count"}
TIMEOUT_MIN = 7 * 24 * 60  # submitit kills local jobs after 2 minutes unless told otherwise
POLL_S = 2.0  # how often the finished shards are looked for


@dataclass
class Outcome:
    """What the shards left: the run directories they wrote (one, unless the GPUs are of different
    models: runs are kept per GPU model), a line for each shard that failed, and one for each
    shard that died only after recording all its points."""

    run_id: str
    run_dirs: list[Path] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    died_after_done: list[str] = field(default_factory=list)


def visible_devices(count: int, environ: Mapping[str, str]) -> list[str]:
    """CUDA_VISIBLE_DEVICES entries of the `count` GPUs this process sees (indices, UUIDs or MIG
    ids, as the variable spells them; 0..count-1 when it is unset)."""
    spelled = environ.get("CUDA_VISIBLE_DEVICES")
    if spelled is None:
        return [str(i) for i in range(count)]
    return [d.strip() for d in spelled.split(",") if d.strip()][:count]


def assign(gpus: int, devices: Sequence[str]) -> list[str]:
    """The device of each of `gpus` shards: shard i alone on devices[i]."""
    if gpus > len(devices):
        shown = ",".join(devices) or "none"
        raise ConfigError(f"gpus={gpus}, but this node shows {len(devices)} GPU(s) ({shown})")
    chosen = list(devices[:gpus])
    if len(set(chosen)) != gpus:
        raise ConfigError(f"CUDA_VISIBLE_DEVICES names a GPU twice: {','.join(devices)}")
    return chosen


def new_run_id(results_dir: Path, name: str, now: datetime) -> str:
    """records.new_run_id, not yet used by a run of any GPU model under results_dir."""
    return records.new_run_id(name, now, lambda run_id: not any(results_dir.glob(f"*/{run_id}")))


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def shard_overrides(
    overrides: Sequence[str], run_id: str, results_dir: Path, index: int, count: int, log_dir: Path
) -> list[str]:
    """The command-line overrides of shard `index`: the user's, minus those the launcher owns."""
    kept = [o for o in overrides if _key(o) not in OWNED_KEYS and not _key(o).startswith("hydra")]
    return [
        *kept,
        f"run_id={run_id}",
        f"results_dir='{results_dir}'",
        "gpus=1",
        f"shard.index={index}",
        f"shard.count={count}",
        f"hydra.run.dir='{log_dir / f'shard-{index}'}'",
    ]


TAIL_LINES = 20  # of a failed shard's own output, printed: its log stays where it ran


def _shard_output(log: Path) -> list[str]:
    """The shard's own lines in its submitit log: after submitit's line with the command, before
    submitit's own report of how the job ended (a traceback of submitit's, when it failed)."""
    try:
        lines = log.read_text(errors="replace").replace("\r", "\n").splitlines()
    except OSError:
        return []
    sent = [i for i, line in enumerate(lines) if line.startswith("The following command is sent")]
    start = sent[0] + 1 if sent else 0
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("submitit ")), None)
    return [line for line in lines[start:end] if line.strip()]


def _last_message(log: Path) -> str:
    """The shard's last `ssdbench:` line (its own one-line verdict), if its log has one."""
    lines = _shard_output(log)
    return next((line for line in reversed(lines) if line.startswith("ssdbench:")), "")


def launch(
    cfg: BenchConfig, overrides: Sequence[str], log_dir: Path, device_count: int, script: Path
) -> Outcome:
    """Run cfg.gpus shards of the sweep in parallel, one per GPU, and wait for all of them.

    overrides: the job's command-line overrides (Hydra's hydra.overrides.task); log_dir: where
    the shards' logs and Hydra outputs go; script: run_bench.py.
    """
    import submitit

    devices = assign(cfg.gpus, visible_devices(device_count, os.environ))
    results_dir = Path(cfg.results_dir).resolve()
    run_id = cfg.run_id or new_run_id(results_dir, cfg.sweep.name, datetime.now(timezone.utc))
    executor = submitit.LocalExecutor(folder=log_dir / "submitit")
    executor.update_parameters(timeout_min=TIMEOUT_MIN, stderr_to_stdout=True)
    started = environment.now_utc()
    jobs = []
    for index, device in enumerate(devices):
        args = shard_overrides(overrides, run_id, results_dir, index, cfg.gpus, log_dir)
        command = submitit.helpers.CommandFunction(
            [sys.executable, str(script), *args],
            cwd=os.getcwd(),
            env={**os.environ, "CUDA_VISIBLE_DEVICES": device},
        )
        jobs.append(executor.submit(command))
        print(
            f"ssdbench: shard {index} of {cfg.gpus} on GPU {device}, log {jobs[-1].paths.stdout}",
            file=sys.stderr,
        )
    outcome = Outcome(run_id)
    try:
        for job in submitit.helpers.as_completed(jobs, poll_frequency=POLL_S):
            index = jobs.index(job)
            last = _last_message(job.paths.stdout)
            failure = _failure(job)
            if failure:
                where = f"shard {index} (GPU {devices[index]})"
                if _recorded_done(results_dir, run_id, index, started):
                    outcome.died_after_done.append(
                        f"{where} died ({failure}) after recording all its points: {last}"
                    )
                    print(f"ssdbench: warning: {outcome.died_after_done[-1]}", file=sys.stderr)
                else:
                    outcome.failed.append(f"{where} failed ({failure}): {last}")
                    print(f"ssdbench: {outcome.failed[-1]}", file=sys.stderr)
                print(
                    f"ssdbench: the end of shard {index}'s output ({job.paths.stdout}):",
                    *(f"  | {line}" for line in _shard_output(job.paths.stdout)[-TAIL_LINES:]),
                    sep="\n",
                    file=sys.stderr,
                )
            else:
                print(f"ssdbench: shard {index} finished", file=sys.stderr)
    except KeyboardInterrupt:
        for job in jobs:
            job.cancel(check=False)
        print(f"ssdbench: interrupted; rerun with run_id={run_id} to resume", file=sys.stderr)
        raise
    outcome.run_dirs = sorted(d.parent for d in results_dir.glob(f"*/{run_id}/{records.META_FILE}"))
    for run_dir in outcome.run_dirs:
        records.consolidate(run_dir)
    return outcome


def _recorded_done(results_dir: Path, run_id: str, index: int, since: str) -> bool:
    """Whether shard `index`, started at or after `since`, wrote its worker record as done: then
    every point it owned is in the run, and what killed it came after its work."""
    return any(
        worker.get("shard", {}).get("index") == index
        and worker.get("state") == "done"
        and str(worker.get("started", "")) >= since
        for run_dir in results_dir.glob(f"*/{run_id}")
        for worker in records.read_workers(run_dir)
    )


def _failure(job) -> str:
    """How a finished submitit job failed ("" if it did not): the shard's exit status or the
    signal that killed it, which tell a crash after its last message from a sweep that stopped."""
    try:
        error = job.exception()
    except Exception:  # no result pickle: the job process itself was killed
        return "its process left no result"
    if error is None:
        return ""
    text = str(error)
    if found := re.search(r"non-zero exit status (-?\d+)", text):
        return f"exit status {found[1]}"
    if found := re.search(r"died with <Signals\.(\w+)", text):
        return f"killed by {found[1]}"
    return "no exit status recorded"
