"""The provider registry: names, errors, device/problem support, and lazy loading."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
import weakref
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness import providers
from harness.inputs import make_inputs
from harness.problem import Problem, working_set_bytes
from harness.providers import Provider, ProviderError
from kernels import triton_ssd

REPO = Path(__file__).parents[2]


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A private copy of the registry, so registering in a test leaves the real one alone."""
    monkeypatch.setattr(providers, "_PROVIDERS", dict(providers._PROVIDERS))


def _dummy(name: str) -> Provider:
    return Provider(name=name, load=lambda: None, description="test", devices=("cpu",))


def test_builtin_providers_are_registered() -> None:
    assert providers.names()[:3] == ("reference", "triton", "cutile")
    assert providers.get("triton").kernel_prefixes == triton_ssd.KERNEL_NAMES


def test_register_adds_in_order_and_refuses_duplicates(registry: None) -> None:
    providers.register(_dummy("extra"))
    assert providers.names()[-1] == "extra"
    with pytest.raises(ProviderError, match="'extra' is already registered"):
        providers.register(_dummy("extra"))


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(ProviderError, match="unknown provider 'trition'") as err:
        providers.get("trition")
    assert "reference, triton, cutile" in str(err.value)


def test_unsupported_checks_device_then_problem() -> None:
    problem = Problem()
    assert providers.get("reference").unsupported(problem, "cpu") is None
    assert providers.get("reference").unsupported(problem, "cuda:1") is None
    assert providers.get("cutile").unsupported(problem, "cpu") == "cutile runs on cuda, not cpu"
    picky = Provider(
        name="picky",
        load=lambda: None,
        description="test",
        devices=("cpu",),
        supports=lambda p: "dstate > 64" if p.dstate > 64 else None,
    )
    assert picky.unsupported(Problem(dstate=128), "cpu") == "dstate > 64"
    assert picky.unsupported(Problem(dstate=64), "cpu") is None


def test_cutile_supports_asks_its_module(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def unsupported_reason(headdim: int, dstate: int, chunk_size: int, dtype: str) -> str:
        calls.append((headdim, dstate, chunk_size, dtype))
        return "no"

    fake = types.ModuleType("kernels.cutile.ssd")
    fake.unsupported_reason = unsupported_reason
    monkeypatch.setitem(sys.modules, "kernels.cutile.ssd", fake)
    problem = Problem(headdim=32, dstate=64, chunk_size=128, dtype="float16")
    assert providers.get("cutile").unsupported(problem, "cuda") == "no"
    assert calls == [(32, 64, 128, "float16")]


def test_cutile_prepare_compiles_the_untuned_sweeps_launches(monkeypatch: pytest.MonkeyPatch):
    """Untuned: the kernels' precompile gets each problem's inputs (meta tensors, its chunk
    length) and the current GPU; tuned, the tuner compiles its candidates and nothing is asked."""
    import torch

    from kernels.cutile import precompile

    asked = []

    class Done:
        def to_dict(self) -> dict:
            return {"compiled": 3}

    def precompile_defaults(inputs, device):
        asked.append(
            ([(kw["x"].shape[1], kw["chunk_size"], kw["x"].device.type) for kw in inputs], device)
        )
        return Done()

    monkeypatch.setattr(precompile, "precompile_defaults", precompile_defaults)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    problems = [Problem(seqlen=1024, chunk_size=128), Problem(seqlen=2048, chunk_size=256)]
    prepare = providers.get("cutile").prepare
    assert prepare(problems, "off") == {"compiled": 3}
    assert asked == [([(1024, 128, "meta"), (2048, 256, "meta")], torch.device("cuda", 1))]
    assert "skipped" in prepare(problems, "cached") and len(asked) == 1


def test_load_returns_the_ssd_forward_of_each_module() -> None:
    from kernels import reference

    assert providers.get("reference").load() is reference.ssd_forward
    assert providers.get("triton").load() is triton_ssd.ssd_forward


def test_launch_defaults_are_the_cutile_configs_and_import_no_kernel_library() -> None:
    """Run comparisons read a knob an older run lacks at these values (harness/history.py)."""
    from kernels.cutile.config import SSDConfig

    defaults = providers.get("cutile").launch_defaults()
    assert defaults["state_cb"] == SSDConfig().state_cb == 0
    assert set(defaults) == set(SSDConfig.__dataclass_fields__)
    assert providers.get("triton").launch_defaults is None
    code = (
        "import sys; from harness import providers; providers.get('cutile').launch_defaults(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'cuda')))"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert found.stdout.strip() == "[]", found.stderr


@pytest.mark.parametrize(
    ("value", "devices"),
    [(None, ["cuda"]), ("0", ["cuda"]), ("1", ["cpu", "cuda"]), ("True", ["cpu", "cuda"])],
)
def test_registry_import_is_light_and_triton_cpu_needs_the_interpreter(
    value: str | None, devices: list[str]
) -> None:
    """In a fresh interpreter: importing the registry loads no kernel library, and the triton
    provider offers the CPU only when TRITON_INTERPRET is set."""
    code = (
        "import json, sys; from harness import providers; "
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('triton', 'cuda', 'mamba_ssm') or m == 'kernels.cutile.ssd'); "
        "print(json.dumps([heavy, providers.get('triton').devices]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if value is not None:
        env["TRITON_INTERPRET"] = value
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(result.stdout) == [[], devices]


def test_triton_refuses_tensors_its_int32_offsets_cannot_reach() -> None:
    """mamba_ssm's kernels wrap their offsets past 2³¹ elements (state-spaces/mamba#1015)."""
    triton = providers.get("triton")
    assert triton.supports(Problem(batch=1, seqlen=65536, nheads=128, dstate=256)) is None
    reason = triton.supports(Problem(batch=8, seqlen=65536, nheads=128, dstate=64))
    assert reason is not None and "x (batch·seqlen·nheads·headdim) has 4,294,967,296" in reason
    states = triton.supports(Problem(batch=2, seqlen=65536, nheads=128, dstate=256, chunk_size=64))
    assert states is not None and "chunk states" in states


class _PeakMemory(TorchDispatchMode):
    """The most tensor storage alive at once while it is on (each storage counted from the op
    that made it until its last tensor is freed)."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self.storages: set[int] = set()

    def _freed(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        self.storages.discard(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else (out,):
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
            if key and key not in self.storages:
                self.storages.add(key)
                self.live += nbytes
                self.peak = max(self.peak, self.live)
                weakref.finalize(tensor, self._freed, key, nbytes)
        return out


@pytest.mark.parametrize("seqlen", [1024, 4096])
def test_the_references_working_set_holds_its_peak_memory(seqlen: int) -> None:
    """Its checked call runs inside that much NaN-filled memory on a GPU, and a call needing more
    is an error: the float64 reference needs 3x the bf16 kernels' bound (85 MiB at 1K/32/128)."""
    problem = Problem(seqlen=seqlen, nheads=32, dstate=128)
    kwargs = make_inputs(problem, seed=0, device="cpu").kwargs()
    peak = _PeakMemory()
    with peak:
        providers.get("reference").load()(**kwargs)
    assert working_set_bytes(problem) < peak.peak <= providers.get("reference").working_set(problem)
