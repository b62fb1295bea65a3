"""Where and with what a run was measured: the one place that captures the environment.

Every probe tolerates absence (no nvidia-smi, no git, a package not installed) by recording None,
because a missing fact must never stop a measurement. The dict goes into meta.json under "env".
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
import os
import platform
import re
import socket
import subprocess
import warnings
from datetime import datetime, timezone
from pathlib import Path

from kernels.cutile.toolchain import tileiras_version

REPO = Path(__file__).resolve().parents[1]
PACKAGES = (
    "torch",
    "triton",
    "cuda-tile",
    "mamba-ssm",
    "nvidia-cuda-tileiras",
    "numpy",
    "pandas",
    "hydra-core",
)
_SMI_CLOCKS = (
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "clocks.max.mem",
    "temperature.gpu",
    "power.draw",
    # Why the clocks are held down, a bit mask (0: not held; nvidia-smi -q explains the bits).
    # The older name, which drivers still accept, so that older drivers read it too.
    "clocks_throttle_reasons.active",
)


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _run(cmd: list[str], timeout: float = 20.0) -> str | None:
    """stdout of a command, or None when it is missing, fails or hangs."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def package_versions() -> dict[str, str | None]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


# git on this checkout whoever owns it (a tree copied or staged by another user is "dubious" to
# git, which then answers nothing), blind to file modes (a copy that lost its exec bits has the
# commit's code all the same).
_GIT = ("git", "-c", "safe.directory=*", "-c", "core.fileMode=false", "-C", str(REPO))
# What counts as the run's code: every tracked file but the results the runs write (a tree whose
# results were moved aside, to travel light, is no less the commit's code).
_CODE = (".", ":(exclude)results")
_COMMIT = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")  # SHA-1 or SHA-256 repositories


def git_state() -> dict[str, object]:
    """Commit of the working tree and whether its tracked code differs from it (with the first
    paths that do, under "changed").

    Whoever copies a tree to a GPU node (rsync of a checkout, a batch system's staging) may set
    SSDBENCH_GIT_COMMIT (the full commit) / SSDBENCH_GIT_DIRTY (0 or 1); the copy's own .git may
    be missing or, worse, stale (a snapshot of an older checkout), so when they are set they win,
    with "source" saying so and what the local git answered kept beside them; where the local git
    is at that same commit, its own answer on the code is the dirty flag.
    """
    commit = _run([*_GIT, "rev-parse", "HEAD"])
    status = _run([*_GIT, "status", "--porcelain", "--untracked-files=no", "--", *_CODE])
    local: dict[str, object] = {"commit": commit, "dirty": None if status is None else bool(status)}
    if status:
        local["changed"] = [line[2:].strip() for line in status.splitlines()[:20]]
    override = git_override()
    if override is None:
        if commit is None:
            warnings.warn(
                "no git commit found for this run (no git, or not a checkout): where the tree is a "
                "copy, set SSDBENCH_GIT_COMMIT and SSDBENCH_GIT_DIRTY",
                stacklevel=2,
            )
        return local
    state = {**override, "source": "SSDBENCH_GIT_COMMIT"}
    if commit is not None:
        state["local_git"] = local
        if commit == override["commit"] and local["dirty"] is not None:
            state["dirty"] = local["dirty"]
    return state


def git_override() -> dict[str, object] | None:
    """SSDBENCH_GIT_COMMIT / SSDBENCH_GIT_DIRTY, checked (ValueError naming the variable; config
    validation turns it into a config error before any GPU work); None when the commit is not
    set."""
    commit = os.environ.get("SSDBENCH_GIT_COMMIT")
    if not commit:
        return None
    if not _COMMIT.fullmatch(commit):
        raise ValueError(
            "SSDBENCH_GIT_COMMIT must be a full commit (git rev-parse HEAD: 40 hex digits), "
            f"got {commit!r}"
        )
    dirty = os.environ.get("SSDBENCH_GIT_DIRTY") or None
    if dirty not in (None, "0", "1"):
        raise ValueError(f"SSDBENCH_GIT_DIRTY must be 0 or 1, got {dirty!r}")
    return {"commit": commit, "dirty": None if dirty is None else dirty == "1"}


def _smi_selector(index: int) -> str:
    """nvidia-smi's id of CUDA device `index`: its PCI bus id (CUDA_VISIBLE_DEVICES renumbers)."""
    import torch

    props = torch.cuda.get_device_properties(index)
    try:
        return f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
    except AttributeError:
        return str(index)


# A sweep reads the clocks after every mode of every point: a hung nvidia-smi costs this long.
CLOCKS_TIMEOUT_S = 5.0


