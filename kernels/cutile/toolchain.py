"""Which tileiras cuTile compiles with, and its version (for tuning-cache keys and run metadata)."""

from __future__ import annotations

import functools
import importlib.util
import shutil
import subprocess
from pathlib import Path


def tileiras_path() -> str | None:
    """The tileiras cuTile would pick: the pip package's nvidia/cu13/bin first, then PATH."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(root) / "cu13" / "bin" / "tileiras"
        if candidate.is_file():
            return str(candidate)
    return shutil.which("tileiras")


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
