"""The provider registry: every SSD forward implementation the harness can run, by name.

Adding a provider is one `register(Provider(...))` call at the bottom of this module; the runner,
reports and gate only ever look providers up by name. Importing the registry imports no kernel
library: `load` and `supports` import triton / cuda-tile when called, so the registry (and every
config that names providers) loads on machines that lack them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from harness.problem import Problem, reference_gib, working_set_bytes
from kernels import (
    cutile,  # constants only: imports neither torch nor cuda-tile
    triton_ssd,  # imports neither triton nor mamba_ssm (see its docstring)
)

SSDForward = Callable[..., object]  # the provider contract of docs/architecture.md


class ProviderError(ValueError):
    """A provider name that is unknown or registered twice; the message lists the known names."""


def _supports_everything(problem: Problem) -> str | None:
    return None


# A provider's tuner takes the call's keyword arguments and the run's tuning policy (off / cached /
# force) and returns extra keyword arguments for the call plus a JSON-able record of the choice.
Tuner = Callable[[dict, str], tuple[dict, dict]]
# A provider's preparation takes every problem a sweep will run on it (at each chunk length tried)
# and the tuning policy, and returns a JSON-able record of what it did.
Prepare = Callable[[list[Problem], str], dict]


@dataclass(frozen=True)
class SelfTuning:
    """A provider that tunes itself at its first call of each shape (Triton's autotuner), as the
    runner drives it under triton_autotune: forget every pick (the next call tunes again), take a
    snapshot of the picks made so far, and put a snapshot back (calls then run with its picks)."""

    forget: Callable[[], None]
    snapshot: Callable[[], object]
    restore: Callable[[object], None]


@dataclass(frozen=True)
class Provider:
    """One implementation of `ssd_forward`.

    load: imports the implementation and returns its `ssd_forward` (called only when needed).
    devices: torch device types it runs on, e.g. ("cuda",) or ("cpu", "cuda").
    kernel_prefixes: profiler kernel-name prefixes of its launches, for the per-kernel breakdown;
        empty when the breakdown means nothing (the PyTorch reference launches generic kernels).
    supports: the reason a problem is out of its range, or None when it can run it.
    tuner: picks launch parameters for a point before it is checked and timed (None: nothing to
        tune); what it returns is recorded in the rows' tuning column.
    tuning_report: what the implementation chose by itself in the call just made (e.g. Triton's
        autotuner picks), merged into the tuning column under "picks".
    self_tuning: how to make it tune again and keep one set of its picks (None: it does not tune
        itself); the run's triton_autotune policy applies to it.
    prepare: does once, before a sweep times any point, what each point's first call would do
        one at a time (cuTile: compile the kernels it will launch, in parallel processes); None:
        nothing to prepare. It changes no result, only how long the sweep takes.
    matmul_policy: the precision its matrix products run at, recorded in the tuning column.
    launch_defaults: the default of every field of the launch config its tuner records, so that
        comparing runs can read a field added after an older run as what that run launched
        (None: it records no config).
    working_set: a bound on the device memory one call allocates; its checked call runs inside
        that much NaN-filled memory (correctness.poisoned_allocations), and needing more is an
        error (the float64 reference's is 3x the kernels').
    """

    name: str
    load: Callable[[], SSDForward]
    description: str
    devices: tuple[str, ...]
    kernel_prefixes: tuple[str, ...] = ()
    supports: Callable[[Problem], str | None] = _supports_everything
    tuner: Tuner | None = None
    tuning_report: Callable[[], dict] | None = None
    self_tuning: SelfTuning | None = None
    prepare: Prepare | None = None
    matmul_policy: str = ""
    launch_defaults: Callable[[], dict] | None = None
    working_set: Callable[[Problem], int] = working_set_bytes

    def unsupported(self, problem: Problem, device: str) -> str | None:
        """Why this provider cannot run `problem` on `device` ("cpu", "cuda", "cuda:1"), or None."""
        device_type = device.split(":")[0]
        if device_type not in self.devices:
            return f"{self.name} runs on {'/'.join(self.devices)}, not {device_type}"
        return self.supports(problem)


_PROVIDERS: dict[str, Provider] = {}


def register(provider: Provider) -> Provider:
    """Add `provider`; a name may be registered once."""
    if provider.name in _PROVIDERS:
        raise ProviderError(f"provider {provider.name!r} is already registered")
    _PROVIDERS[provider.name] = provider
    return provider


def get(name: str) -> Provider:
    try:
        return _PROVIDERS[name]
    except KeyError:
        raise ProviderError(
            f"unknown provider {name!r}; known providers: {', '.join(names())}"
        ) from None


def names() -> tuple[str, ...]:
    """Registered provider names, in registration order."""
    return tuple(_PROVIDERS)


def _ssd_forward_of(module: str) -> Callable[[], SSDForward]:
    return lambda: importlib.import_module(module).ssd_forward


def _cutile_supports(problem: Problem) -> str | None:
    """The kernels' own limits on the sizes, then the launches' (grids, int32 indexing) with the
    point's default config on this process's GPU (the SM count sets the walk's segments; an
    H200's 132 without one)."""
    import torch

    from harness.inputs import meta_inputs  # these import torch, so only when asked
    from kernels.cutile.config import inputs_default_config
    from kernels.cutile.ssd import unsupported_reason

    reason = unsupported_reason(problem.headdim, problem.dstate, problem.chunk_size, problem.dtype)
    if reason:
        return reason
    try:
        from kernels.cutile.limits import launch_limit_reason  # records launches: cuda-tile
    except ImportError:  # no cuda-tile here: loading the provider fails, per point, and says so
        return None
    kwargs = meta_inputs(problem).kwargs()
    sms = 132
    if torch.cuda.is_available():
        sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return launch_limit_reason(kwargs, inputs_default_config(kwargs), sms)


def _cutile_tuner(kwargs: dict, policy: str) -> tuple[dict, dict]:
    from kernels.cutile.autotune import configure

    config, record = configure(kwargs, policy)
    return {"config": config}, record


def _cutile_launch_defaults() -> dict:
    from dataclasses import asdict

    from kernels.cutile.config import SSDConfig  # dataclasses only: no torch, no cuda-tile

    return asdict(SSDConfig())


def _cutile_prepare(problems: list[Problem], policy: str) -> dict:
    """Untuned, every launch of the problems' default configs compiled before any is timed (a
    tuned sweep's tuner compiles each point's candidates itself)."""
    if policy != "off":
        return {"skipped": f"tune={policy}: the tuner compiles its own candidates"}
    import torch

    from harness.inputs import meta_inputs
    from kernels.cutile.precompile import precompile_defaults

    inputs = [meta_inputs(problem).kwargs() for problem in problems]
    return precompile_defaults(inputs, torch.device("cuda", torch.cuda.current_device())).to_dict()


#: mamba_ssm's Triton kernels compute element offsets in int32 (state-spaces/mamba#1015).
TRITON_MAX_ELEMENTS = 2**31 - 1


def _triton_supports(problem: Problem) -> str | None:
    """Out of range where a tensor it indexes (x, z and out; its chunk states and C·Bᵀ chunks)
    has more elements than an int32 offset reaches: the offsets wrap, which crashes the worker's
    CUDA context or answers wrong, and Triton is the answer others are checked against where the
    float64 reference is too big."""
    p = problem
    chunks = -(-p.seqlen // p.chunk_size)
    tensors = {
        "x (batch·seqlen·nheads·headdim)": p.batch * p.seqlen * p.nheads * p.headdim,
        "the chunk states (batch·chunks·nheads·headdim·dstate)": (
            p.batch * chunks * p.nheads * p.headdim * p.dstate
        ),
        "C·Bᵀ (batch·chunks·ngroups·chunk_size²)": p.batch * chunks * p.ngroups * p.chunk_size**2,
    }
    name, largest = max(tensors.items(), key=lambda item: item[1])
    if largest <= TRITON_MAX_ELEMENTS:
        return None
    return (
        f"mamba_ssm's Triton kernels index with int32 offsets (state-spaces/mamba#1015) and "
        f"{name} has {largest:,} elements, above 2³¹−1: lower batch, seqlen or nheads"
    )


register(
    Provider(
        name="reference",
        load=_ssd_forward_of("kernels.reference"),
        description="float64 PyTorch chunked SSD (the gold reference)",
        devices=("cpu", "cuda"),
        matmul_policy="float64",
        working_set=lambda problem: int(reference_gib(problem) * 2**30),
    )
)
register(
    Provider(
        name="triton",
        load=triton_ssd.load,
        description="mamba_ssm 2.3.2.post1 Triton kernels (_mamba_chunk_scan_combined_fwd)",
        # On CPU only under Triton's interpreter, which TRITON_INTERPRET selects when triton is
        # imported; read here without importing triton.
        devices=("cpu", "cuda") if triton_ssd.interpreter_requested() else ("cuda",),
        kernel_prefixes=triton_ssd.KERNEL_NAMES,
        supports=_triton_supports,
        tuning_report=triton_ssd.autotune_picks,
        self_tuning=SelfTuning(
            forget=triton_ssd.reset_autotuning,
            snapshot=triton_ssd.autotune_state,
            restore=triton_ssd.restore_autotuning,
        ),
        matmul_policy=triton_ssd.MATMUL_POLICY,
    )
)
register(
    Provider(
        name="cutile",
        load=_ssd_forward_of("kernels.cutile.ssd"),
        description="our cuTile kernels (kernels/cutile)",
        devices=("cuda",),
        kernel_prefixes=cutile.KERNEL_PREFIXES,
        supports=_cutile_supports,
        tuner=_cutile_tuner,
        prepare=_cutile_prepare,
        matmul_policy=cutile.MATMUL_POLICY,
        launch_defaults=_cutile_launch_defaults,
    )
)
