#!/usr/bin/env bash
# Create .venv with everything ssdbench needs; idempotent (a stamp records the inputs it was made from).
# torch: the CUDA 13.0 build (2.11.0, the version our GPU results use) where nvidia-smi sees a GPU,
# else 2.13.0 (enough for the CPU test suite). mamba-ssm: --no-deps, no CUDA extension.
# 2.13.0 is the CPU build only where pip is pointed at one (this project's CI machines are): from
# PyPI it is the CUDA build with its CUDA wheels, several GB; elsewhere set
# SSDBENCH_TORCH='torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu' for the CPU one.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${SSDBENCH_VENV:-.venv}
stamp="$venv/.ssdbench-ready"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  torch_spec=${SSDBENCH_TORCH:-torch==2.11.0}
else
  torch_spec=${SSDBENCH_TORCH:-torch==2.13.0}
fi
# The venv is reused only if made from the same inputs: these files and the torch wanted here (a
# GPU node wants another build than a CPU one), by the python3 here, whose venv must still run.
python=$(python3 -V 2>&1)
want=$( (cat pyproject.toml scripts/setup_venv.sh; echo "$torch_spec $python") | sha256sum | cut -c1-16)
if [ "$("$venv/bin/python" -V 2>&1 || true)" != "$python" ]; then
  if [ -e "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ]; then
    echo "setup_venv.sh: $venv exists and is not a venv; point SSDBENCH_VENV elsewhere" >&2
    exit 1
  fi
  rm -rf "$venv"
  python3 -m venv "$venv"
elif [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
pip=("$venv/bin/python" -m pip)
"${pip[@]}" install -q --upgrade pip
# shellcheck disable=SC2086  # a spec may carry pip options (--index-url ...)
"${pip[@]}" install -q $torch_spec
"${pip[@]}" install -q -e ".[dev]"
MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE "${pip[@]}" install -q --no-cache-dir \
  --no-build-isolation --no-deps mamba-ssm==2.3.2.post1
echo "$want" > "$stamp"
echo "ssdbench venv ready: $venv"
