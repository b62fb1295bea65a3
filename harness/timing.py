"""Timing of providers at one point: warm-up, interleaved adaptive repetitions, three modes.

The runner hands `measure` a list of `Call(name, fn, kernel_prefixes)` (fn: a zero-argument
callable that runs one forward) and a mode, and gets one `Measurement` per call back:

- eager:   CUDA events around the whole Python call, started on an idle GPU, so host work
           (argument checks, launches) counts;
- graph:   the call captured once into a torch.cuda.CUDAGraph, replays timed with CUDA events
           (device time, launch overhead gone); a call with `verify` has the output of one replay
           (into outputs first filled with NaN) checked before any is timed, since what is timed
           is the replay, not the eager call the runner judged;
- kernels: torch.profiler device times of the kernels whose names start with the provider's
           kernel_prefixes, summed per repetition and kept per prefix (cuTile mangles names).
           A kernel counts only the time after the provider's earlier kernels of the repetition
           have ended: one launched as a programmatic dependent starts while its predecessor
           runs and waits for it, and that wait is not its work.

Compilation and autotuning stay out of every measurement: each call runs `warmup` times before
sampling (and once more before, in the runner's correctness check). With a cold L2 (the default) a
buffer larger than the L2 is zeroed before every repetition, outside the timed window. Providers
alternate A B A B … so that drift in clocks or temperature cannot pose as a speedup; in eager mode
each of two providers' calls thus follows the other's, as in a model where other work runs between
them (`eager_after_self` puts the provider's own call before each sample instead). Sampling goes
on until every provider's 95 % CI of the median is within `ci_target` of it, or a count/time cap is
hit; a CI still wider than the target is flagged (`ci_wide`), not hidden.

All device work goes through a `Timer`, so the logic here runs on CPU under a fake in tests.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from harness.records import MODES, error_message
from harness.stats import Summary, converged, median, summarize

#: One repetition: (total ms, ms per kernel prefix; empty outside mode kernels).
Sample = tuple[float, Mapping[str, float]]
#: Takes n consecutive repetitions of one call.
Sampler = Callable[[int], list[Sample]]


class TimingError(RuntimeError):
    """A call that cannot be timed in a mode (e.g. no kernel matched its prefixes)."""


@dataclass(frozen=True)
class Call:
    """One provider's forward at the point being measured."""

    name: str
    fn: Callable[[], object]
    kernel_prefixes: tuple[str, ...] = ()
    # Raises when an output of `fn` obtained otherwise than by calling it (a graph's replay) is
    # wrong; None: not checked.
    verify: Callable[[object], None] | None = None


@dataclass
class TimingPolicy:
    """When to stop sampling (config.TimingConfig extends it with the Hydra-facing fields).

    min_reps >= stats.MIN_CI_SAMPLES (6) lets a 95 % interval of the median exist; the config
    insists on it. Every call gets min_reps samples however long they take; max_seconds caps the
    time spent after that.
    """

    warmup: int = 3
    min_reps: int = 10
    max_reps: int = 200
    max_seconds: float = 3.0  # per mode and point, all providers together, once min_reps are in
    ci_target: float = 0.01
    kernels_batch: int = 10  # repetitions per profiler session in mode kernels
    # Eager mode: call each provider once, untimed, right before each of its samples, so that a
    # sample follows its own provider's call. Otherwise it follows the previous provider's, which
    # costs an eager call after Triton's up to 90 µs (H200, run 225): fair between two providers
    # that alternate, not among three or more in a fixed order.
    eager_after_self: bool = False


@dataclass(frozen=True)
class Measurement:
    """What one call got in one mode: a summary, or an error message (summary None)."""

    name: str
    mode: str
    summary: Summary | None = None
    ci_wide: bool = False
    kernel_ms: dict[str, float] = field(default_factory=dict)
    error: str = ""


class Timer(Protocol):
    """The device side of timing (CudaTimer on a GPU, fakes in tests)."""

    def synchronize(self) -> None: ...

    def sampler(self, mode: str, call: Call) -> AbstractContextManager[Sampler]:
        """Prepare `call` for `mode` (e.g. capture its graph) and provide its sampler."""
        ...


