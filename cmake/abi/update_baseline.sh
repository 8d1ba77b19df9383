#!/usr/bin/env bash
# Writes the ABI baseline cmake/abi/libdptrain-<abi version>.abi (abidw, abigail-tools) from a
# built library, for a release that changes the ABI on purpose: a new minor version below 1.0,
# whose new soname gets its own baseline. The build must have debug information (the default
# RelWithDebInfo) and no sanitizers.
# Usage: cmake/abi/update_baseline.sh <build-dir>
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:?usage: update_baseline.sh <build-dir>}
lib=$(readlink -f "$build/libdptrain.so")
soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
abi=${soname#libdptrain.so.}
abidw --headers-dir "$here/../../include/dptrain" --drop-private-types --no-show-locs \
  --no-corpus-path --no-comp-dir-path --no-elf-needed --type-id-style hash --out-file "$here/libdptrain-$abi.abi" "$lib"
echo "wrote $here/libdptrain-$abi.abi from $lib"
