"""The one builder of synthetic runs (results table + metadata) for CPU tests of analysis,
report, gate and notebook. Times follow a smooth model of the H200 Triton baseline; the cuTile
provider runs `speedup` times faster. Rows follow the schema of docs/architecture.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from harness import records
from harness.environment import gpu_slug
from harness.problem import SHAPE_FIELDS, Problem, flops, min_bytes

GPU = "NVIDIA H200"
PEAKS = {"bf16_tflops": 790.0, "copy_gbps": 4000.0}
TRITON_KERNELS = {
    "_chunk_cumsum_fwd_kernel": 0.05,
    "_bmm_chunk_fwd_kernel": 0.10,
    "_chunk_state_fwd_kernel": 0.20,
    "_state_passing_fwd_kernel": 0.10,
    "_chunk_scan_fwd_kernel": 0.55,
}
CUTILE_KERNELS = {"chunk_cumsum": 0.05, "fwd_pass_state": 0.45, "compute_out": 0.50}
EAGER_HOST_MS = 0.4


def triton_ms(problem: Problem) -> float:
    """Smooth stand-in for the measured Triton graph-mode time (ms)."""
    return 0.02 + 2.6e-9 * problem.seqlen * problem.nheads * (problem.dstate + 96)


def synthetic_table(
    *,
    run_id: str = "synthetic",
    seqlens: tuple[int, ...] = (1024, 4096, 16384),
    nheads: tuple[int, ...] = (32, 64),
    dstates: tuple[int, ...] = (64, 128),
    modes: tuple[str, ...] = ("eager", "graph", "kernels"),
    speedup: float | Callable[[Problem], float] = 1.4,
    ci_rel: float = 0.01,
    jitter: float = 0.0,
    seed: int = 0,
    gpu: str = GPU,
) -> pd.DataFrame:
    """All rows of a run: every (L, H, N) point x provider (triton, cutile) x mode, status ok.

    `jitter` multiplies each median by (1 + jitter * standard normal) drawn from `seed`, to mimic
    run-to-run noise; the recorded CI is median * (1 -+ ci_rel).
    """
    rng = np.random.default_rng(seed)
    rows = []
    for seqlen in seqlens:
        for h in nheads:
            for n in dstates:
                problem = Problem(seqlen=seqlen, nheads=h, dstate=n)
                base = triton_ms(problem)
                ratio = speedup(problem) if callable(speedup) else speedup
                for mode in modes:
                    for provider, ms, kernels in (
                        ("triton", base, TRITON_KERNELS),
                        ("cutile", base / ratio, CUTILE_KERNELS),
                    ):
                        ms *= 1.0 + jitter * rng.standard_normal()
                        kernel_ms = {k: ms * share for k, share in kernels.items()}
                        if mode == "eager":
                            ms += EAGER_HOST_MS
                        rows.append(_row(run_id, problem, provider, mode, ms, ci_rel, gpu, seed))
                        rows[-1]["kernel_ms"] = json.dumps(kernel_ms if mode == "kernels" else {})
    return pd.DataFrame(rows)


def _row(
    run_id: str,
    problem: Problem,
    provider: str,
    mode: str,
    ms: float,
    ci_rel: float,
    gpu: str,
    seed: int,
) -> dict:
    options = {k: v for k, v in asdict(problem).items() if k.startswith(("has_", "D_", "dt_"))}
    tflops = flops(problem) / (ms * 1e-3) / 1e12
    gbps = min_bytes(problem) / (ms * 1e-3) / 1e9
    return {
        "run_id": run_id,
        "point": problem.key(),
        **{k: getattr(problem, k) for k in (*SHAPE_FIELDS, "dtype")},
        "options": records.options_json(options),
        "provider": provider,
        "mode": mode,
        "status": "ok",
        "error": "",
        "rel_err": 2.2e-3,
        "final_rel_err": math.nan,
        "check_against": "float64",
        "median_ms": ms,
        "p10_ms": ms * (1 - 2 * ci_rel),
        "p90_ms": ms * (1 + 2 * ci_rel),
        "ci_low_ms": ms * (1 - ci_rel),
        "ci_high_ms": ms * (1 + ci_rel),
        "reps": 50,
        "ci_rel": ci_rel,
        "ci_wide": ci_rel > 0.02,
        "kernel_ms": "{}",
        "tflops": tflops,
        "gbps": gbps,
        "frac_peak_flops": tflops / PEAKS["bf16_tflops"],
        "frac_peak_bw": gbps / PEAKS["copy_gbps"],
        "tuning": "{}",
        "l2": "cold",
        "gpu_name": gpu,
        "device_index": 0,
        "gpu_clocks": None,
        "timings": 1,
        "worker": "synthetic:0",
        "seed": seed,
        "timestamp": "2026-11-29T12:00:00+00:00",
    }


#: meta["config"] measurement settings of every synthetic run: those of the committed H200
#: baseline (tune=off, default timing with max_seconds 1.2), trimmed to what tests read.
CONFIG = {
    "sweep": {"name": "synthetic"},
    "timing": {"warmup": 3, "min_reps": 10, "max_reps": 200, "max_seconds": 1.2,
               "ci_target": 0.01, "kernels_batch": 10, "modes": ["eager", "graph", "kernels"],
               "l2": "cold", "flush_mib": 512},
    "seed": 0,
    "tune": "off",
    "triton_autotune": "once",
}  # fmt: skip


def synthetic_meta(run_id: str = "synthetic", gpu: str = GPU, settings: dict | None = None) -> dict:
    """Run metadata in the documented layout (env content is illustrative). `settings` replaces
    config values by dotted key, e.g. {"timing.l2": "warm", "tune": "cached"}."""
    config = json.loads(json.dumps(CONFIG))
    for key, value in (settings or {}).items():
        *parents, last = key.split(".")
        node = config
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return {
        "schema_version": records.SCHEMA_VERSION,
        "run_id": run_id,
        "created": "2026-11-29T12:00:00+00:00",
        "env": {
            "gpu": {"name": gpu, "count": 1, "memory_gib": 139.8, "sm_count": 132},
            "driver": "580.159.04",
            "versions": {"torch": "2.11.0+cu130", "triton": "3.6.0", "cuda-tile": "1.7.0"},
            "git": {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": False},
        },
        "config": config,
        "peaks": dict(PEAKS),
    }


def write_run(run_dir: Path, table: pd.DataFrame, meta: dict) -> Path:
    """Write results.parquet and meta.json through harness.records (so the schema is checked)."""
    arrow = records.to_table(table.to_dict("records"), meta)
    run_dir.mkdir(parents=True, exist_ok=True)
    pq.write_table(arrow, run_dir / records.RESULTS_FILE)
    records.write_meta(run_dir, meta)
    return run_dir


def build_run(
    root: Path,
    run_id: str = "synthetic",
    gpu: str = GPU,
    settings: dict | None = None,
    **table_options,
) -> Path:
    """A complete run directory under root/<gpu-slug>/<run_id>/; returns its path. `settings`:
    as for synthetic_meta."""
    table = synthetic_table(run_id=run_id, gpu=gpu, **table_options)
    return write_run(root / gpu_slug(gpu) / run_id, table, synthetic_meta(run_id, gpu, settings))
