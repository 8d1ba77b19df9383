#!/usr/bin/env bash
# Configures and builds dptrain into $DPT_BUILD_DIR (default: build/ in the source tree).
# Extra arguments are passed to cmake's configure step (e.g. -DDPT_SANITIZE=ON).
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${DPT_BUILD_DIR:-$src/build}
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log" >&2; exit 1; }
grep -E '^-- dptrain|not found' "$build.configure.log" || true
cmake --build "$build" -j"$(nproc)" >"$build.build.log" 2>&1 || { cat "$build.build.log" >&2; exit 1; }