def measure(
    calls: Sequence[Call],
    mode: str,
    policy: TimingPolicy,
    timer: Timer,
    clock: Callable[[], float] = time.monotonic,
) -> list[Measurement]:
    """Time every call in `mode`, interleaved, until all converge or a cap; one result per call.

    A call that fails (warm-up, graph capture, a repetition) gets an error Measurement and drops
    out; the others go on.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    names = [c.name for c in calls]
    if len(set(names)) != len(names):  # results are kept by name: one would stand for both
        raise ValueError(f"calls must have distinct names, got {names}")
    errors: dict[str, str] = {}
    samples: dict[str, list[Sample]] = {c.name: [] for c in calls}
    batch = policy.kernels_batch if mode == "kernels" else 1
    own = {c.name: c.fn for c in calls}
    with ExitStack() as stack:
        samplers: dict[str, Sampler] = {}
        for call in calls:
            try:
                for _ in range(policy.warmup):
                    call.fn()
                timer.synchronize()
                samplers[call.name] = stack.enter_context(timer.sampler(mode, call))
            except Exception as exc:  # recorded per provider; the others are still timed
                errors[call.name] = error_message(exc)
        start = clock()
        while samplers:
            for name, sampler in list(samplers.items()):  # A B A B …
                try:
                    if mode == "eager" and policy.eager_after_self:
                        own[name]()
                    samples[name].extend(sampler(batch))
                except Exception as exc:
                    errors[name] = error_message(exc)
                    del samplers[name]
            if _done([samples[n] for n in samplers], policy, clock() - start):
                break
    return [_result(c.name, mode, samples[c.name], errors.get(c.name), policy) for c in calls]


def _done(active: list[list[Sample]], policy: TimingPolicy, elapsed: float) -> bool:
    if not active:
        return True
    n = min(len(s) for s in active)
    if n < policy.min_reps:  # a floor even past max_seconds: without it a slow call has no CI
        return False
    if n >= policy.max_reps or elapsed >= policy.max_seconds:
        return True
    return all(converged(summarize([t for t, _ in s]), policy.ci_target) for s in active)


def _result(
    name: str, mode: str, samples: list[Sample], error: str | None, policy: TimingPolicy
) -> Measurement:
    if error is not None:
        return Measurement(name, mode, error=error)
    summary = summarize([t for t, _ in samples])
    kernels: dict[str, list[float]] = defaultdict(list)
    for _, per_kernel in samples:
        for kernel, ms in per_kernel.items():
            kernels[kernel].append(ms)
    return Measurement(
        name,
        mode,
        summary,
        ci_wide=not converged(summary, policy.ci_target),
        kernel_ms={k: median(v) for k, v in kernels.items()},
    )


def split_kernel_events(
    events: Sequence[tuple[str, float, float]], prefixes: Sequence[str], reps: int
) -> list[Sample]:
    """Per-repetition samples from profiler device events (name, start µs, duration µs).

    Events whose names start with one of `prefixes` (longest match wins) are the provider's; taken
    in start order, they split evenly into `reps` consecutive repetitions. Each kernel is charged
    from the later of its start and the end of the repetition's earlier kernels to its end, so
    overlapping kernels are not counted twice and a repetition's total is the time its kernels
    kept the GPU busy. Per-prefix times keep the first launch order.
    """

    def prefix_of(name: str) -> str | None:
        matches = [p for p in prefixes if name.startswith(p)]
        return max(matches, key=len) if matches else None

    mine = sorted((start, prefix_of(name), dur) for name, start, dur in events if prefix_of(name))
    if not mine:
        raise TimingError(f"no profiled kernel name starts with any of {list(prefixes)}")
    if len(mine) % reps:
        raise TimingError(f"{len(mine)} matching kernels do not split evenly into {reps} reps")
    per_rep = len(mine) // reps
    result = []
    for r in range(reps):
        per_kernel: dict[str, float] = {}
        busy_until = float("-inf")
        for start, prefix, dur in mine[r * per_rep : (r + 1) * per_rep]:
            end = start + dur
            own = max(0.0, end - max(start, busy_until))
            busy_until = max(busy_until, end)
            per_kernel[prefix] = per_kernel.get(prefix, 0.0) + own / 1000
        result.append((sum(per_kernel.values()), per_kernel))
    return result


# Host time to launch a CUDA graph (a few µs) falls between the start event and the graph's first
# kernel when the stream is idle as the event is recorded. Cold, the L2 flush queued ahead covers
# it; warm, a spinning kernel of this many cycles (about 50 µs at 2 GHz) is queued ahead instead.
HIDE_LAUNCH_CYCLES = 100_000


class CudaTimer:
    """Timer on the current CUDA device: CUDA events, CUDA graphs and torch.profiler."""

    def __init__(self, l2: str = "cold", flush_bytes: int = 512 << 20) -> None:
        import torch

        self._torch = torch
        cold = l2 == "cold"
        self._flush_buffer = (
            torch.empty(flush_bytes, dtype=torch.uint8, device="cuda") if cold else None
        )

    def _flush(self) -> None:
        if self._flush_buffer is not None:
            self._flush_buffer.zero_()

    def synchronize(self) -> None:
        self._torch.cuda.synchronize()

    @contextmanager
    def sampler(self, mode: str, call: Call) -> Iterator[Sampler]:
        torch = self._torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def timed(run: Callable[[], object], idle_first: bool) -> Sample:
            self._flush()
            if idle_first:  # eager: the GPU waits for the host, so host work is timed
                torch.cuda.synchronize()
            elif self._flush_buffer is None:  # graph, warm: keep the launch out of the time
                torch.cuda._sleep(HIDE_LAUNCH_CYCLES)
            start.record()
            run()
            end.record()
            end.synchronize()
            return start.elapsed_time(end), {}

        if mode == "eager":
            yield lambda n: [timed(call.fn, idle_first=True) for _ in range(n)]
        elif mode == "graph":
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                captured = call.fn()
            try:
                if call.verify is not None:
                    _fill_nan(captured)
                    graph.replay()
                    torch.cuda.synchronize()
                    call.verify(captured)
                del captured
                yield lambda n: [timed(graph.replay, idle_first=False) for _ in range(n)]
            finally:
                graph.reset()
        elif mode == "kernels":
            if not call.kernel_prefixes:
                raise TimingError(
                    f"{call.name} declares no kernel_prefixes to attribute kernels by"
                )
            yield lambda n: self._profile(call, n)
        else:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")

    def _profile(self, call: Call, reps: int) -> list[Sample]:
        torch = self._torch
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                self._flush()
                call.fn()
            torch.cuda.synchronize()
        events = [
            (e.name, e.time_range.start, e.time_range.elapsed_us())
            for e in prof.events()
            if e.device_type == DeviceType.CUDA
        ]
        return split_kernel_events(events, call.kernel_prefixes, reps)


def _fill_nan(output: object) -> None:
    """Fill the floating-point tensors of an output (a tensor or a tuple of them) with NaN, so
    that a replay which leaves any of it unwritten cannot pass."""
    for tensor in output if isinstance(output, tuple) else (output,):
        if tensor is not None and tensor.is_floating_point():
            tensor.fill_(float("nan"))
