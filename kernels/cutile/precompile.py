"""Compile a tuner's candidate launches, or a sweep's, in parallel processes, ahead of timing them.

cuTile compiles a kernel at its first launch, one specialisation at a time, and most of a tuning
search went on that: each of its candidates took a compile of about 1.3 s (compute_out at
16K/64/128 on this project's CPU), and one search ran past 330 s on the H200 (155 s with the
workers, half of it compiling). tileiras stores every cubin in cuTile's disk cache
(`CUDA_TILE_CACHE_DIR`), keyed by the kernel's bytecode. Here worker processes build each
candidate's exact launches on meta tensors (`signatures.forward_launches`, the names the GPU
compiles) and compile them for the GPU's architecture into that cache, so the search's own
launches find their cubins there. A specialisation that fails to compile is left to the search,
which reports it. The workers also read each cubin's resources, so that the search can skip the
configurations whose launches spill more than its starting point's (`Precompiled.spills_more`).
A sweep under tune=off compiles its points' default launches the same way, all at once before it
times any (`precompile_defaults`, called by the cuTile provider's `prepare` in
harness/providers.py).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import torch

from kernels.cutile.config import SSDConfig
from kernels.cutile.resources import Resources

# kwargs entries that are not tensors and that a forward's launches depend on.
OPTIONS = ("chunk_size", "dt_softplus", "dt_limit")


@dataclass(frozen=True)
class TensorLayout:
    """What a launch's specialisation reads of a tensor: dtype, shape, strides, offset."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int

    @classmethod
    def of(cls, tensor: torch.Tensor) -> TensorLayout:
        return cls(tensor.dtype, tuple(tensor.shape), tensor.stride(), tensor.storage_offset())

    def meta(self) -> torch.Tensor:
        """A meta tensor with this layout (no memory)."""
        last = sum((d - 1) * s for d, s in zip(self.shape, self.stride, strict=True))
        base = torch.empty(self.offset + last + 1, dtype=self.dtype, device="meta")
        return base.as_strided(self.shape, self.stride, self.offset)


def layouts(kwargs: dict) -> dict:
    """A forward's inputs with each tensor replaced by its layout: small, picklable, and enough
    to rebuild the launches on meta tensors in another process."""
    return {
        k: TensorLayout.of(v) if isinstance(v, torch.Tensor) else v
        for k, v in kwargs.items()
        if isinstance(v, torch.Tensor) or k in OPTIONS
    }


def meta_kwargs(described: dict) -> dict:
    """The inverse of `layouts`, on meta tensors."""
    return {k: v.meta() if isinstance(v, TensorLayout) else v for k, v in described.items()}


@dataclass(frozen=True)
class Precompiled:
    """What one `precompile` call did, recorded beside the search it served."""

    specialisations: int  # distinct launches among the candidates' forwards
    compiled: int  # of those, how many were new to this process and compiled by the workers
    failed: int  # of those, how many did not compile (the search reports them again)
    workers: int
    seconds: float
    # Configs with a launch that uses local memory: {config: {kernel name: most bytes spilled}}.
    spills: Mapping[SSDConfig, Mapping[str, int]] = field(default_factory=dict)

    def spills_more(self, config: SSDConfig, than: SSDConfig) -> bool:
        """Whether a launch of `config` spills more than `than`'s launches of the same kernel
        (none: 0 B): what a search skips, so that a start that spills does not skip every
        candidate that keeps its spilling launch (autotune.py)."""
        start = self.spills.get(than, {})
        return any(b > start.get(k, 0) for k, b in self.spills.get(config, {}).items())

    def to_dict(self) -> dict:
        return {
            "specialisations": self.specialisations,
            "compiled": self.compiled,
            "failed": self.failed,
            "workers": self.workers,
            "seconds": round(self.seconds, 1),
            "spilling": len(self.spills),
        }


Key = tuple[str, str, str]  # (kernel, mangled name, compiler hints): what decides a cubin


def _launches(kwargs: dict, config: SSDConfig, sms: int) -> list:
    """`signatures.forward_launches` of the forward captured into a CUDA graph, then of the eager
    one: they differ where a config launches otherwise under capture (state_cb)."""
    from kernels.cutile.signatures import forward_launches

    return [
        launch
        for captured in (True, False)
        for launch in forward_launches(kwargs, config, sms, captured)
    ]


def launch_keys(kwargs: dict, config: SSDConfig, sms: int) -> list[Key]:
    """The key of each launch of a config's forward of `kwargs` (meta tensors), in launch order,
    captured then eager (`_launches`; `distinct_launches` drops the repeats)."""
    return [
        (name, signature.with_mangled_symbol(name).symbol, repr(kernel._compiler_options))
        for name, kernel, signature in _launches(kwargs, config, sms)
    ]


