"""kernels.cutile.toolchain: finding tileiras and reading its version, tolerating absence."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest

from kernels.cutile import toolchain


@pytest.fixture(autouse=True)
def _fresh_cache():
    toolchain.tileiras_version.cache_clear()
    yield
    toolchain.tileiras_version.cache_clear()


def test_version_is_the_release_line(monkeypatch: pytest.MonkeyPatch) -> None:
    out = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.4, V13.4.92\n"
    monkeypatch.setattr(toolchain, "tileiras_path", lambda: "/x/tileiras")
    monkeypatch.setattr(
        subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=out)
    )
    assert toolchain.tileiras_version() == "Cuda compilation tools, release 13.4, V13.4.92"


def test_missing_tileiras_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(toolchain, "tileiras_path", lambda: None)
    assert toolchain.tileiras_version() is None


def test_pip_tileiras_is_found_here() -> None:
    """This venv installs nvidia-cuda-tileiras 13.5 (pyproject), so CI compiles with it."""
    assert "release 13.5" in (toolchain.tileiras_version() or "")


def test_the_path_is_cutiles_own_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """cuTile also looks under CUDA_HOME and the toolkit's default folders; the version keyed and
    recorded must be that of the binary it compiles with, wherever it found it."""
    from cuda.tile import _compile

    assert toolchain.tileiras_path() == _compile._find_compiler_bin().path
    found = SimpleNamespace(path="/usr/local/cuda/bin/tileiras")
    monkeypatch.setattr(_compile, "_find_compiler_bin", lambda: found)
    assert toolchain.tileiras_path() == "/usr/local/cuda/bin/tileiras"


def test_no_tileiras_found_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    from cuda.tile import _compile

    def missing():
        raise FileNotFoundError("'tileiras' compiler not found")

    monkeypatch.setattr(_compile, "_find_compiler_bin", missing)
    assert toolchain.tileiras_path() is None
