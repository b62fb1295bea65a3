"""Which measured rates a run's rows divide by (harness.peaks); the measurement itself needs a GPU
(tests/harness/test_timing_gpu.py)."""

from __future__ import annotations

from harness import peaks

RUN = {"bf16_tflops": 750.0, "copy_gbps": 4100.0}
OWN = {"bf16_tflops": 780.0, "copy_gbps": 4000.0}


def meta(*workers: dict) -> dict:
    return {"peaks": dict(RUN), "workers": list(workers)}


def test_a_row_divides_by_its_workers_own_rate_else_the_runs() -> None:
    m = meta({"worker": "a:1", "peaks": OWN}, {"worker": "b:2"}, {"worker": "c:3", "peaks": None})
    assert peaks.rates_by_worker(m) == {"a:1": OWN}
    assert peaks.row_rate(m, "a:1", "bf16_tflops") == 780.0
    assert peaks.row_rate(m, "a:1", "copy_gbps") == 4000.0
    for older in ("b:2", "c:3", "unknown:9", None):
        assert peaks.row_rate(m, older, "bf16_tflops") == 750.0


def test_no_rate_without_a_measurement() -> None:
    assert peaks.row_rate({}, "a:1", "bf16_tflops") is None
    assert peaks.row_rate({"peaks": {}, "workers": [{"worker": "a:1"}]}, "a:1", "copy_gbps") is None


def test_run_rates_names_one_rate_only_where_every_worker_used_it() -> None:
    assert peaks.run_rates(meta({"worker": "a:1", "peaks": dict(RUN)}, {"worker": "b:2"})) == RUN
    assert (
        peaks.run_rates(
            meta({"worker": "a:1", "peaks": dict(RUN)}, {"worker": "b:2", "peaks": OWN})
        )
        is None
    )
    assert peaks.run_rates({}) == {}


def on(gpu: str) -> dict:
    return {"gpu": {"name": gpu}}


def test_the_highest_rate_is_over_the_runs_workers_on_that_gpu_model() -> None:
    m = {
        **meta(
            {"worker": "a:1", "peaks": OWN, "env": on("NVIDIA H200")},
            {"worker": "b:2", "peaks": {"bf16_tflops": 990.0}, "env": on("NVIDIA B200")},
            {"worker": "c:3", "env": on("NVIDIA H200")},  # recorded before per-worker rates
        ),
        "env": on("NVIDIA H200"),
    }
    assert peaks.highest_rate(m, "bf16_tflops", "NVIDIA H200") == 780.0  # a:1 over meta's 750
    assert peaks.highest_rate(m, "copy_gbps", "NVIDIA H200") == 4100.0  # meta's over a:1's
    assert peaks.highest_rate(m, "bf16_tflops", "NVIDIA B200") == 990.0
    assert peaks.highest_rate(m, "bf16_tflops", "NVIDIA H100") is None
    assert peaks.highest_rate({}, "bf16_tflops", "NVIDIA H200") is None
