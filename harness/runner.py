"""The sweep loop: every point of a config, every provider, checked and then timed; rows on disk.

Order of work: validate the config and build every point (no GPU touched yet), keep this shard's
share (harness/sharding.py; all of them unless shard.count > 1); open the run directory (new, or
resumed: see `open_run`; shards of one sweep share it) and record this worker in it; measure this
GPU's peaks (each worker its own, into its record with the clocks read right after them; the
run's creator also into meta.json); then for each point not yet measured: make its inputs once
(fixed seed), check each provider's answer before timing it (against the float64 reference, or a
peer when the reference would not fit), time the providers that answered right in each mode with
their repetitions interleaved, and write one part file per provider. Under chunk_policy=fastest
each provider is checked at the problem's chunk length and at its half, and timed at the one it
runs faster. A wrong answer is recorded as status "wrong" and never timed; an exception
(including running out of memory) becomes status "error" for that provider, mode or point, and
the sweep goes on. Only a broken CUDA context (a sticky error such as an illegal address) stops
it, after recording the culprit, since every later point would fail too: rerun to resume.

Device, timer, peaks and environment are injectable so that the whole loop runs on CPU in tests.
"""

from __future__ import annotations

import functools
import gc
import itertools
import json
import math
import os
import secrets
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path

import torch
from omegaconf import OmegaConf
from tqdm import tqdm

from harness import correctness, environment, providers, records, sharding
from harness.config import (
    LEGACY_SETTINGS,
    BenchConfig,
    ChunkPolicy,
    ConfigError,
    TritonAutotune,
    validate,
)
from harness.inputs import SSDInputs, make_inputs
from harness.problem import (
    SHAPE_FIELDS,
    Problem,
    flops,
    min_bytes,
    reference_gib,
)
from harness.timing import Call, CudaTimer, Measurement, Timer, TimingPolicy, measure

OPTION_FIELDS = tuple(f.name for f in fields(Problem) if f.name not in (*SHAPE_FIELDS, "dtype"))
# Config keys that change what a number means: a resumed run must keep them.
MEASUREMENT_KEYS = ("timing", "seed", "tune", "triton_autotune", "chunk_policy", "check")
#: chunk_policy=fastest: the short timing that picks a provider's chunk length (not recorded as
#: the point's measurement, which is taken afterwards with the run's own timing).
SCREEN = TimingPolicy(warmup=2, min_reps=6, max_reps=100, max_seconds=0.3, ci_target=0.02)


class SweepAborted(RuntimeError):
    """The CUDA context broke (sticky error); `rows` are the culprit's, recorded before stopping."""

    def __init__(self, message: str, provider: str | None = None) -> None:
        super().__init__(message)
        self.provider = provider
        self.rows: list[dict] = []


class ReplayMismatch(ValueError):
    """A CUDA graph's replay of a checked call whose output the check refuses: the mode's rows
    get status `wrong`."""


class OutOfTime(RuntimeError):
    """The sweep stopped at cfg.time_limit_s with points left; what it measured is recorded, and
    a rerun with its run_id measures the rest."""


def out_of_time(limit_s: float, elapsed_s: float, longest_s: float) -> bool:
    """Whether a point as long as the longest so far would end past the limit (0: none)."""
    return limit_s > 0 and elapsed_s + longest_s > limit_s


@dataclass
class Outcome:
    """One provider at one point: its correctness check, then its measurement in each mode."""

    status: str = "ok"
    error: str = ""
    rel_err: float = math.nan
    final_rel_err: float = math.nan
    check_against: str = ""
    chunk_size: int = 0  # the chunk length it ran at (0: the problem's)
    tuning: dict = field(default_factory=dict)  # what the provider's tuner chose
    measurements: dict[str, Measurement] = field(default_factory=dict)
    # The GPU's clocks, temperature and power read as each mode's timing ended (None: unread).
    gpu_clocks: dict[str, dict | None] = field(default_factory=dict)
    # How many times each mode was timed (more than once after a held clock; the last is kept).
    timings: dict[str, int] = field(default_factory=dict)

    def fail(self, status: str, error: str) -> None:
        self.status, self.error = status, error


