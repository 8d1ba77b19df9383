#!/usr/bin/env bash
# The whole test suite: installs what it needs, builds, runs every Check suite through ctest.
# Exits non-zero on any failure. Extra arguments go to cmake (e.g. -DDPT_WERROR=ON,
# -DDPT_SANITIZE=ON); DPT_BUILD_DIR picks the build directory (default build/).
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$src/tools/deps.sh"
"$src/tools/build.sh" "$@"
build=${DPT_BUILD_DIR:-$src/build}
cd "$build"
ctest --output-on-failure --timeout 600 -j"$(nproc)"
