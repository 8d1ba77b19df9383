#!/usr/bin/env bash
# Fuzzes the parsers (tests/fuzz/, docs/fuzzing.md): builds the libFuzzer targets with clang,
# AddressSanitizer and UndefinedBehaviorSanitizer (-DDPT_FUZZ=ON; the library without its GPU
# backends and MPI, which no parser uses) into $DPT_FUZZ_BUILD_DIR (default build-libfuzzer/),
# then runs every target for SECONDS (default 20) through ctest -L fuzzer. Exits non-zero when a
# target crashes; the input that did it is in BUILD/tests/fuzz-work/<target>/crashes/.
# Usage: tools/fuzz.sh [SECONDS] [TARGET...]   (targets: safetensors checkpoint idx model_json
#        bpe_json interactions criteo; default all)
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:-20}
shift || true
build=${DPT_FUZZ_BUILD_DIR:-$src/build-libfuzzer}
"$src/tools/deps.sh"
cmake -S "$src" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDPT_FUZZ=ON -DDPT_FUZZ_SECONDS="$seconds" -DDPT_BUILD_TOOLS=OFF -DDPT_WITH_OPENCL=OFF \
  -DDPT_WITH_VULKAN=OFF -DDPT_WITH_MPI=OFF >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log" >&2; exit 1; }
cmake --build "$build" -j"$(nproc)" --target dpt_fuzz_targets >"$build.build.log" 2>&1 ||
  { cat "$build.build.log" >&2; exit 1; }
pattern=fuzz_
if [ $# -gt 0 ]; then pattern="^fuzz_($(IFS='|'; echo "$*"))\$"; fi
cd "$build"
ctest -L fuzzer -R "$pattern" --output-on-failure