@dataclass
class Candidate:
    """One way a provider may run a point, checked and waiting for the screening: its chunk
    length (in the outcome), its tuning (0 or 1) and that tuning's picks (triton_autotune=twice,
    else None)."""

    outcome: Outcome
    call: Call
    tuning: int = 0
    picks: object = None

    def label(self) -> str:
        """The screening's name for it: the chunk length, marked when it is the second tuning."""
        return f"{self.outcome.chunk_size}{' retuned' if self.tuning else ''}"

    def screened(self, self_tuning: providers.SelfTuning | None) -> Call:
        """The call to screen, putting its picks back first: in graph mode only while capturing,
        in an eager screening a few µs in every sample of both tunings. The call timed
        afterwards has no such step (its picks are put back once, before)."""
        if self.picks is None:
            return replace(self.call, name=self.label())

        def run() -> object:
            self_tuning.restore(self.picks)
            return self.call.fn()

        return replace(self.call, name=self.label(), fn=run)


def config_dict(cfg: BenchConfig) -> dict:
    return OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True)


def _first_difference(old: object, new: object, key: str) -> str | None:
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new)):
            before = old.get(k, LEGACY_SETTINGS.get(f"{key}.{k}"))
            found = _first_difference(before, new.get(k), f"{key}.{k}")
            if found:
                return found
        return None
    return None if old == new else f"{key}={old!r} there, {new!r} now"


def _incompatibility(meta: dict, config: dict) -> str | None:
    for key in MEASUREMENT_KEYS:
        found = _first_difference(
            meta["config"].get(key, LEGACY_SETTINGS.get(key)), config[key], key
        )
        if found:
            return found
    return None


def resume_refusal(run_dir: Path, meta: dict, cfg: BenchConfig) -> str | None:
    """Why `cfg` may not resume the run of this meta (another MEASUREMENT_KEYS setting), None
    where it may."""
    clash = _incompatibility(meta, config_dict(cfg))
    if clash is None:
        return None
    return f"run {run_dir.name} was measured with {clash}; pass another run_id to start anew"


def _copied(result: object) -> object:
    """A copy of a forward's answer (out, or (out, final states)) in fresh memory."""
    if isinstance(result, tuple):
        return tuple(t if t is None else t.clone() for t in result)
    return result.clone()


def open_run(cfg: BenchConfig, env: dict, measure_peaks: Callable[[], dict]) -> tuple[Path, dict]:
    """The run directory and its meta, created or resumed.

    run_id given: results/<gpu>/<run_id>/, resumed if it exists. run_id None and resume=false: a
    new run <sweep.name>-<UTC yyyymmdd-HHMMSS>. run_id None and resume=true: the newest run there
    with this very sweep section and measurement settings, else a new one. A resumed run must keep
    the MEASUREMENT_KEYS settings (ConfigError otherwise); its points and providers may grow.
    Shards starting together on one run_id: the first to take the run's lock creates meta.json
    (with its environment, config and peaks), the others read it; nobody rewrites it.
    """
    root = Path(cfg.results_dir) / environment.gpu_slug(env["gpu"]["name"])
    config = config_dict(cfg)
    if cfg.run_id:
        run_dir = root / cfg.run_id
    else:
        run_dir = (newest_resumable(root, config) if cfg.resume else None) or _new_run_dir(
            root, cfg.sweep.name
        )
    with records.locked(run_dir):
        if not (run_dir / records.META_FILE).is_file():
            meta = {
                "schema_version": records.SCHEMA_VERSION,
                "run_id": run_dir.name,
                "created": environment.now_utc(),
                "env": env,
                "config": config,
                "peaks": measure_peaks(),
            }
            records.write_meta(run_dir, meta)
            return run_dir, meta
        meta = records.read_meta(run_dir)
    refusal = resume_refusal(run_dir, meta, cfg)
    if refusal:
        raise ConfigError(refusal)
    then, now = meta["env"].get("git", {}).get("commit"), env.get("git", {}).get("commit")
    if then != now:
        print(
            f"ssdbench: note: resuming a run begun at commit {then}, now at {now}", file=sys.stderr
        )
    return run_dir, meta


def newest_resumable(root: Path, config: dict) -> Path | None:
    """The newest run under root (a GPU's folder) of this very sweep section and measurement
    settings (config_dict), which resume=true continues; None where there is none."""
    found = []
    for meta_file in root.glob(f"*/{records.META_FILE}"):
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, ValueError):
            continue  # not a run this can resume
        same_sweep = meta.get("config", {}).get("sweep") == config["sweep"]
        if same_sweep and _incompatibility(meta, config) is None:
            found.append((meta.get("created", ""), meta_file.parent))
    return max(found)[1] if found else None


def _new_run_dir(root: Path, name: str) -> Path:
    """root/<records.new_run_id>, claimed by creating it: two sweeps started in the same second
    get two runs."""
    root.mkdir(parents=True, exist_ok=True)

    def claim(run_id: str) -> bool:
        try:
            (root / run_id).mkdir()
        except FileExistsError:
            return False
        return True

    return root / records.new_run_id(name, datetime.now(timezone.utc), claim)


