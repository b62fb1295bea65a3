"""ssdbench's main job: sweep the configured points on this machine's CUDA GPU, cuTile and
mamba_ssm Triton side by side, into results/<gpu-slug>/<run-id>/ (see conf/config.yaml).

    python run_bench.py [sweep=default|paper|models|smoke] [timing=default|quick|thorough]
                        [providers=all|triton|cutile|with_reference] [key=value ...]
    python run_bench.py -m sweep.seqlen=1024,4096      # Hydra multirun: one run per job

Before any GPU work (and before importing torch) it checks that a CUDA GPU exists, then composes
and validates every job's config; both failures are one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from omegaconf import DictConfig

NO_GPU = (
    "ssdbench: no CUDA GPU found; run_bench.py measures on a GPU. "
    "On this machine run the tests: make test"
)
# Hydra flags that only print information: they need neither a GPU nor a valid sweep.
INFO_FLAGS = {"-h", "--help", "--hydra-help", "--version", "-c", "--cfg", "--info", "-i"}
MULTIRUN_FLAGS = {"-m", "--multirun"}
CONF_DIR = Path(__file__).resolve().parent / "conf"


def cuda_device_count() -> int:
    """CUDA devices the driver reports, asked through libcuda directly (no torch import)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def _fail(message: str, code: int) -> None:
    print(message, file=sys.stderr)
    sys.exit(code)


def _task(cfg: DictConfig) -> None:
    """One Hydra job: build the config object and run the sweep."""
    if cuda_device_count() == 0:  # jobs of a remote launcher land here without the early check
        _fail(NO_GPU, 1)
    from harness import config, runner

    try:
        run_dir = runner.run(config.to_bench(cfg))
    except config.ConfigError as exc:
        _fail(f"ssdbench: config error: {exc}", 2)
    except runner.SweepAborted as exc:
        _fail(f"ssdbench: stopped: {exc}", 3)
    except KeyboardInterrupt:
        _fail("ssdbench: interrupted", 130)
    print(f"ssdbench: results in {run_dir}", file=sys.stderr)


def main(args: list[str]) -> None:
    flags = {a.split("=")[0] for a in args if a.startswith("-")}
    if not flags & INFO_FLAGS:
        remote = any(a.startswith("hydra/launcher=") for a in args)
        if not remote and cuda_device_count() == 0:
            _fail(NO_GPU, 1)
    try:
        import hydra

        from harness import config  # registers bench_schema in Hydra's ConfigStore
    except ModuleNotFoundError as exc:
        _fail(f"ssdbench: {exc.name} is not installed; set up the environment with: make venv", 1)
    # Other flags (--config-name …) change what the jobs compose to; Hydra reports those itself.
    if not flags & INFO_FLAGS and flags <= MULTIRUN_FLAGS:
        try:
            config.preflight(args)
        except config.ConfigError as exc:
            _fail(f"ssdbench: config error: {exc}", 2)
    hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")(_task)()


if __name__ == "__main__":
    main(sys.argv[1:])
