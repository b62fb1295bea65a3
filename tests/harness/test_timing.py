"""harness.timing's logic with a scripted timer: interleaving, warm-up, adaptive stopping,
error isolation, and splitting profiler events into per-repetition kernel times."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from harness.timing import Call, TimingError, TimingPolicy, measure, split_kernel_events


class ScriptedTimer:
    """Each call's samples come from a per-name iterator of times; every sampler call is logged."""

    def __init__(self, times: dict[str, Callable[[], Iterator[float]]], fail: dict | None = None):
        self.times = {name: make() for name, make in times.items()}
        self.fail = fail or {}  # name -> sampler call number that raises (1-based)
        self.log: list[tuple[str, int]] = []
        self.opened: list[str] = []
        self.closed: list[str] = []

    def synchronize(self) -> None:
        pass

    @contextmanager
    def sampler(self, mode: str, call: Call):
        self.opened.append(call.name)
        calls = itertools.count(1)

        def take(n: int):
            self.log.append((call.name, n))
            if next(calls) == self.fail.get(call.name):
                raise RuntimeError(f"{call.name} broke\nsecond line")
            return [(next(self.times[call.name]), {"k": 1.0}) for _ in range(n)]

        try:
            yield take
        finally:
            self.closed.append(call.name)


def constant(value: float) -> Callable[[], Iterator[float]]:
    return lambda: itertools.repeat(value)


def alternating(a: float, b: float) -> Callable[[], Iterator[float]]:
    return lambda: itertools.cycle([a, b])


def calls(*names: str, counter: dict | None = None) -> list[Call]:
    def fn_for(name: str):
        def fn() -> None:
            if counter is not None:
                counter[name] = counter.get(name, 0) + 1

        return fn

    return [Call(name, fn_for(name)) for name in names]


POLICY = TimingPolicy(warmup=2, min_reps=10, max_reps=50, max_seconds=1e9, ci_target=0.01)


def test_providers_alternate_and_stop_at_min_reps_once_converged() -> None:
    timer = ScriptedTimer({"a": constant(1.0), "b": constant(2.0)})
    results = measure(calls("a", "b"), "graph", POLICY, timer)
    assert [name for name, _ in timer.log] == ["a", "b"] * 10
    assert [(m.name, m.summary.n, m.summary.median, m.ci_wide) for m in results] == [
        ("a", 10, 1.0, False),
        ("b", 10, 2.0, False),
    ]
    assert timer.closed == ["b", "a"]  # samplers released (graphs freed) after the mode


class FollowerTimer:
    """Times `base[name]`, plus `penalty` for an eager call that follows a call of `after`: what
    a call pays after another library's (run 225). The calls from `follower_calls` report to it."""

    def __init__(self, base: dict[str, float], after: str, penalty: float):
        self.base, self.after, self.penalty = base, after, penalty
        self.previous = ""

    def synchronize(self) -> None:
        pass

    @contextmanager
    def sampler(self, mode: str, call: Call):
        def take(n: int):
            samples = []
            for _ in range(n):
                extra = self.penalty if self.previous == self.after != call.name else 0.0
                samples.append((self.base[call.name] + extra, {}))
                call.fn()
            return samples

        yield take


def follower_calls(timer: FollowerTimer) -> list[Call]:
    def fn_for(name: str):
        def fn() -> None:
            timer.previous = name

        return fn

    return [Call(name, fn_for(name)) for name in timer.base]


@pytest.mark.parametrize("after_self", [False, True])
def test_eager_samples_can_follow_their_own_call(after_self: bool) -> None:
    """Two variants after a reference: in A B C order the first always follows the reference and
    pays for it; with `eager_after_self` none does. Other modes are sampled as before."""
    timer = FollowerTimer({"ref": 5.0, "a": 1.0, "b": 1.0}, "ref", 0.5)
    policy = TimingPolicy(warmup=0, min_reps=10, max_seconds=1e9, eager_after_self=after_self)
    medians = {
        m.name: m.summary.median for m in measure(follower_calls(timer), "eager", policy, timer)
    }
    assert medians == {"ref": 5.0, "a": 1.0 if after_self else 1.5, "b": 1.0}
    graph = {
        m.name: m.summary.median for m in measure(follower_calls(timer), "graph", policy, timer)
    }
    assert graph["a"] == 1.5


