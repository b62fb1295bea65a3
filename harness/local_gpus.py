"""`gpus=N`: one sweep spread over N GPUs of this node, exactly one measuring process per GPU.

Two processes timing on one GPU corrupt each other's numbers. So the sweep is split into N shards
(harness/sharding.py) and shard i runs as its own `run_bench.py` process that sees only the i-th
GPU (CUDA_VISIBLE_DEVICES), started and watched here (its log under this job's Hydra output
directory). Each shard runs in a process group of its own, which this process stops (SIGINT: the
shard records where it got to; SIGKILL after STOP_GRACE_S) when it is interrupted or told to
terminate, and which the kernel signals if this process dies without a word (Linux), so that no
shard measures on after it: a rerun would put a second measuring process on its GPU. (submitit's
LocalExecutor, used before, cancelled only its own wrapper, and the shards measured on.)

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

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from harness import environment, records
from harness.config import BenchConfig, ConfigError

# Overrides the launcher sets for each shard; the user's values for these are dropped.
OWNED_KEYS = {"gpus", "run_id", "results_dir", "device", "shard", "shard.index", "shard.count"}
POLL_S = 2.0  # how often the finished shards are looked for
# run_bench.py's exit status for a sweep that measured every point it owned, some (point,
# provider) pair not passing: the shard did its work, and the launcher counts those pairs itself.
NOT_PASSED = 5
#: A shard's exit status when time_limit_s stopped it with points left (run_bench.py's too).
OUT_OF_TIME = 4
STOP_GRACE_S = 60.0  # a stopped shard's time to record its state and consolidate before SIGKILL


@dataclass
class Outcome:
    """What the shards left: the run directories they wrote (one, unless the GPUs are of different
    models: runs are kept per GPU model), a line for each shard that failed, one for each shard
    that died only after recording all its points, and one for each that stopped at
    time_limit_s with points left (a rerun with the run_id measures them)."""

    run_id: str
    run_dirs: list[Path] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    died_after_done: list[str] = field(default_factory=list)
    out_of_time: list[str] = field(default_factory=list)


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
    """The shard's own non-empty lines in its log."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return []
    return [line for line in text.replace("\r", "\n").splitlines() if line.strip()]


def _last_message(log: Path) -> str:
    """The shard's last `ssdbench:` line (its own one-line verdict), if its log has one."""
    lines = _shard_output(log)
    return next((line for line in reversed(lines) if line.startswith("ssdbench:")), "")


@dataclass
class Shard:
    """One running shard process and where its output goes."""

    index: int
    device: str
    log: Path
    process: subprocess.Popen


# libc, loaded here in the launcher: a shard's preexec_fn runs between fork and exec, where
# anything more than a system call may deadlock a multi-threaded parent.
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
PR_SET_PDEATHSIG = 1


def _shard_signals(launcher: int) -> Callable[[], None]:
    """The preexec_fn of a shard: SIGINT stops it (a launcher started in the background may
    ignore SIGINT, which its children would inherit), and the kernel sends SIGINT when the
    launcher dies (Linux); a launcher gone before that was set means no shard at all."""

    def setup() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if _LIBC is not None:
            _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGINT)
        if os.getppid() != launcher:
            os._exit(1)

    return setup