#: Drawn once per interpreter: with it a worker's name stays unique where its pid or SLURM task id
#: repeats (fresh nodes boot alike; a requeued task keeps its id), so that no worker's record
#: replaces an earlier one's, nor do its rows take that worker's measured rates.
_PROCESS_TOKEN = secrets.token_hex(3)


def worker_id() -> str:
    """This process's name in the run's worker records and rows' `worker` column."""
    job = os.environ.get("SLURM_JOB_ID")
    if job:
        task = os.environ.get("SLURM_ARRAY_TASK_ID")
        return f"slurm:{job}" + (f"_{task}" if task else "") + f"-{_PROCESS_TOKEN}"
    return f"{socket.gethostname()}:{os.getpid()}-{_PROCESS_TOKEN}"


#: (run directory, worker name) of every run() call in this process.
_NAMED: set[tuple[str, str]] = set()


def worker_name(run_dir: Path) -> str:
    """worker_id(), with a count appended where this process has measured into run_dir before
    (a Hydra multirun's later job on the same run_id): each call keeps a record of its own."""
    base = name = worker_id()
    count = 1
    while (str(run_dir), name) in _NAMED:
        count += 1
        name = f"{base}.{count}"
    _NAMED.add((str(run_dir), name))
    return name


class Sweep:
    """State of one sweep: config, device, timer, peaks and loaded providers."""

    def __init__(
        self,
        cfg: BenchConfig,
        device: str,
        timer: Timer,
        peaks: dict,
        run_dir: Path,
        gpu_name: str,
        read_clocks: Callable[[], dict | None],
        worker: str,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.cfg = cfg
        self.device = device
        self.timer = timer
        self.read_clocks = read_clocks  # after each mode's timing, into its rows
        self.sleep = sleep  # the cooldown before timing a mode again after a held clock
        self.peaks = peaks  # this worker's GPU's measured rates (harness.peaks)
        self.run_dir = run_dir
        self.on_cuda = device.startswith("cuda")
        self.gpu_name = gpu_name  # this worker's GPU, not necessarily the one that created the run
        self.worker = worker  # the rows' `worker`: this worker's record's name
        self._loaded: dict[str, Callable | str] = {}

    # ---- device helpers ----
    def _sync(self) -> None:
        if self.on_cuda:
            torch.cuda.synchronize()

    def _answer(self, problem: Problem, p: providers.Provider, fn: Callable, kwargs: dict):
        """The answer of a call to check. On a GPU, the call made inside NaN-filled memory as
        large as the provider's working set (correctness.poisoned_allocations), after a first
        call outside it where the provider tunes itself (Triton's autotuning allocates a 256 MiB
        flush buffer per tuning)."""
        if not self.on_cuda:
            return fn(**kwargs)
        if p.self_tuning is not None:
            fn(**kwargs)
            self._sync()
        with correctness.poisoned_allocations(self.device, p.working_set(problem)):
            result = fn(**kwargs)
            self._sync()
        return result

    def _free(self) -> None:
        gc.collect()
        if self.on_cuda:
            torch.cuda.empty_cache()

    def _health(self, culprit: str | None) -> None:
        """Raise SweepAborted when the CUDA context no longer works."""
        try:
            self._sync()
        except Exception as exc:
            raise SweepAborted(
                f"the CUDA context is broken ({records.error_message(exc)}); rerun the same "
                f"command with run_id={self.run_dir.name} to resume after this point",
                culprit,
            ) from None

    def _load(self, provider: providers.Provider) -> Callable:
        if provider.name not in self._loaded:
            try:
                self._loaded[provider.name] = provider.load()
            except Exception as exc:
                self._loaded[provider.name] = f"loading failed: {records.error_message(exc)}"
        loaded = self._loaded[provider.name]
        if isinstance(loaded, str):
            raise RuntimeError(loaded)
        return loaded

    # ---- one point ----
    def point(self, problem: Problem, provs: list[providers.Provider]) -> dict[str, Outcome]:
        outcomes = {p.name: Outcome() for p in provs}
        for p in provs:
            reason = p.unsupported(problem, self.device)
            if reason:
                outcomes[p.name].fail("unsupported", reason)
        todo = [p for p in provs if outcomes[p.name].status == "ok"]
        try:
            if todo:
                self._check_and_time(problem, todo, outcomes)
        except SweepAborted as exc:
            culprit = next((p for p in provs if p.name == exc.provider), None)
            if culprit:
                exc.rows = self.rows(problem, culprit, outcomes[culprit.name])
            raise
        except Exception as exc:  # inputs or reference: nothing at this point can be trusted
            for p in todo:
                outcomes[p.name] = Outcome(status="error", error=records.error_message(exc))
        finally:
            self._free()
        return outcomes

    def _check_and_time(
        self, problem: Problem, todo: list[providers.Provider], outcomes: dict[str, Outcome]
    ) -> None:
        inputs = make_inputs(problem, self.cfg.seed, self.device)
        if self.cfg.triton_autotune is not TritonAutotune.once:
            for p in todo:
                if p.self_tuning is not None:
                    p.self_tuning.forget()
        calls = self._check(problem, inputs, todo, outcomes)
        del inputs  # each call holds its own copy
        for mode in (m.value for m in self.cfg.timing.modes):
            timed = [
                c for c in calls if outcomes[c.name].status == "ok"
                and (mode != "kernels" or c.kernel_prefixes)
            ]  # fmt: skip
            results, clocks, timings = self._time_mode(problem, timed, mode)
            for m in results:
                outcomes[m.name].measurements[mode] = m
                outcomes[m.name].gpu_clocks[mode] = clocks
                outcomes[m.name].timings[mode] = timings
            culprit = next((m.name for m in results if m.error), None)
            if culprit:
                self._free()  # e.g. after running out of memory in a graph capture
                self._health(culprit)

    def _time_mode(
        self, problem: Problem, calls: list[Call], mode: str
    ) -> tuple[list[Measurement], dict | None, int]:
        """Time `calls` in `mode`, again while the clock read as the timing ends is held down
        (TimingConfig): (the last timing's measurements, the clocks read after it, timings)."""
        policy = self.cfg.timing
        timings = 0
        while True:
            results = measure(calls, mode, policy, self.timer)
            timings += 1
            clocks = self.read_clocks() if results else None  # still at the load just timed
            held = environment.held_clock(clocks, policy.held_floor)
            if not held or timings > policy.held_retimes or any(m.error for m in results):
                return results, clocks, timings
            print(
                f"ssdbench: {problem.key()} {mode}: timed at a held SM clock ({held}); timing "
                f"again after {policy.held_cooldown_s:g} s idle",
                file=sys.stderr,
            )
            self.sleep(policy.held_cooldown_s)

    def _expected(self, problem: Problem, inputs: SSDInputs) -> object:
        """The float64 reference's answer, or None when it would not fit or ran out of memory."""
        if reference_gib(problem) > self.cfg.check.reference_max_gib:
            return None
        from kernels import reference

        try:
            return reference.ssd_forward(**inputs.kwargs())
        except torch.OutOfMemoryError:
            self._free()
            return None

    def _fallback_answer(self, problem: Problem, inputs: SSDInputs) -> object:
        """The fallback provider's answer, to check the others against where the reference is
        out of reach and the fallback is not measured at this point; None where it cannot run
        here or answers NaN/inf."""
        p = providers.get(self.cfg.check.fallback)
        if p.unsupported(problem, self.device):
            return None
        outcome = Outcome(chunk_size=problem.chunk_size)
        answer = None
        try:
            kwargs = inputs.to(self.device).kwargs()
            result = self._answer(problem, p, self._load(p), kwargs)
            self._judge(problem, result, None, outcome)
            if outcome.status == "ok":  # out of the poisoned pool, which it would pin whole
                answer = _copied(result)
            del result
        except Exception as exc:
            outcome.fail("error", records.error_message(exc))
            self._free()
            self._health(p.name)
        return answer

    def _unchecked(self, problem: Problem) -> str:
        """Why a provider's answer cannot be checked at this point, and what to change."""
        check = self.cfg.check
        return (
            f"nothing to check the answer against: no float64 reference (it needs about "
            f"{reference_gib(problem):.1f} GiB, check.reference_max_gib={check.reference_max_gib:g}"
            f", or it ran out of memory) and no answer from check.fallback={check.fallback} here; "
            f"raise check.reference_max_gib or run {check.fallback} beside it"
        )

    def _check(
        self,
        problem: Problem,
        inputs: SSDInputs,
        todo: list[providers.Provider],
        outcomes: dict[str, Outcome],
    ) -> list[Call]:
        """Run each provider on its own copy of the inputs and judge the answer, once per chunk
        length it may run (chunk_policy) and, for a self-tuning provider under
        triton_autotune=twice, once per tuning; with more than one candidate that passes, keep
        the fastest.

        Returns the calls to time (those that ran). Without the float64 reference, the fallback
        provider runs first and the others are compared with it; it is itself only checked for
        NaN/inf (rel_err NaN, check_against "").
        """
        expected = self._expected(problem, inputs)
        against = "float64"
        fallback = self.cfg.check.fallback
        if expected is None:
            todo = sorted(todo, key=lambda p: p.name != fallback)
            if all(p.name != fallback for p in todo):  # measured before this resume, or not run
                expected, against = self._fallback_answer(problem, inputs), f"provider:{fallback}"
        calls = []
        for p in todo:
            if expected is None and p.name != fallback:
                outcomes[p.name].fail("error", self._unchecked(problem))
                continue
            twice = p.self_tuning is not None and self.cfg.triton_autotune is TritonAutotune.twice
            tried: list[Candidate] = []
            for chunk, tuning in itertools.product(
                self._chunk_lengths(problem, p), range(2 if twice else 1)
            ):
                outcome = outcomes[p.name] = Outcome(chunk_size=chunk)  # the culprit's, if any
                try:
                    fn = self._load(p)
                    kwargs = {**inputs.to(self.device).kwargs(), "chunk_size": chunk}
                    if p.tuner is not None:
                        extra, outcome.tuning = p.tuner(kwargs, self.cfg.tune.value)
                        fn = functools.partial(fn, **extra)
                    if tuning:  # tune again; the first tuning's picks are in its snapshot
                        p.self_tuning.forget()
                    result = self._answer(problem, p, fn, kwargs)
                    if p.tuning_report is not None:
                        outcome.tuning["picks"] = p.tuning_report()
                    self._judge(problem, result, expected, outcome)
                    outcome.check_against = against if expected is not None else ""
                    if expected is None and p.name == fallback and outcome.status == "ok":
                        # copied out of the poisoned pool, which it would otherwise pin whole
                        expected, against = _copied(result), f"provider:{fallback}"
                    result = None
                except Exception as exc:  # this provider only; a broken context stops the sweep
                    outcome.fail("error", records.error_message(exc))
                    result = None  # frees what it allocated, also in an overflowed pool
                    self._free()
                    self._health(p.name)
                if outcome.status != "ok":  # a wrong answer at any chunk length is a wrong provider
                    if chunk != problem.chunk_size:
                        outcome.error = f"at chunk_size {chunk}: {outcome.error}"
                    break
                verify = functools.partial(self._verify_replay, problem, expected)
                call = Call(p.name, functools.partial(fn, **kwargs), p.kernel_prefixes, verify)
                picks = p.self_tuning.snapshot() if twice else None
                tried.append(Candidate(outcome, call, tuning, picks))
            if outcomes[p.name].status != "ok":
                continue
            chosen = self._fastest(tried, p.self_tuning) if len(tried) > 1 else tried[0]
            outcomes[p.name] = chosen.outcome
            self._health(p.name)  # the screening may have broken the context
            calls.append(chosen.call)
        return calls

    def prepare(self, todo: list[tuple[Problem, list[providers.Provider]]]) -> dict[str, dict]:
        """Each provider's `prepare` over the problems it will run here, at every chunk length it
        may try, by provider name. A failure is recorded and the sweep goes on: each point then
        does that work itself, as it would with no preparation."""
        done = {}
        for provider in {v.name: v for _, vs in todo for v in vs}.values():
            if provider.prepare is None:
                continue
            problems = [
                replace(problem, chunk_size=chunk)
                for problem, vs in todo
                if provider in vs and provider.unsupported(problem, self.device) is None
                for chunk in self._chunk_lengths(problem, provider)
            ]
            if not problems:
                continue
            try:
                done[provider.name] = provider.prepare(problems, self.cfg.tune.value)
            except Exception as exc:
                done[provider.name] = {"error": records.error_message(exc)}
            print(f"ssdbench: {provider.name} prepared: {done[provider.name]}", file=sys.stderr)
        return done

    def _chunk_lengths(self, problem: Problem, provider: providers.Provider) -> list[int]:
        """The chunk lengths to try: the problem's, and under chunk_policy=fastest its half too
        (when the half is a valid chunk_size that the provider supports)."""
        lengths = [problem.chunk_size]
        half = problem.chunk_size // 2
        if self.cfg.chunk_policy is ChunkPolicy.fastest and half >= 16:
            if provider.supports(replace(problem, chunk_size=half)) is None:
                lengths.append(half)
        return lengths

    def _fastest(
        self, tried: list[Candidate], self_tuning: providers.SelfTuning | None
    ) -> Candidate:
        """The candidate that ran fastest in a short screening (graph mode when the run times it;
        one whose screening failed counts as infinitely slow). Its tuning record gets the
        screening medians: per chunk length (the faster tuning's) when more than one length was
        tried, per tuning when there were two; its picks are put back for the timing."""
        modes = [m.value for m in self.cfg.timing.modes]
        mode = "graph" if "graph" in modes else modes[0]
        screened = measure([c.screened(self_tuning) for c in tried], mode, SCREEN, self.timer)
        if any(m.error for m in screened):
            self._free()
        times = [m.summary.median if m.summary else math.inf for m in screened]
        chosen = tried[times.index(min(times))]
        if chosen.picks is not None:
            self_tuning.restore(chosen.picks)
        record = {
            m.name: round(t, 5) if math.isfinite(t) else m.error
            for m, t in zip(screened, times, strict=True)
        }
        tuning = chosen.outcome.tuning
        if len({c.outcome.chunk_size for c in tried}) > 1:
            tuning["chunk_size"] = chosen.outcome.chunk_size
            per_chunk: dict[str, tuple[float, object]] = {}  # the faster tuning's, per length
            for c, t, m in zip(tried, times, screened, strict=True):
                key = str(c.outcome.chunk_size)
                if key not in per_chunk or t < per_chunk[key][0]:
                    per_chunk[key] = (t, record[m.name])
            tuning["chunk_screen_ms"] = {key: value for key, (_, value) in per_chunk.items()}
        if chosen.picks is not None:
            tuning["autotune_screen_ms"] = record
            tuning["autotune_kept"] = chosen.label()
        return chosen

    def _verify_replay(self, problem: Problem, expected: object, result: object) -> None:
        """Raise when a graph's replay of a checked call answers what the check would refuse: graph
        mode times the replay, which may launch otherwise than the eager call (streams forked
        only while capturing, say)."""
        outcome = Outcome()
        self._judge(problem, result, expected, outcome)
        if outcome.status != "ok":
            raise ReplayMismatch(f"the graph's replay answers wrong: {outcome.error}")

    def _judge(self, problem: Problem, result: object, expected: object, outcome: Outcome) -> None:
        """Fill the outcome's errors and status from the answer (NaN never passes)."""
        split = problem.return_final_states
        out, final = result if split else (result, None)
        if expected is None:
            if not all(torch.isfinite(t).all() for t in ([out, final] if split else [out])):
                outcome.fail("wrong", "output holds NaN or inf (no reference to compare with)")
            return
        ref_out, ref_final = expected if split else (expected, None)
        try:
            outcome.rel_err = correctness.relative_error(out, ref_out)
            if split:
                outcome.final_rel_err = correctness.relative_error(final, ref_final)
        except ValueError as exc:  # shape mismatch
            outcome.fail("wrong", records.error_message(exc))
            return
        tolerance = correctness.TOLERANCE[problem.dtype]
        for name, err in (("rel_err", outcome.rel_err), ("final_rel_err", outcome.final_rel_err)):
            if (name == "rel_err" or split) and not correctness.passes(err, problem.dtype):
                outcome.fail(
                    "wrong", f"{name} {err:.3g} above the {problem.dtype} tolerance {tolerance:g}"
                )
                return

    # ---- rows ----
    def _tuning(self, provider: providers.Provider, outcome: Outcome) -> str:
        policies = {
            "triton": {"triton_autotune": self.cfg.triton_autotune.value},
            "cutile": {"tune": self.cfg.tune.value},
        }
        record = {
            "matmul_policy": provider.matmul_policy,
            "chunk_policy": self.cfg.chunk_policy.value,
            **policies.get(provider.name, {}),
        }
        return json.dumps({**record, **outcome.tuning})

    def rows(self, problem: Problem, provider: providers.Provider, o: Outcome) -> list[dict]:
        """One row per configured mode, in the schema of harness.records."""
        base = {
            "run_id": self.run_dir.name,
            "point": problem.key(),
            **{k: getattr(problem, k) for k in SHAPE_FIELDS},
            "dtype": problem.dtype,
            "options": records.options_json({k: getattr(problem, k) for k in OPTION_FIELDS}),
            "provider": provider.name,
            "rel_err": o.rel_err,
            "final_rel_err": o.final_rel_err,
            "check_against": o.check_against,
            "tuning": self._tuning(provider, o),
            "l2": self.cfg.timing.l2.value,
            "gpu_name": self.gpu_name,
            "device_index": self.cfg.device if self.on_cuda else -1,
            "worker": self.worker,
            "seed": self.cfg.seed,
        }
        # The FLOP model at the chunk length it ran (a shorter chunk does fewer FLOPs).
        ran = replace(problem, chunk_size=o.chunk_size) if o.chunk_size else problem
        rows = []
        for mode in (m.value for m in self.cfg.timing.modes):
            m = o.measurements.get(mode)
            if o.status != "ok":
                status, error = o.status, o.error
            elif mode == "kernels" and not provider.kernel_prefixes:
                status, error = "unsupported", f"{provider.name} declares no kernel_prefixes"
            elif m is None:
                status, error = "error", "not measured: the sweep stopped first"
            elif m.error:
                wrong = m.error.startswith(f"{ReplayMismatch.__name__}:")
                status, error = ("wrong" if wrong else "error"), m.error
            else:
                status, error = "ok", ""
            timed = m if status == "ok" else None
            clocks = o.gpu_clocks.get(mode)
            rows.append({**base, "mode": mode, "status": status, "error": error,
                         **self._timing_columns(ran, timed),
                         "gpu_clocks": json.dumps(clocks) if clocks else None,
                         "timings": o.timings.get(mode, 0),
                         "timestamp": environment.now_utc()})  # fmt: skip
        return rows

    def _timing_columns(self, problem: Problem, m: Measurement | None) -> dict:
        if m is None or m.summary is None:
            nan = math.nan
            return {"median_ms": nan, "p10_ms": nan, "p90_ms": nan, "ci_low_ms": nan,
                    "ci_high_ms": nan, "reps": 0, "ci_rel": nan, "ci_wide": False,
                    "kernel_ms": "{}", "tflops": nan, "gbps": nan, "frac_peak_flops": nan,
                    "frac_peak_bw": nan}  # fmt: skip
        s, peaks = m.summary, self.peaks
        seconds = s.median * 1e-3
        tflops, gbps = flops(problem) / seconds / 1e12, min_bytes(problem) / seconds / 1e9
        # Only a bf16 rate is measured: other dtypes have no peak to divide by (NaN).
        peak_tflops = peaks.get("bf16_tflops") if problem.dtype == "bfloat16" else None
        return {
            "median_ms": s.median,
            "p10_ms": s.p10,
            "p90_ms": s.p90,
            "ci_low_ms": s.ci_low,
            "ci_high_ms": s.ci_high,
            "reps": s.n,
            "ci_rel": s.ci_rel,
            "ci_wide": m.ci_wide,
            "kernel_ms": json.dumps(m.kernel_ms),
            "tflops": tflops,
            "gbps": gbps,
            "frac_peak_flops": tflops / peak_tflops if peak_tflops else math.nan,
            "frac_peak_bw": gbps / peaks["copy_gbps"] if peaks.get("copy_gbps") else math.nan,
        }


def _default_timer(cfg: BenchConfig, env: dict) -> Timer:
    l2_bytes = env["gpu"].get("l2_bytes") or 0
    flush = max(cfg.timing.flush_mib << 20, 2 * l2_bytes)
    return CudaTimer(l2=cfg.timing.l2.value, flush_bytes=flush)


def run(
    cfg: BenchConfig,
    *,
    device: str | None = None,
    timer: Timer | None = None,
    peaks: dict | None = None,
    env: dict | None = None,
    read_clocks: Callable[[], dict | None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Path:
    """Measure every point of `cfg` not yet in its run directory; returns that directory.
    OutOfTime once cfg.time_limit_s stops it with points left (those measured are recorded).

    device defaults to cuda:<cfg.device>; timer, peaks, env and read_clocks default to the real
    CUDA timer, harness.peaks and harness.environment (nvidia-smi's clocks of this GPU; none off
    CUDA); clock (seconds) times the limit; sleep waits out a held clock. Tests pass fakes and
    run on "cpu".
    """
    started = clock()
    problems = sharding.select(validate(cfg), cfg.shard.index, cfg.shard.count)
    provs = [providers.get(name) for name in cfg.providers.names]
    device = device or f"cuda:{cfg.device}"
    on_cuda = device.startswith("cuda")
    if on_cuda:
        torch.cuda.set_device(device)
    env = env if env is not None else environment.capture(cfg.device if on_cuda else None)

    if read_clocks is None:
        read_clocks = (lambda: environment.clocks(cfg.device)) if on_cuda else (lambda: None)

    @functools.cache  # the worker that creates the run measures once, for meta.json and itself
    def measure_peaks() -> tuple[dict, dict | None]:
        """The rates, and the GPU's clocks read right after them: a GPU still held down by work
        that ran just before reads a low rate, which would flatter every frac_peak_* column."""
        if peaks is not None:
            return peaks, read_clocks()
        from harness.peaks import measure_peaks as measure_gpu_peaks

        return measure_gpu_peaks(device), read_clocks()

    run_dir, meta = open_run(cfg, env, lambda: measure_peaks()[0])
    timer = timer or _default_timer(cfg, env)
    worker = {
        "worker": worker_name(run_dir),
        "shard": {"index": cfg.shard.index, "count": cfg.shard.count},
        "started": environment.now_utc(),
        "ended": None,
        "state": "running",  # stays so if the process is killed (SIGKILL, a time limit)
        "measured": 0,
        "env": dict(env),
    }
    try:
        done = records.completed_points(run_dir, cfg.retry_errors)
    except records.RecordsError as exc:
        raise ConfigError(f"run {run_dir.name} cannot be resumed: {exc}") from None
    records.write_worker(run_dir, worker)
    todo = [(p, [v for v in provs if (p.key(), v.name) not in done]) for p in problems]
    todo = [(p, vs) for p, vs in todo if vs]
    # Rows divide by the rates of the GPU that times them: a resumed run's later calls may run on
    # other nodes (harness.peaks).
    worker["peaks"], worker["peaks_clocks"] = measure_peaks() if todo else (None, None)
    sweep = Sweep(
        cfg, device, timer, worker["peaks"] or {}, run_dir, env["gpu"]["name"], read_clocks,
        worker["worker"], sleep,
    )  # fmt: skip
    share = f" (shard {cfg.shard.index} of {cfg.shard.count})" if cfg.shard.count > 1 else ""
    print(
        f"ssdbench: run {run_dir}{share} — {len(todo)} of {len(problems)} points to measure",
        file=sys.stderr,
    )
    if todo:
        worker["prepared"] = sweep.prepare(todo)
        records.write_worker(run_dir, worker)
    bar = tqdm(todo, unit="point", disable=not cfg.progress, dynamic_ncols=True)
    longest = 0.0
    try:
        for problem, vs in bar:
            if out_of_time(cfg.time_limit_s, clock() - started, longest):
                worker["state"] = "out_of_time"
                break
            began = clock()
            bar.set_postfix_str(problem.key(), refresh=False)
            try:
                outcomes = sweep.point(problem, vs)
            except SweepAborted as exc:
                if exc.rows:
                    records.write_part(run_dir, problem.key(), exc.provider, exc.rows)
                raise
            for v in vs:
                records.write_part(
                    run_dir, problem.key(), v.name, sweep.rows(problem, v, outcomes[v.name])
                )
                o = outcomes[v.name]
                trouble = (
                    [f"{o.status}: {o.error}"] if o.status not in ("ok", "unsupported") else []
                )
                trouble += [f"{mode}: {m.error}" for mode, m in o.measurements.items() if m.error]
                if trouble:
                    bar.write(f"{problem.key()} {v.name}: {'; '.join(trouble)}")
            worker["measured"] += 1
            records.write_worker(run_dir, worker)  # a killed process's record still says how far
            longest = max(longest, clock() - began)
        if worker["state"] == "running":
            worker["state"] = "done"
    except KeyboardInterrupt:
        worker["state"] = "interrupted"
        print(f"ssdbench: interrupted; rerun with run_id={run_dir.name} to resume", file=sys.stderr)
        raise
    finally:
        bar.close()
        if worker["state"] == "running":
            worker["state"] = "stopped"  # SweepAborted or another error
        worker["env"]["clocks_end"] = environment.clocks(cfg.device) if on_cuda else None
        worker["ended"] = environment.now_utc()
        records.write_worker(run_dir, worker)
        records.consolidate(run_dir)
    if worker["state"] == "out_of_time":
        left = len(todo) - worker["measured"]
        if worker["measured"] == 0:  # a rerun would stop at the same place
            raise OutOfTime(
                f"time_limit_s={cfg.time_limit_s:g} reached before the first point{share}: setting "
                f"up (rates, compiling the launches: `prepared` in the worker record) took "
                f"{clock() - started:.0f} s; raise time_limit_s"
            )
        raise OutOfTime(
            f"time_limit_s={cfg.time_limit_s:g} reached with {left} of {len(todo)} points left"
            f"{share}; rerun with run_id={run_dir.name} to measure them"
        )
    return run_dir