def test_warmup_calls_run_before_sampling_and_are_not_samples() -> None:
    counter: dict[str, int] = {}
    timer = ScriptedTimer({"a": constant(1.0)})
    (m,) = measure(calls("a", counter=counter), "eager", POLICY, timer)
    assert counter == {"a": POLICY.warmup}  # the scripted sampler never calls fn itself
    assert m.summary.n == POLICY.min_reps


def test_noisy_samples_run_to_max_reps_and_are_flagged() -> None:
    timer = ScriptedTimer({"a": constant(1.0), "b": alternating(1.0, 2.0)})
    a, b = measure(calls("a", "b"), "eager", POLICY, timer)
    assert a.summary.n == b.summary.n == POLICY.max_reps  # a keeps alternating with b
    assert b.ci_wide and not a.ci_wide
    assert b.summary.ci_rel > POLICY.ci_target


def test_time_cap_stops_sampling() -> None:
    ticks = itertools.count()
    policy = TimingPolicy(warmup=0, min_reps=10, max_reps=1000, max_seconds=25.0)
    timer = ScriptedTimer({"a": alternating(1.0, 3.0)})
    (m,) = measure(calls("a"), "eager", policy, timer, clock=lambda: float(next(ticks)))
    assert m.summary.n == 25 and m.ci_wide


def test_a_slow_call_still_gets_min_reps_past_the_time_cap() -> None:
    """A call far slower than max_seconds allows (a regression) still gets an interval, so the
    gate can judge it; it stops at min_reps."""
    ticks = itertools.count(step=100.0)
    policy = TimingPolicy(warmup=0, min_reps=6, max_reps=1000, max_seconds=1.0)
    timer = ScriptedTimer({"a": alternating(1.0, 3.0), "b": constant(1.0)})
    a, b = measure(calls("a", "b"), "graph", policy, timer, clock=lambda: next(ticks))
    assert a.summary.n == b.summary.n == 6
    assert a.summary.ci_low == 1.0 and a.summary.ci_high == 3.0


def test_kernels_mode_samples_in_batches_and_keeps_kernel_medians() -> None:
    policy = TimingPolicy(warmup=0, min_reps=10, max_reps=100, kernels_batch=4)
    timer = ScriptedTimer({"a": constant(1.0), "b": constant(1.0)})
    a, _ = measure(calls("a", "b"), "kernels", policy, timer)
    assert timer.log[:4] == [("a", 4), ("b", 4), ("a", 4), ("b", 4)]
    assert a.summary.n == 12 and a.kernel_ms == {"k": 1.0}


def test_a_failing_provider_drops_out_and_the_other_is_still_timed() -> None:
    timer = ScriptedTimer({"a": constant(1.0), "b": constant(2.0)}, fail={"a": 3})
    a, b = measure(calls("a", "b"), "graph", POLICY, timer)
    assert a.summary is None and a.error == "RuntimeError: a broke"
    assert b.error == "" and b.summary.n == POLICY.min_reps
    assert [name for name, _ in timer.log].count("a") == 3


def test_a_failing_warmup_is_an_error_for_that_provider_only() -> None:
    def boom() -> None:
        raise ValueError("bad launch")

    timer = ScriptedTimer({"a": constant(1.0), "b": constant(2.0)})
    a, b = measure([Call("a", boom), Call("b", lambda: None)], "eager", POLICY, timer)
    assert a.error == "ValueError: bad launch" and b.summary.median == 2.0
    assert timer.opened == ["b"]


def test_calls_of_one_name_are_refused() -> None:
    timer = ScriptedTimer({"a": constant(1.0)})
    with pytest.raises(ValueError, match="distinct names"):
        measure(calls("a", "a"), "graph", POLICY, timer)


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        measure(calls("a"), "wallclock", POLICY, ScriptedTimer({"a": constant(1.0)}))