def _start(args: list[str], device: str, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(
            args,
            cwd=os.getcwd(),
            env={**os.environ, "CUDA_VISIBLE_DEVICES": device},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_shard_signals(os.getpid()),
        )


def _signal_groups(shards: Sequence[Shard], sig: int) -> None:
    for shard in shards:
        try:
            os.killpg(shard.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop(shards: Sequence[Shard], grace_s: float = STOP_GRACE_S) -> None:
    """SIGINT to each running shard's group, up to grace_s for them to record where they got,
    then SIGKILL to every group (what a shard left behind too: its compile workers). Further
    interrupts are ignored meanwhile: a second Ctrl-C or a CI cancel's SIGTERM must not cut the
    SIGKILL round short."""
    held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        running = [s for s in shards if s.process.poll() is None]
        _signal_groups(running, signal.SIGINT)
        deadline = time.monotonic() + grace_s
        for shard in running:
            try:
                shard.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
    finally:
        _signal_groups(shards, signal.SIGKILL)
        for shard in shards:
            shard.process.wait()
        for sig, handler in held.items():
            signal.signal(sig, handler)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def launch(
    cfg: BenchConfig, overrides: Sequence[str], log_dir: Path, device_count: int, script: Path
) -> Outcome:
    """Run cfg.gpus shards of the sweep in parallel, one per GPU, and wait for all of them; on
    an interrupt, SIGTERM or an error here stop them all before raising (SIGTERM as
    KeyboardInterrupt).

    overrides: the job's command-line overrides (Hydra's hydra.overrides.task); log_dir: where
    the shards' logs and Hydra outputs go; script: run_bench.py.
    """
    devices = assign(cfg.gpus, visible_devices(device_count, os.environ))
    results_dir = Path(cfg.results_dir).resolve()
    run_id = cfg.run_id or new_run_id(results_dir, cfg.sweep.name, datetime.now(timezone.utc))
    log_dir.mkdir(parents=True, exist_ok=True)
    started = environment.now_utc()
    outcome = Outcome(run_id)
    shards: list[Shard] = []
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        for index, device in enumerate(devices):
            args = shard_overrides(overrides, run_id, results_dir, index, cfg.gpus, log_dir)
            log = log_dir / f"shard-{index}.log"
            process = _start([sys.executable, str(script), *args], device, log)
            shards.append(Shard(index, device, log, process))
            print(
                f"ssdbench: shard {index} of {cfg.gpus} on GPU {device}, log {log}", file=sys.stderr
            )
        waiting = list(shards)
        while waiting:
            for shard in [s for s in waiting if s.process.poll() is not None]:
                waiting.remove(shard)
                _report(shard, outcome, results_dir, run_id, started)
            if waiting:
                time.sleep(POLL_S)
    except BaseException as exc:  # interrupted, or an error here: no shard goes on measuring
        stop(shards)
        if isinstance(exc, KeyboardInterrupt):
            print(f"ssdbench: interrupted; rerun with run_id={run_id} to resume", file=sys.stderr)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    outcome.run_dirs = sorted(d.parent for d in results_dir.glob(f"*/{run_id}/{records.META_FILE}"))
    for run_dir in outcome.run_dirs:
        records.consolidate(run_dir)
    return outcome


def _report(shard: Shard, outcome: Outcome, results_dir: Path, run_id: str, since: str) -> None:
    """Say how a shard ended, into `outcome` and on stderr (with the end of its log if it did
    not end well)."""
    failure = _failure(shard.process.returncode)
    if not failure or shard.process.returncode == NOT_PASSED:
        print(f"ssdbench: shard {shard.index} finished", file=sys.stderr)
        return
    where = f"shard {shard.index} (GPU {shard.device})"
    last = _last_message(shard.log)
    if shard.process.returncode == OUT_OF_TIME:
        outcome.out_of_time.append(f"{where}: {last}")
        print(f"ssdbench: {where} stopped at time_limit_s: {last}", file=sys.stderr)
        return
    if _recorded_done(results_dir, run_id, shard.index, since):
        outcome.died_after_done.append(
            f"{where} died ({failure}) after recording all its points: {last}"
        )
        print(f"ssdbench: warning: {outcome.died_after_done[-1]}", file=sys.stderr)
    else:
        outcome.failed.append(f"{where} failed ({failure}): {last}")
        print(f"ssdbench: {outcome.failed[-1]}", file=sys.stderr)
    print(
        f"ssdbench: the end of shard {shard.index}'s output ({shard.log}):",
        *(f"  | {line}" for line in _shard_output(shard.log)[-TAIL_LINES:]),
        sep="\n",
        file=sys.stderr,
    )


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


def _failure(returncode: int) -> str:
    """How a shard process ended, "" if well: its exit status or the signal that killed it,
    which tell a crash after its last message from a sweep that stopped."""
    if returncode == 0:
        return ""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:  # real-time signals have no name
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"
