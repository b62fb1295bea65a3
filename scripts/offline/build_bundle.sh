#!/usr/bin/env bash
# Build the offline bundle for GPU nodes without internet, once per machine.
#
# The bundle holds what a GPU node's image lacks (see README "GPU nodes without internet"):
#   toolchain.tar.xz  tileiras/ptxas/libnvvm/libdevice of release $TOOLCHAIN (default below), the
#                     only files cuTile needs from the nvidia-cuda-{tileiras,nvcc} and nvidia-nvvm
#                     wheels (13.5.37: 232 MB raw, 59.2 MiB xz)
#   wheels/           cuda-tile, hydra-core, omegaconf, antlr4 runtime, mamba-ssm (no CUDA ext),
#                     submitit (with cloudpickle) and its Hydra launcher; pure Python except cuda-tile
#   install.sh        the node-side installer (copied from scripts/offline/install.sh)
# It is cached under ${SSDBENCH_CACHE:-~/.cache/ssdbench} keyed by this script's content, and
# copied to the output folder (default .offline/, git-ignored). Usage: build_bundle.sh [OUT_DIR]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-.offline}
py=${BUNDLE_PYTHON_VERSION:-3.12}
toolchain=${TOOLCHAIN:-13.5.37}
key=$( (cat "$here/build_bundle.sh" "$here/install.sh"; echo "$toolchain") | sha256sum | cut -c1-12)
cache=${SSDBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ssdbench}/offline-bundle-py$py-$key
pip=(python3 -m pip)

if [ ! -f "$cache/.complete" ]; then
  echo "building offline bundle in $cache (the toolchain compression takes ~5 min on 2 cores)"
  rm -rf "$cache.tmp" && mkdir -p "$cache.tmp/wheels" "$cache.tmp/dl"
  plat=(--only-binary=:all: --python-version "$py" --implementation cp
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
  "${pip[@]}" download -q --no-deps "${plat[@]}" -d "$cache.tmp/dl" \
    nvidia-cuda-tileiras=="$toolchain" nvidia-cuda-nvcc=="$toolchain" nvidia-nvvm=="$toolchain"
  "${pip[@]}" download -q --no-deps "${plat[@]}" -d "$cache.tmp/wheels" \
    cuda-tile==1.7.0 hydra-core==1.3.8 omegaconf==2.3.0 submitit==1.5.4 cloudpickle==3.1.1 \
    hydra-submitit-launcher==1.2.0
  "${pip[@]}" wheel -q --no-deps -w "$cache.tmp/wheels" antlr4-python3-runtime==4.9.3
  # mamba-ssm ships only an sdist; build its pure-Python wheel without the CUDA extension.
  # setup.py imports torch, so build it in a throw-away venv that has CPU torch.
  if ! python3 -c "import torch" 2>/dev/null; then
    echo "error: building the mamba-ssm wheel needs torch in this python (run 'make venv' first" \
         "and call with .venv/bin on PATH)" >&2
    exit 1
  fi
  MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE "${pip[@]}" wheel -q --no-cache-dir \
    --no-build-isolation --no-deps -w "$cache.tmp/wheels" mamba-ssm==2.3.2.post1
  mkdir -p "$cache.tmp/tc"
  for w in "$cache.tmp"/dl/*.whl; do
    python3 -m zipfile -e "$w" "$cache.tmp/tc"
  done
  chmod +x "$cache.tmp/tc/nvidia/cu13/bin/"*  # zipfile drops the executable bits
  (cd "$cache.tmp/tc" && tar cf - nvidia/cu13/bin/tileiras nvidia/cu13/bin/ptxas \
      nvidia/cu13/lib/libnvvm.so.4 nvidia/cu13/nvvm/libdevice/libdevice.10.bc) \
    | xz -9e -T2 > "$cache.tmp/toolchain.tar.xz"
  rm -rf "$cache.tmp/tc" "$cache.tmp/dl"
  cp "$here/install.sh" "$cache.tmp/install.sh"
  touch "$cache.tmp/.complete"
  rm -rf "$cache" && mv "$cache.tmp" "$cache"
fi

rm -rf "$out" && mkdir -p "$out" && cp -r "$cache"/. "$out"/
size=$(du -sm "$out" | cut -f1)
echo "offline bundle ready in $out (${size} MiB; cached in $cache)"
# A device call carries 64 MiB; the tree without its results/ folders is about 1.3 MiB.
if [ "$size" -gt 61 ]; then
  echo "error: bundle is ${size} MiB, over the 61 MiB budget" >&2
  exit 1
fi
