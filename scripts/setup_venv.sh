#!/usr/bin/env bash
# Create .venv with everything ssdbench needs; idempotent (a stamp records the inputs it was made from).
# torch: the CUDA 13.0 build (2.11.0, the version our GPU results use) where nvidia-smi sees a GPU,
# else the CPU build 2.13.0 (enough for the CPU test suite). mamba-ssm: --no-deps, no CUDA extension.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${SSDBENCH_VENV:-.venv}
stamp="$venv/.ssdbench-ready"
want=$(cat pyproject.toml scripts/setup_venv.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip)
"${pip[@]}" install -q --upgrade pip
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  torch_spec=${SSDBENCH_TORCH:-torch==2.11.0}
else
  torch_spec=${SSDBENCH_TORCH:-torch==2.13.0}
fi
"${pip[@]}" install -q "$torch_spec"
"${pip[@]}" install -q -e ".[dev]"
MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE "${pip[@]}" install -q --no-cache-dir \
  --no-build-isolation --no-deps mamba-ssm==2.3.2.post1
echo "$want" > "$stamp"
echo "ssdbench venv ready: $venv"
