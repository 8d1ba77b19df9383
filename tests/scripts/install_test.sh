#!/usr/bin/env bash
# Installs the built tree into a scratch prefix, then builds and runs a program outside the tree
# against it three ways: find_package (shared and static targets) and pkg-config; the program uses
# the training tier (dptrain.h) only, and a second one checks that the advanced tier is installed.
# Usage: install_test.sh <build-dir> <source-dir> <scratch-dir> <c-compiler> [sanitizer flags]
set -euo pipefail
build=$1 src=$2 scratch=$3 cc=$4 san=${5:-}
rm -rf "$scratch"
prefix="$scratch/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
cmake -S "$src/tests/fixtures/install_consumer" -B "$scratch/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" >/dev/null
cmake --build "$scratch/consumer" >/dev/null
libdir=$(find "$prefix" -name 'libdptrain.so*' -printf '%h\n' | head -n 1)
LD_LIBRARY_PATH="$libdir" "$scratch/consumer/consumer"
"$scratch/consumer/consumer_static"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
# shellcheck disable=SC2046
"$cc" $san -o "$scratch/consumer_pc" "$src/tests/fixtures/install_consumer/consumer.c" \
  $(pkg-config --cflags --libs dptrain)
LD_LIBRARY_PATH="$libdir" "$scratch/consumer_pc"
# The advanced tier is installed beside the training tier (the consumer uses only dptrain.h).
printf '#include <dptrain/advanced.h>\nint main(void) { return dpt_op_name(DPT_OP_GEMM) == 0; }\n' \
  >"$scratch/advanced.c"
# shellcheck disable=SC2046
"$cc" $san -o "$scratch/advanced" "$scratch/advanced.c" $(pkg-config --cflags --libs dptrain)
LD_LIBRARY_PATH="$libdir" "$scratch/advanced"
# Only dpt_ symbols leave the shared library.
leaked=$(nm -D --defined-only "$libdir/libdptrain.so" | awk '$2 ~ /[TDBRW]/ {print $3}' |
  grep -v '^dpt_' || true)
if [ -n "$leaked" ]; then
  echo "symbols exported without the dpt_ prefix:" >&2
  echo "$leaked" >&2
  exit 1
fi
echo "install test: find_package (shared, static), pkg-config, the advanced tier and symbol visibility ok"
