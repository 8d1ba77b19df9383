#!/usr/bin/env bash
# The main job: installs what it needs, builds, and runs dptrain. Arguments go to `dptrain`
# (default: `devices`).
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$src/tools/deps.sh"
"$src/tools/build.sh"
build=${DPT_BUILD_DIR:-$src/build}
if [ $# -eq 0 ]; then set -- devices; fi
exec "$build/tools/dptrain" "$@"
