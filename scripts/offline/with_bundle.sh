#!/usr/bin/env bash
# Run a command on an offline GPU node with the bundle installed and its environment set.
# Usage: scripts/offline/with_bundle.sh [--bundle DIR] [--prefix DIR] -- COMMAND...
# The bundle is installed into the prefix once and again whenever it changes: the prefix keeps a
# stamp (sha256 of the bundle files' contents); a different stamp means a new bundle, so
# what install.sh made there (toolchain, wheels, env.sh) is removed and installed afresh.
set -euo pipefail
bundle=.offline
prefix=${SSDBENCH_PREFIX:-${TMPDIR:-/tmp}/ssdbench-offline}
usage="usage: scripts/offline/with_bundle.sh [--bundle DIR] [--prefix DIR] -- COMMAND..."
while [ $# -gt 0 ]; do
  case $1 in
    --bundle|--prefix)
      [ $# -ge 2 ] || { echo "with_bundle.sh: $1 needs a directory; $usage" >&2; exit 2; }
      if [ "$1" = --bundle ]; then bundle=$2; else prefix=$2; fi
      shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "with_bundle.sh: no command to run; $usage" >&2; exit 2; }
stamp_file=$prefix/.bundle-stamp
if [ -f "$bundle/install.sh" ]; then
  stamp=$(cd "$bundle" && shopt -s nullglob && sha256sum install.sh toolchain.tar.xz wheels/*.whl \
    | sha256sum | cut -d' ' -f1)
  if [ ! -f "$prefix/env.sh" ] || [ "$(cat "$stamp_file" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$prefix/nvidia" "$prefix/site" "$prefix/env.sh" "$stamp_file"
    "$bundle/install.sh" "$bundle" "$prefix"
    printf '%s\n' "$stamp" > "$stamp_file"
  fi
elif [ ! -f "$prefix/env.sh" ]; then
  echo "with_bundle.sh: no bundle at $bundle (make offline-bundle) and none installed in $prefix" >&2
  exit 1
fi
# shellcheck disable=SC1091
source "$prefix/env.sh"
exec "$@"
