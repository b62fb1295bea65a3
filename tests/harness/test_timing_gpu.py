"""The CUDA side of timing, peaks, environment capture and the runner, on a real GPU.

Run on a GPU node: `pytest -m gpu tests/harness/test_timing_gpu.py`. The CPU tests cover the
logic with fakes; these check what only a GPU can: CUDA events, graph capture and replay, the
profiler's kernel names, and a small real sweep end to end.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from harness import config, environment, records, runner
from harness.peaks import measure_peaks
from harness.timing import Call, CudaTimer, TimingPolicy, measure

pytestmark = pytest.mark.gpu

N = 1 << 24


def _scale_call(name: str = "scale") -> Call:
    """A call launching one Triton kernel with a known name (for mode kernels)."""
    import triton
    import triton.language as tl

    @triton.jit
    def ssdbench_test_scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)

    x = torch.randn(N, device="cuda")
    y = torch.empty_like(x)

    def fn() -> None:
        ssdbench_test_scale_kernel[(triton.cdiv(N, 1024),)](x, y, N, BLOCK=1024)

    fn()
    torch.cuda.synchronize()
    return Call(name, fn, ("ssdbench_test_scale_kernel",))


def test_graph_mode_times_only_a_replay_whose_output_is_verified() -> None:
    """verify sees what a replay wrote, not the eager call's answer: a call that launches
    otherwise while captured, or leaves its output unwritten in the graph (NaN-filled first),
    fails the mode instead of being timed."""
    timer = CudaTimer(l2="warm")
    policy = TimingPolicy(warmup=1, min_reps=6, max_reps=6, max_seconds=1.0)
    x = torch.randn(1 << 20, device="cuda")

    def verify(out: torch.Tensor) -> None:
        if not torch.allclose(out, x * 2):
            raise ValueError("the replay's output differs")

    def capturing() -> bool:
        return torch.cuda.is_current_stream_capturing()

    calls = [
        Call("right", lambda: x * 2, verify=verify),
        Call("other", lambda: x * (3 if capturing() else 2), verify=verify),
        Call("unwritten", lambda: torch.empty_like(x) if capturing() else x * 2, verify=verify),
        Call("unchecked", lambda: x * (3 if capturing() else 2)),
    ]
    results = {m.name: m for m in measure(calls, "graph", policy, timer)}
    assert results["right"].error == "" and results["right"].summary.n == 6
    assert results["unchecked"].error == ""  # without verify, what is timed is not judged
    for name in ("other", "unwritten"):
        assert results[name].error == "ValueError: the replay's output differs", name
        assert results[name].summary is None


def test_cuda_timer_measures_all_three_modes() -> None:
    timer = CudaTimer(l2="cold", flush_bytes=256 << 20)
    policy = TimingPolicy(warmup=2, min_reps=10, max_reps=100, max_seconds=5.0, kernels_batch=5)
    call = _scale_call()
    results = {
        mode: measure([call], mode, policy, timer)[0] for mode in ("eager", "graph", "kernels")
    }
    for mode, m in results.items():
        assert m.error == "", (mode, m.error)
        assert 0 < m.summary.median < 50, mode
    # 64 MiB read + written at a few TB/s: tens of µs of device time; eager adds host work.
    assert results["graph"].summary.median <= results["eager"].summary.median
    assert list(results["kernels"].kernel_ms) == ["ssdbench_test_scale_kernel"]
    assert results["kernels"].summary.median <= results["graph"].summary.median * 1.5


def test_kernels_mode_without_matching_names_is_an_error() -> None:
    timer = CudaTimer(l2="warm")
    call = _scale_call()
    (m,) = measure([Call("x", call.fn, ("no_such_kernel",))], "kernels", TimingPolicy(), timer)
    assert "no profiled kernel name starts with" in m.error


def test_peaks_are_plausible() -> None:
    peaks = measure_peaks("cuda", reps=5)
    assert 50 < peaks["bf16_tflops"] < 5000
    assert 200 < peaks["copy_gbps"] < 20000


def test_environment_describes_the_gpu() -> None:
    env = environment.capture(0)
    gpu = env["gpu"]
    assert gpu["name"] == torch.cuda.get_device_name(0)
    assert gpu["sm_count"] > 0 and gpu["memory_gib"] > 1
    assert env["cuda"] == torch.version.cuda
    json.dumps(env)  # goes into meta.json


def _small(tmp_path: Path, names: str, *extra: str) -> config.BenchConfig:
    overrides = ["sweep=smoke", "sweep.seqlen=[512]", "sweep.nheads=4", "sweep.dstate=64",
                 "timing=quick", f"providers.names=[{names}]", f"results_dir={tmp_path}",
                 "progress=false", *extra]  # fmt: skip
    return config.to_bench(config.compose(overrides))


def test_runner_end_to_end_with_the_reference(tmp_path: Path) -> None:
    cfg = _small(tmp_path, "reference", "check.fallback=reference")
    run_dir = runner.run(cfg)
    df, meta = records.load_run(run_dir)
    assert run_dir.parent.name == environment.gpu_slug(torch.cuda.get_device_name(0))
    assert meta["peaks"]["bf16_tflops"] > 0
    (worker,) = meta["workers"]  # end clocks are per process: in its worker record
    assert worker["state"] == "done" and worker["ended"]
    assert worker["peaks"] == meta["peaks"]  # the creating worker measured once, for both
    start, end = worker["env"]["clocks_start"], worker["env"]["clocks_end"]
    by_mode = df.set_index("mode")
    if shutil.which("nvidia-smi"):  # the clocks come from nvidia-smi
        assert isinstance(end, dict) and set(end) == set(start)
        for mode in ("eager", "graph"):  # each timed mode's rows: the GPU as its timing ended
            after = json.loads(by_mode.loc[mode, "gpu_clocks"])
            assert set(after) == set(start) and float(after["clocks.sm"]) > 0
            # Timed again only after a held clock, and the timing kept was read free of it
            # unless the re-timings ran out.
            timings, t = by_mode.loc[mode, "timings"], cfg.timing
            assert 1 <= timings <= 1 + t.held_retimes
            if timings <= t.held_retimes:
                assert environment.held_clock(after, t.held_floor) is None
        assert pd.isna(by_mode.loc["kernels", "gpu_clocks"])  # not timed: unsupported
    assert by_mode.loc["eager", "status"] == "ok" and by_mode.loc["graph", "status"] == "ok"
    assert by_mode.loc["kernels", "status"] == "unsupported"
    assert by_mode.loc["graph", "check_against"] == "float64"


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("mamba_ssm") is None, reason="needs mamba_ssm")
def test_runner_end_to_end_with_triton(tmp_path: Path) -> None:
    run_dir = runner.run(_small(tmp_path, "triton", "triton_autotune=per_point"))
    df, _ = records.load_run(run_dir)
    assert set(df["status"]) == {"ok"}, df[["mode", "status", "error"]]
    kernels = json.loads(df.set_index("mode").loc["kernels", "kernel_ms"])
    assert set(kernels) <= set(runner.providers.get("triton").kernel_prefixes)
    assert len(kernels) == 5
    assert (df["rel_err"] < 1e-2).all()