def test_split_kernel_events_groups_by_prefix_and_repetition() -> None:
    events = [
        # name, start µs, duration µs; two reps of a provider launching two kernels, with the
        # L2 flush and an unrelated kernel in between (ignored).
        ("vectorized_elementwise_kernel<FillFunctor>", 0.0, 100.0),
        ("compute_out_Kt2_bf16_x", 150.0, 30.0),
        ("chunk_cumsum_kernel_Kt2_A2", 110.0, 10.0),
        ("vectorized_elementwise_kernel<FillFunctor>", 200.0, 100.0),
        ("chunk_cumsum_kernel_Kt2_A2", 310.0, 12.0),
        ("compute_out_Kt2_bf16_x", 330.0, 34.0),
    ]
    samples = split_kernel_events(events, ("chunk_cumsum", "compute_out", "compute"), reps=2)
    assert samples == [
        (pytest.approx(0.040), {"chunk_cumsum": pytest.approx(0.010), "compute_out": 0.030}),
        (pytest.approx(0.046), {"chunk_cumsum": pytest.approx(0.012), "compute_out": 0.034}),
    ]
    assert list(samples[0][1]) == ["chunk_cumsum", "compute_out"]  # launch order


def test_split_kernel_events_does_not_count_overlap_twice() -> None:
    """A programmatic dependent starts before its predecessor ends and waits for it: only the
    time after the predecessor has ended is its own; a kernel wholly inside another counts 0."""
    events = [
        ("walk_kernel", 0.0, 100.0),
        ("scan_kernel", 60.0, 50.0),  # waits from 60 to 100, runs to 110
        ("out_kernel", 105.0, 5.0),  # starts and ends inside scan
        ("out_kernel", 120.0, 30.0),  # after a gap: all its own
    ]
    [(total, per_kernel)] = split_kernel_events(events, ("walk", "scan", "out"), reps=1)
    assert per_kernel == {"walk": 0.1, "scan": pytest.approx(0.010), "out": pytest.approx(0.030)}
    assert total == pytest.approx(0.140)  # the busy time, 150 µs minus the 10 µs gap


def test_split_kernel_events_refuses_what_it_cannot_attribute() -> None:
    events = [("k1", 0.0, 1.0), ("k1", 5.0, 1.0), ("k1", 9.0, 1.0)]
    with pytest.raises(TimingError, match="do not split evenly into 2 reps"):
        split_kernel_events(events, ("k1",), reps=2)
    with pytest.raises(TimingError, match="no profiled kernel name starts with"):
        split_kernel_events(events, ("other",), reps=3)


class _StreamLog:
    """A fake torch whose CUDA calls log what they queue, in order (CudaTimer without a GPU)."""

    def __init__(self) -> None:
        self.log: list[str] = []
        log = self.log

        class Event:
            def __init__(self, enable_timing: bool) -> None:
                pass

            def record(self) -> None:
                log.append("record")

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, other) -> float:
                return 1.0

        class Graph:
            def replay(self) -> None:
                log.append("launch")

            def reset(self) -> None:
                pass

        @contextmanager
        def graph(g):
            yield

        self.cuda = type("cuda", (), {})()
        self.cuda.Event, self.cuda.CUDAGraph, self.cuda.graph = Event, Graph, graph
        self.cuda.synchronize = lambda: log.append("sync")
        self.cuda._sleep = lambda cycles: log.append("spin")


class _FlushBuffer:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def zero_(self) -> None:
        self.log.append("flush")


@pytest.mark.parametrize(
    ("l2", "mode", "queued"),
    [
        ("warm", "graph", ["spin", "record", "launch", "record"]),
        ("cold", "graph", ["flush", "record", "launch", "record"]),
        ("warm", "eager", ["sync", "record", "launch", "record"]),
        ("cold", "eager", ["flush", "sync", "record", "launch", "record"]),
    ],
)
def test_a_graph_launch_is_never_timed_from_an_idle_stream(l2, mode, queued) -> None:
    """Graph mode times device work: something is queued ahead of the start event (the flush,
    or warm a spinning kernel) so the host's launch latency falls before it. Eager mode times
    the host too, from an idle GPU."""
    from harness.timing import CudaTimer

    fake = _StreamLog()
    timer = CudaTimer.__new__(CudaTimer)
    timer._torch = fake
    timer._flush_buffer = _FlushBuffer(fake.log) if l2 == "cold" else None
    run = Call("a", lambda: fake.log.append("launch"))
    with timer.sampler(mode, run) as take:
        fake.log.clear()
        take(1)
    assert fake.log == queued