def distinct_launches(keys: list[list[Key]]) -> dict[Key, tuple[int, int]]:
    """{key: (forward index, launch index)} of each distinct launch among forwards, given each
    forward's `launch_keys`: what decides a cubin, and where to rebuild it."""
    jobs: dict[Key, tuple[int, int]] = {}
    for forward, launches in enumerate(keys):
        for index, key in enumerate(launches):
            jobs.setdefault(key, (forward, index))
    return jobs


# Specialisations precompiled by this process, with their resources (None: did not compile): the
# search launched each of them after, so they are in cuTile's in-memory cache too, and a later
# shape needs neither workers nor a lookup.
_PRECOMPILED: dict[tuple[str, str, str, str], Resources | None] = {}  # (arch, *key)


def _compile(described: dict, config: dict, index: int, arch: str, sms: int) -> Resources | None:
    """In a worker: compile one launch into the disk cache; its resources, or None if it did not
    compile."""
    from kernels.cutile.resources import compile_cubin, read_cubin

    launches = _launches(meta_kwargs(described), SSDConfig.from_dict(config), sms)
    _, kernel, signature = launches[index]
    try:
        return read_cubin(compile_cubin(kernel, signature, arch))
    except Exception:  # noqa: BLE001 - any compile failure: the search times and reports it
        return None


def disk_cache_enabled() -> bool:
    """Whether cuTile keeps compiled cubins on disk (CUDA_TILE_CACHE_DIR not turned off)."""
    value = os.environ.get("CUDA_TILE_CACHE_DIR")
    return value is None or value.strip().lower() not in ("", "0", "off", "none")


def worker_count() -> int:
    """One worker per CPU this process may run on."""
    return len(os.sched_getaffinity(0))


def precompile(
    kwargs: dict, configs: list[SSDConfig], arch: str, sms: int, workers: int | None = None
) -> Precompiled:
    """precompile_forwards of the configs' forwards of one set of inputs (a tuner's candidates)."""
    return precompile_forwards([(kwargs, config) for config in configs], arch, sms, workers)


def precompile_defaults(inputs: list[dict], device: torch.device) -> Precompiled:
    """precompile_forwards of each input's default config (what `ssd_forward` launches untuned)
    for the GPU `device`: a sweep's points compiled at once, before any is timed."""
    from kernels.cutile.config import inputs_default_config
    from kernels.cutile.launch import sm_count

    arch = "sm_{}{}".format(*torch.cuda.get_device_capability(device))
    forwards = [(kw, inputs_default_config(kw)) for kw in inputs]
    return precompile_forwards(forwards, arch, sm_count(device))


def precompile_forwards(
    forwards: list[tuple[dict, SSDConfig]], arch: str, sms: int, workers: int | None = None
) -> Precompiled:
    """Compile, in parallel, every distinct launch that the forwards (inputs, config) make, for
    `arch` (e.g. "sm_90") on a GPU of `sms` SMs, into the disk cache, skipping those this
    process precompiled before, and name the configs with a launch that spills, by how much in
    each kernel. Nothing is compiled when the cache is off: the cubins would not outlive the
    workers, and then no config is named as spilling (a search times them all)."""
    began = time.perf_counter()
    described = [layouts(kwargs) for kwargs, _ in forwards]
    keys = (
        [
            launch_keys(meta_kwargs(inputs), config, sms)
            for inputs, (_, config) in zip(described, forwards, strict=True)
        ]
        if disk_cache_enabled()
        else []
    )
    jobs = distinct_launches(keys)
    new = {key: job for key, job in jobs.items() if (arch, *key) not in _PRECOMPILED}
    used = 0
    if new:
        used = max(1, min(workers or worker_count(), len(new)))
        # spawn: the workers must not inherit the parent's CUDA context; they never touch the GPU.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(used, mp_context=context) as pool:
            futures = {
                key: pool.submit(_compile, described[f], forwards[f][1].to_dict(), i, arch, sms)
                for key, (f, i) in new.items()
            }
            _PRECOMPILED.update({(arch, *key): f.result() for key, f in futures.items()})
    failed = sum(_PRECOMPILED[(arch, *key)] is None for key in new)
    spills = {
        config: spilled
        for (_, config), launches in zip(forwards, keys, strict=False)
        if (spilled := _spilled(arch, launches))
    }
    return Precompiled(len(jobs), len(new), failed, used, time.perf_counter() - began, spills)


def _spilled(arch: str, launches: list[Key]) -> dict[str, int]:
    """{kernel name: most local-memory bytes among its launches} of one forward's spilling
    launches (a launch that did not compile counts as none)."""
    spilled: dict[str, int] = {}
    for key in launches:
        resources = _PRECOMPILED.get((arch, *key))
        if resources is not None and resources.local_bytes > 0:
            spilled[key[0]] = max(spilled.get(key[0], 0), resources.local_bytes)
    return spilled