def clocks(index: int | None) -> dict[str, str] | None:
    """Current and max SM/memory clocks (MHz), temperature, power and the active clock-limiting
    reasons of the GPU (nvidia-smi)."""
    if index is None:
        return None
    query = ",".join(_SMI_CLOCKS)
    out = _run(
        [
            "nvidia-smi",
            "-i",
            _smi_selector(index),
            f"--query-gpu={query}",
            "--format=csv,noheader,nounits",
        ],
        timeout=CLOCKS_TIMEOUT_S,
    )
    if not out:
        return None
    values = [v.strip() for v in out.splitlines()[0].split(",")]
    return dict(zip(_SMI_CLOCKS, values, strict=True)) if len(values) == len(_SMI_CLOCKS) else None


#: nvidia-smi's clock-limiting reasons that the GPU imposes under load: the software power cap
#: (0x4), hardware slowdown (0x8), software and hardware thermal slowdown (0x20, 0x40) and the
#: power brake (0x80). The others say the GPU is idle (0x1, as it may be the moment timing ends)
#: or name a setting someone chose (application clocks 0x2, sync boost 0x10, display 0x100).
HELD_REASONS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def reading(text: object) -> float:
    """One nvidia-smi field as a number (hex masks included); NaN for "[N/A]" and the like."""
    try:
        return float(int(text, 16)) if str(text).startswith("0x") else float(text)
    except (TypeError, ValueError):
        return math.nan


def held_clock(state: dict | None, floor: float) -> str | None:
    """Why a `clocks()` reading shows the SM clock held down ("1785 of 1980 MHz, reasons 0x4"):
    one of HELD_REASONS active and the SM clock below `floor` of its max. None when it does not,
    or when the reading lacks a field."""
    if not state:
        return None
    fields = ("clocks.sm", "clocks.max.sm", "clocks_throttle_reasons.active")
    sm, top, reasons = (reading(state.get(k)) for k in fields)
    if math.isnan(sm) or math.isnan(top) or math.isnan(reasons):
        return None
    if int(reasons) & HELD_REASONS == 0 or sm >= floor * top:
        return None
    return f"{sm:.0f} of {top:.0f} MHz, reasons {int(reasons):#x}"


def driver_version() -> str | None:
    out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    if out:
        return out.splitlines()[0].strip()
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    found = re.search(r"Kernel Module\s+(\S+)", text)
    return found.group(1) if found else None


def gpu_info(index: int | None) -> dict[str, object]:
    """Name, SM count, L2 and memory size of CUDA device `index` (name "cpu" without one)."""
    if index is None:
        return {"name": "cpu", "index": None}
    import torch

    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)  # tells GPUs of one model apart (shards on one node)
    return {
        "name": props.name,
        "index": index,
        "uuid": str(uuid) if uuid is not None else None,
        "count": torch.cuda.device_count(),
        "sm_count": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "memory_gib": round(props.total_memory / 2**30, 1),
        "compute_capability": f"{props.major}.{props.minor}",
    }


def capture(index: int | None) -> dict[str, object]:
    """The environment of a run on CUDA device `index` (None: a CPU-only run, e.g. in tests)."""
    import torch

    return {
        "timestamp": now_utc(),
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "gpu": gpu_info(index),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "driver": driver_version() if index is not None else None,
        "cuda": torch.version.cuda,
        "clocks_start": clocks(index),
        "clocks_end": None,
        "versions": {**package_versions(), "tileiras": tileiras_version()},
        "git": git_state(),
    }


def gpu_slug(name: str) -> str:
    """Directory name of a GPU: 'NVIDIA H200' -> 'nvidia-h200'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def allocator_conflict() -> str | None:
    """Why PyTorch's caching allocator settings would defeat correctness.poisoned_allocations
    (checked with the config, before any GPU work), or None."""
    names = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
    conf = ",".join(os.environ.get(name, "") for name in names).replace(" ", "").lower()
    reasons = {
        "expandable_segments:true": "grows a segment in place, so a request can get pages "
        "never filled with NaN",
        "max_split_size_mb": "keeps the large poisoned block from serving smaller requests",
        "backend:cudamallocasync": "has no memory pools",
    }
    for setting, why in reasons.items():
        if setting in conf:
            return (
                f"the allocator setting {setting.split(':')[0]} in PYTORCH_CUDA_ALLOC_CONF / "
                f"PYTORCH_ALLOC_CONF {why}, so answers could not be checked on NaN-filled "
                "memory (docs/correctness.md): unset it"
            )
    return None
