#!/usr/bin/env bash
# Run a command on an offline GPU node with the bundle installed (once) and its environment set.
# Usage: scripts/offline/with_bundle.sh [--bundle DIR] [--prefix DIR] -- COMMAND...
set -euo pipefail
bundle=.offline
prefix=${SSDBENCH_PREFIX:-${TMPDIR:-/tmp}/ssdbench-offline}
while [ $# -gt 0 ]; do
  case $1 in
    --bundle) bundle=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[ -f "$prefix/env.sh" ] || "$bundle/install.sh" "$bundle" "$prefix"
# shellcheck disable=SC1091
source "$prefix/env.sh"
exec "$@"
