"""Launches of the forward's kernels, chained by programmatic dependent launch (PDL).

On sm_90 a kernel launched as a programmatic dependent of the one before it in the stream can be
scheduled before that one has finished; it must then wait (griddepcontrol.wait) before it touches
memory the earlier kernel writes. chunk_cumsum, the state walk, segment_scan, chunk_cb and
compute_out's row-block kernel call `follow_previous` first: each waits until every earlier
kernel has finished and its writes are visible, then lets its own successor be scheduled. What
this saves is the launch gap between kernels, a microsecond or so each, which matters at short
sequences (H200, 1K-2K/32/64: −6 to −9 %; docs/performance.md, change 18). The calls are
compiled in only where a config chains the launches (`SSDConfig.dependent_launch`, each kernel's
CHAINED constant); left in but unused they still cost long kernels (change 20).

Measured on the H200 and kept out:
- compute_out is chained only where the whole chain is (short problems: −1 to −5 % at eight
  of the sweep's nine, +1.7 % at 2K/32/256, change 34; problems up to 4K of up to four times as
  many positions, changes 41 and 42). At long ones the calls cost its tens of thousands of short
  CTAs more than the gap saves (with them: compute_out +11 to +12 % at 64K/128/128 and
  16K/64/64).
- Releasing the successor after a kernel's main loop instead of at its start changed the
  compiled code: the walk and compute_out ran 1.6-2.4x slower, and two chunk_cb configurations
  gave wrong outputs (errors 1.2e-2 and 5.6e-2).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import cuda.tile as ct
import torch


@dataclass
class Recording:
    """Launches made inside `recorded()`, kept instead of run: (grid, kernel, args, dependent);
    which of them went to the second stream (their indices), and how many launches had been
    recorded at each `join`."""

    sms: int
    captured: bool = True  # record the forward as a CUDA graph's capture would launch it
    launches: list[tuple[tuple[int, int, int], object, tuple, bool]] = field(default_factory=list)
    aside: list[int] = field(default_factory=list)
    joins: list[int] = field(default_factory=list)


_recording: Recording | None = None


@contextmanager
def recorded(sms: int, captured: bool = True) -> Iterator[Recording]:
    """Record the launches made inside instead of running them, as on a GPU with `sms` SMs and,
    with `captured`, into a CUDA graph: with meta tensors the host code then runs on any machine,
    and `signatures.from_arguments` turns each launch into the exact specialisation a GPU would
    compile."""
    global _recording
    _recording = Recording(sms, captured)
    try:
        yield _recording
    finally:
        _recording = None


def is_recording() -> bool:
    """Whether launches are being recorded (inside `recorded()`) rather than run."""
    return _recording is not None


def capturing() -> bool:
    """Whether the launches go into a CUDA graph being captured (inside `recorded()`, whether the
    recording says so)."""
    if _recording is not None:
        return _recording.captured
    return torch.cuda.is_current_stream_capturing()


def sm_count(device: torch.device) -> int:
    """SMs of the device the launches go to (of the recorded one inside `recorded()`)."""
    if _recording is not None:
        return _recording.sms
    return _device_sm_count(device)


@functools.cache
def _device_sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def follow_previous(chained: bool) -> None:
    """Called first in each kernel of the chain with its compile-time flag: when `chained`, wait
    for the previous kernel in the stream to finish and its writes to become visible (a no-op
    unless launched as a dependent), then allow the next one to be scheduled; otherwise nothing
    is compiled in: the two instructions alone slow long kernels (the walk at 16K/32/256 with 64
    state columns: 0.166 → 0.214 ms, change 20)."""
    if chained:
        ct.grid_dependency_control_wait()
        ct.grid_dependency_control_launch_dependents()


def launch(
    grid: tuple[int, int, int], kernel, args: tuple, dependent: bool, aside: bool = False
) -> None:
    """Launch on the current stream, as a programmatic dependent of the previous kernel or not;
    `aside`: on the current device's second stream instead (after `fork`; never a dependent,
    since nothing before it there is its producer), so that it runs beside what the current
    stream runs until `join`."""
    if aside and dependent:
        raise ValueError("a launch on the second stream cannot be a programmatic dependent")
    if _recording is not None:
        if aside:
            _recording.aside.append(len(_recording.launches))
        _recording.launches.append((grid, kernel, args, dependent))
        return
    stream = _second_stream(torch.cuda.current_device()) if aside else torch.cuda.current_stream()
    ct.launch(stream, grid, kernel, args, programmatic_dependent_launch=dependent)


def fork() -> None:
    """Make the current device's second stream wait for what the current stream has so far (the
    forward's inputs), before the launches an `aside` launch is to run beside."""
    if _recording is None:
        _second_stream(torch.cuda.current_device()).wait_stream(torch.cuda.current_stream())


def join() -> None:
    """Make the current stream wait for what was launched `aside` so far."""
    if _recording is not None:
        _recording.joins.append(len(_recording.launches))
        return
    torch.cuda.current_stream().wait_stream(_second_stream(torch.cuda.current_device()))


@functools.cache
def _second_stream(device: int) -> torch.cuda.Stream:
    return torch.cuda.Stream(device)
