"""Which tileiras cuTile compiles with, and its version (for tuning-cache keys and run metadata)."""

from __future__ import annotations

import functools
import subprocess


def tileiras_path() -> str | None:
    """The tileiras cuTile compiles with, found by cuTile's own search (the pip package, PATH,
    CUDA_HOME, the toolkit's default folders), so that a version recorded or keyed is the one
    that built the kernels; None where cuTile finds none. The search is private to cuTile
    (tests/kernels/test_toolchain.py checks that it is still there)."""
    try:
        from cuda.tile._compile import _find_compiler_bin
    except ImportError:
        return None
    try:
        return _find_compiler_bin().path
    except FileNotFoundError:
        return None


@functools.cache
def tileiras_version() -> str | None:
    """The release line of `tileiras --version` (e.g. 'Cuda compilation tools, release 13.4')."""
    path = tileiras_path()
    if path is None:
        return None
    try:
        done = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=20, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.strip().splitlines()
    if not lines:
        return None
    return next((line for line in lines if "release" in line), lines[-1]).strip()
