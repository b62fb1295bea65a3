"""Per-shape autotuner for the cuTile SSD kernels, with a JSON cache on disk.

The state walk's knobs and then compute_out's are searched on the point's own inputs, each
kernel's shape knobs and then its load latency hints on that pick; chunk_cumsum's heads per CTA
last. Each candidate is timed as the whole forward, captured in a CUDA graph and replayed from a
cold L2 as the harness times it.
Each search first compiles all its candidates in parallel processes into cuTile's disk cache
(precompile.py), then times them in two rounds (`search_timed`). Skipped:
candidates that fail to compile, and those with a launch that spills more local memory than the
stage's start spills in the same kernel (the start is always timed). Every loss measured on the
H200 came with spills or far more registers than the defaults' (docs/performance.md) and no pick
kept spilled, while about half of compute_out's candidates spill, each costing the search about
0.4 s to load and time. A start that spills itself does not skip the rest: at dstate 256 over
chunks of 128 the default chunk kernel spills 64 B, and until run 207 that skipped every
candidate of the search there.
The search is its own rather than `ct.tune.exhaustive_search`, which times one kernel alone and
wraps every candidate in a new kernel object, so that its bytecode is rebuilt at every shape even
when the cubin is cached.
Results are cached by GPU (architecture, name, SM count), kernel source, shape, dtype, options
and the cuda-tile / tileiras versions, so a sweep tunes each shape once and later runs reuse it.
The cache is plain JSON written atomically; a corrupt or foreign file is reported and rebuilt,
and an entry that is not a valid config is reported and never used (TuningCache).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import itertools
import json
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path

import torch

from kernels.cutile.config import (
    CHUNK_KERNEL_MAX_Q,
    CHUNK_MAX_HEADS,
    DEFAULT_CONFIG,
    SSDConfig,
    inputs_default_config,
)
from kernels.cutile.precompile import precompile
from kernels.cutile.tiles import pow2_tile
from kernels.cutile.toolchain import tileiras_version

POLICIES = ("off", "cached", "force")
# /2: picks searched under change 73's spill rule (docs/performance.md); /1 files are rebuilt.
CACHE_FORMAT = "ssdbench-cutile-tuning/2"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ssdbench"


def cache_path() -> Path:
    """SSDBENCH_TUNING_CACHE, else ~/.cache/ssdbench/cutile-tuning.json."""
    return Path(os.environ.get("SSDBENCH_TUNING_CACHE", DEFAULT_CACHE / "cutile-tuning.json"))


def state_candidates(dstate: int, chunk_size: int) -> list[dict[str, int]]:
    """fwd_pass_state knobs: dstate columns per CTA, rows per mma step, occupancy, which operand
    carries the decay weights, heads per CTA sharing B."""
    blocks = sorted({min(nb, pow2_tile(dstate)) for nb in (64, 128, 256)})
    steps = sorted({min(tq, chunk_size) for tq in (64, 256)})
    return [
        {
            "state_block_n": nb,
            "state_block_q": tq,
            "state_occupancy": occ,
            "state_weight_x": wx,
            "state_heads": hs,
        }
        for nb, tq, occ, wx, hs in itertools.product(blocks, steps, (1, 2, 4), (0, 1), (1, 2))
    ]


# Latency hints searched on each kernel's pick. tileiras builds a different load pipeline per
# hint, not in the hint's order (the walk at 16K/64/256 over chunks of 256: 147, 123, 220 KB of
# shared memory at 2, 4, 8), and the builds ran up to 17 % apart (docs/performance.md, change 49).
LATENCIES = (2, 4, 6, 8)
CUMSUM_HEADS = (2, 4, 8, 16)


def state_hint_candidates() -> list[dict[str, int]]:
    """fwd_pass_state's load latency hint, whether it reads its decay weights from chunk_cumsum
    or computes them, and whether its state stores may use TMA: the three change which loads and
    stores its pipeline carries. Each at one and at two CTAs per SM, whatever the walk's stage
    picked: the pipeline a hint builds depends on the registers and shared memory a CTA may take
    (64K/128/64: one per SM lost at TMA stores and hint 4, and won −11 % in the walk at plain
    stores and 6, which the walk's stage never timed; docs/performance.md, change 53)."""
    return [
        {
            "state_latency": latency,
            "state_weights": weights,
            "state_store_tma": tma,
            "state_occupancy": occupancy,
        }
        for latency, weights, tma, occupancy in itertools.product(LATENCIES, (0, 1), (0, 1), (1, 2))
    ]


def cumsum_candidates() -> list[dict[str, int]]:
    """chunk_cumsum's heads per CTA, searched last: its effect is mostly on when the walk it
    releases starts (1K/64/64: 4 heads per CTA left chunk_cumsum as fast and the walk 2 µs
    slower; docs/performance.md, change 61)."""
    return [{"cumsum_heads": heads} for heads in CUMSUM_HEADS]


def out_hint_candidates() -> list[dict[str, int]]:
    """compute_out's load latency hint (the chunk kernel's too)."""
    return [{"out_latency": latency} for latency in LATENCIES]


def out_candidates(dstate: int, chunk_size: int) -> list[dict[str, int]]:
    """compute_out knobs: rows per CTA, causal k-tile, dstate slice per mma, occupancy, heads per
    CTA, C·Bᵀ computed inside or read from chunk_cb, and with chunk_cb whether the k-tiles'
    decays are hinted (they paid only there, change 29). The row-times-column decay is on, as in
    default_config (two heads computing C·Bᵀ inside at dstate 256 took it only once compute_out
    peeled its diagonal tile, change 54). Chunks up to CHUNK_KERNEL_MAX_Q add the chunk kernel: 1 to
    CHUNK_MAX_HEADS heads per CTA, one CTA per SM (as it builds), decays hinted or not."""
    rows = sorted({min(tm, chunk_size) for tm in (64, 128)})
    slices = sorted({min(ns, pow2_tile(dstate)) for ns in (64, 128)})
    candidates = [
        {
            "out_chunk_heads": 0,
            "out_block_m": tm,
            "out_block_k": tk,
            "out_slice_n": ns,
            "out_occupancy": occ,
            "out_heads": hb,
            "out_cb": cb,
            "out_rank1": 1,
            "out_hint_decays": hint,
        }
        for tm, tk, ns, occ, hb, cb, hint in itertools.product(
            rows, (32, 64), slices, (2, 3, 4), (1, 2), (0, 1), (0, 1)
        )
        if tk <= tm and hint <= cb
    ]
    if chunk_size <= CHUNK_KERNEL_MAX_Q:
        unused = {k: getattr(DEFAULT_CONFIG, k) for k in candidates[0]}
        heads = [1 << i for i in range(CHUNK_MAX_HEADS.bit_length())]
        candidates += [
            {**unused, "out_chunk_heads": h, "out_occupancy": 1, "out_hint_decays": hint}
            for h, hint in itertools.product(heads, (0, 1))
        ]
    return candidates


@functools.cache
def kernel_source_hash() -> str:
    """Hash of this package's sources: a choice tuned for other kernel code is not reused."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def device_label(device: torch.device) -> str:
    """The GPU a pick was timed on: architecture, name and SM count. The tuner plans the walk's
    split for the SM count, and GPUs of one architecture differ in it and in memory bandwidth
    (H100 PCIe, H100 SXM, H200, MIG slices), so a pick made on one is not reused on another."""
    props = torch.cuda.get_device_properties(device)
    return f"sm_{props.major}{props.minor} {props.name} {props.multi_processor_count} SMs"


def tuning_key(kwargs: dict) -> str:
    """Everything a tuned choice depends on: device, toolchain, shape, dtype and the options
    that change which kernels are built (dt_limit is a run-time argument of the same ones)."""
    import cuda.tile as ct

    x, B = kwargs["x"], kwargs["B"]
    D = kwargs.get("D")
    tileiras = tileiras_version()
    if tileiras is None:
        raise RuntimeError(
            "cannot read the version of the tileiras cuTile compiles with, which keys the tuning "
            "cache: check that `tileiras --version` runs, or set tune=off"
        )
    parts = [
        device_label(x.device),
        f"kernels {kernel_source_hash()}",
        f"cuda-tile {ct.__version__}",
        f"tileiras {tileiras}",
        str(x.dtype).removeprefix("torch."),
        "b{}_L{}_H{}_P{}".format(*x.shape),
        "G{}_N{}".format(*B.shape[2:]),
        f"Q{kwargs['chunk_size']}",
        "D" + ("" if D is None else "h" if D.dim() == 1 else "hp"),
        "z" if kwargs.get("z") is not None else "",
        "bias" if kwargs.get("dt_bias") is not None else "",
        "softplus" if kwargs.get("dt_softplus") else "",
        "h0" if kwargs.get("initial_states") is not None else "",
        "hT" if kwargs.get("return_final_states") else "",
    ]
    return "|".join(parts)


class TuningCache:
    """{key: config} in one JSON file; loaded once, rewritten atomically on every put.

    A file that is not this format's JSON is reported and rebuilt. An entry that does not read
    as a valid SSDConfig (written by another version of this code, or damaged) is reported and
    never used, but kept on rewrite: its key names the kernels it was tuned for, so it cannot
    mislead this code, and another checkout sharing the file may still read it."""

    def __init__(self, path: Path) -> None:
        if path.exists() and not path.is_file():
            raise ValueError(
                f"cuTile tuning cache {path} is not a file; point SSDBENCH_TUNING_CACHE at a "
                "JSON file path"
            )
        self.path = path
        self.entries = self._load()

    def _load(self) -> dict:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text())
            if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
                found = data.get("format") if isinstance(data, dict) else type(data).__name__
                raise ValueError(f"format {found!r}, expected {CACHE_FORMAT!r}")
            entries = data["entries"]
            if not isinstance(entries, dict):
                raise TypeError(f"entries is a {type(entries).__name__}, not an object")
            return entries
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            warnings.warn(
                f"ignoring cuTile tuning cache {self.path} ({exc}); it will be rebuilt",
                stacklevel=2,
            )
            return {}

    def get(self, key: str) -> SSDConfig | None:
        """The cached pick for `key`; None when there is none or it does not read as a config."""
        if key not in self.entries:
            return None
        try:
            return SSDConfig.from_dict(self.entries[key]["config"])
        except (ValueError, KeyError, TypeError) as exc:
            warnings.warn(
                f"ignoring entry {key!r} of cuTile tuning cache {self.path} ({exc}); the shape "
                "will be tuned again",
                stacklevel=2,
            )
            return None

    def put(self, key: str, config: SSDConfig, details: dict) -> None:
        """Add one entry. Under an exclusive lock the file is re-read first, so processes tuning
        at the same time (one per GPU) keep each other's entries."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.entries = {**self._load(), key: {"config": config.to_dict(), **details}}
            text = json.dumps({"format": CACHE_FORMAT, "entries": self.entries}, indent=1)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(text)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise


def stages(dstate: int, chunk_size: int) -> list[tuple[str, list[dict[str, int]]]]:
    """The tuner's stages in order, each with its candidates: the walk's shape knobs, its hints,
    compute_out's knobs and its hint, then chunk_cumsum's heads per CTA. `state_carry` is not a
    candidate: it changes what both kernels do, so it stays as default_config set it (a walk
    candidate of part of the state, or in segments, stores states whatever it says)."""
    return [
        ("fwd_pass_state", state_candidates(dstate, chunk_size)),
        ("fwd_pass_state_hints", state_hint_candidates()),
        ("compute_out", out_candidates(dstate, chunk_size)),
        ("compute_out_hints", out_hint_candidates()),
        ("chunk_cumsum", cumsum_candidates()),
    ]


def tune(kwargs: dict) -> tuple[SSDConfig, dict]:
    """Search the state walk's knobs, then its latency hints, then compute_out's knobs and its
    hint, then chunk_cumsum's heads per CTA, each stage on the pick before, on these inputs,
    starting from the untuned defaults; returns the best config and what each stage did. Every
    candidate is timed as the whole forward: a kernel timed alone, L2 flushed before it,
    misjudges its place in the forward (compute_out reads the states the walk just left in L2;
    the walk's knobs change segment_scan's work). 16K/64/128 tuned on compute_out alone picked a
    config 3.9 % slower in the forward."""
    from kernels.cutile.launch import sm_count
    from kernels.cutile.ssd import launch_forward_of

    x, B = kwargs["x"], kwargs["B"]
    chunk_size, dstate = kwargs["chunk_size"], B.shape[3]
    base = inputs_default_config(kwargs)
    arch = "sm_{}{}".format(*torch.cuda.get_device_capability(x.device))
    sms = sm_count(x.device)
    began = time.perf_counter()

    def search(start: SSDConfig, candidates: list[dict]) -> tuple[SSDConfig, dict]:
        """Compile `start` and its variants in parallel, then time the forwards of `start` and
        of the variants whose launches spill no more than its own."""
        configs = list(dict.fromkeys([start, *(replace(start, **c) for c in candidates)]))
        compiled = precompile(kwargs, configs, arch, sms)
        kept = [c for c in configs if c == start or not compiled.spills_more(c, start)]
        best, info = search_timed(kept, lambda c: launch_forward_of(kwargs, c))
        start_us = info.pop("times_us").get(start, math.nan)
        return best, {
            **info,
            "spilling_skipped": len(configs) - len(kept),
            "start_us": round(start_us, 2),
            "precompile": compiled.to_dict(),
        }

    details = {}
    best = base
    for stage, candidates in stages(dstate, chunk_size):
        best, details[stage] = search(best, candidates)
    details["tune_s"] = round(time.perf_counter() - began, 1)
    return best, details


# The search's two rounds: every candidate timed FIRST_REPS times, then those within FINALIST_GAP
# of the best, and the stage's start, FINAL_REPS times more, interleaved; each time is a median of
# CUDA-graph replays after an L2 flush. A finalist replaces the start only if it is faster by
# MIN_GAIN: the GPU's speed drifts during a search (the same config 3-6 % apart between stages
# at 32K/32/256 and 32K/64/256, runs 210-211), and candidates timed one after another picked
# configs 0.2-1.5 % slower than the defaults there.
FIRST_REPS = 3
FINAL_REPS = 10
FINALIST_GAP = 0.10
MIN_GAIN = 0.01


def search_timed(configs: list[SSDConfig], forward) -> tuple[SSDConfig, dict]:
    """The config whose `forward(config)` takes the least device time, `configs[0]` (the start)
    unless another beats it by MIN_GAIN; each captured into a CUDA graph and replayed from a cold
    L2, as the harness times it. The kernels are launched through their own objects, so a
    specialisation compiled once (here or for an earlier shape of the same process) is not
    rebuilt. A config that fails to compile or launch is counted and skipped."""
    pool = torch.cuda.graph_pool_handle()  # graphs replayed one at a time share their memory
    cold_us = _cold_timer()

    def captured(config: SSDConfig) -> torch.cuda.CUDAGraph:
        forward(config)  # compiles on first use, outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            forward(config)
        return graph

    times: dict[SSDConfig, float] = {}
    failed = 0
    for config in configs:
        try:
            graph = captured(config)
            times[config] = interleaved_us({config: graph.replay}, FIRST_REPS, cold_us)[config]
            graph.reset()
        except Exception:  # noqa: BLE001 - a knob combination that cannot build or launch
            failed += 1
    if not times:
        raise RuntimeError(f"no cuTile configuration of {len(configs)} compiled and launched")
    fastest = min(times.values())
    finalists = [c for c, t in times.items() if t <= fastest * (1 + FINALIST_GAP)]
    start = configs[0] if configs[0] in times else None
    if start is not None and start not in finalists:
        finalists.insert(0, start)
    graphs = {c: captured(c) for c in finalists}
    times.update(interleaved_us({c: g.replay for c, g in graphs.items()}, FINAL_REPS, cold_us))
    for graph in graphs.values():
        graph.reset()
    best = pick(start, {c: times[c] for c in finalists})
    return best, {
        "best_us": round(times[best], 2),
        "candidates": len(configs),
        "failed": failed,
        "finalists": len(finalists),
        "times_us": times,
    }


def pick(start: SSDConfig | None, times: dict[SSDConfig, float]) -> SSDConfig:
    """The fastest of `times`, unless it beats `start` (when timed) by less than MIN_GAIN."""
    best = min(times, key=times.get)
    if start in times and times[best] > times[start] * (1 - MIN_GAIN):
        return start
    return best


def interleaved_us(runs: dict, reps: int, time_us) -> dict:
    """{key: median of `reps` timings} of each run in `runs`, after one warm-up each, taken in
    turns (every run once, then again), so that a drift of the GPU's speed during the search
    falls on all of them alike. `time_us(fn)` times one call."""
    for fn in runs.values():
        time_us(fn)
    samples: dict = {key: [] for key in runs}
    for _ in range(reps):
        for key, fn in runs.items():
            samples[key].append(time_us(fn))
    return {key: statistics.median(values) for key, values in samples.items()}


def _cold_timer():
    """A `time_us` for interleaved_us: the device time of one fn() in µs, L2 flushed before it so
    it starts cold, as the harness times. Its flush buffer (twice the L2) and events are made once
    per search, not per timing."""
    l2_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    flush = torch.empty(2 * l2_bytes, dtype=torch.uint8, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def cold_us(fn) -> float:
        flush.zero_()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000

    return cold_us


def configure(kwargs: dict, policy: str, path: Path | None = None) -> tuple[SSDConfig, dict]:
    """The config to launch these inputs with under a tuning policy, and what to record of it.

    off: the defaults; cached: the cached pick, tuning (and caching) on a miss; force: retune.
    """
    if policy not in POLICIES:
        raise ValueError(f"tune policy must be one of {POLICIES}, got {policy!r}")
    if policy == "off":
        config = inputs_default_config(kwargs)
        return config, {"tune": policy, "source": "default", "config": config.to_dict()}
    cache = TuningCache(path or cache_path())
    key = tuning_key(kwargs)
    config = cache.get(key) if policy == "cached" else None
    if config is not None:
        return config, {"tune": policy, "source": "cache", "config": config.to_dict()}
    most = sum(len(c) for _, c in stages(kwargs["B"].shape[3], kwargs["chunk_size"]))
    print(
        f"cuTile tuning: searching up to {most} configurations for this shape (a minute or two "
        f"on an H200, most of it compiling); the pick is then cached in {cache.path}",
        file=sys.stderr,
    )
    config, details = tune(kwargs)
    cache.put(key, config, details)
    return config, {"tune": policy, "source": "tuned", "config": config.to_dict(), **details}
