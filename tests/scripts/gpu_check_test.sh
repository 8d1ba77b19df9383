#!/usr/bin/env bash
# bench/gpu-check.sh on this build and its drivers: --help, a bad option and a bad stage refused
# with one line and exit 2, then two --quick runs of its stages but the build (conformance, gemm
# and the all-reduce on every device; training on the CPU backend), each results file holding
# every stage's section and a device line, the run stages passed and the others marked not run.
# Usage: gpu_check_test.sh <gpu-check.sh> <build dir> <scratch dir>
# Exit 77 (skipped) where the build has no MPI or no OpenCL or Vulkan device.
set -uo pipefail
script=$1 build=$2 dir=$3
rm -rf "$dir" && mkdir -p "$dir" || exit 1
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

grep -q '^DPT_WITH_MPI:BOOL=ON' "$build/CMakeCache.txt" || { echo "SKIP: no MPI"; exit 77; }
devices=$("$build/tools/dptrain" devices 2>&1)
for b in opencl vulkan; do
  grep -q "^$b:[0-9]" <<<"$devices" || { echo "SKIP: no $b device"; exit 77; }
done

out=$(bash "$script" --help 2>&1)
[ $? -eq 0 ] && [[ $out == usage:* ]] || fail "--help: $out"
# refused NEEDLE ARGS...: exit 2 and a first line on stderr naming the error.
refused() {
  local needle=$1 err rc
  shift
  err=$(bash "$script" "$@" 2>&1 >/dev/null)
  rc=$?
  if [ $rc -ne 2 ] || [[ $(head -1 <<<"$err") != "gpu-check: "*"$needle"* ]]; then
    fail "$*: exit $rc: $err"
  else
    echo "ok: $*: $(head -1 <<<"$err")"
  fi
}
refused "unknown option '--nope'" --nope
refused "unknown stage 'bogus'" --stages gemm,bogus
refused "unknown backend 'cuda'" --backends cuda
refused "--out needs a value" --out

# check FILE RAN...: every section, a device line, the stages RAN passed and no other run.
check() {
  local f=$1 s
  shift
  [ -s "$f" ] || { fail "no results file $f"; return; }
  for s in "## Build" "## Devices" "## Conformance" "## gemm" "## Training throughput" \
    "## All-reduce from device buffers"; do
    grep -qxF "$s" "$f" || fail "$f: no section '$s'"
  done
  grep -q '^- Devices: .*opencl:0.*vulkan:0' "$f" || fail "$f: no device line"
  grep -q '^| opencl:0 | ' "$f" || fail "$f: no opencl:0 row in the devices table"
  local passed
  passed=$(grep -c '^Status: passed$' "$f")
  [ "$passed" -eq $# ] || fail "$f: $passed stages passed, not $#"
  [ "$(grep -c '^Status: not run' "$f")" -eq $((5 - $#)) ] || fail "$f: stages run: $*"
}

log=$dir/a.log
if bash "$script" --quick --build "$build" --stages conformance,gemm,allreduce \
  --out "$dir/a.md" >"$log" 2>&1; then
  check "$dir/a.md" conformance gemm allreduce
  grep -q '^| vulkan:0 | passed' "$dir/a.md" || fail "a.md: no vulkan:0 conformance row"
  grep -q '^| vulkan | [0-9]' "$dir/a.md" || fail "a.md: no vulkan all-reduce row"
  grep -q '^cuBLAS: ' "$dir/a.md" || fail "a.md: no cuBLAS line"
else
  fail "conformance,gemm,allreduce: exit $?: $(tail -20 "$log")"
fi
log=$dir/b.log
if bash "$script" --quick --build "$build" --stages train --backends cpu --out "$dir/b.md" \
  >"$log" 2>&1; then
  check "$dir/b.md" train
  for m in ResNet-20 BERT; do
    for r in 1 2; do
      grep -q "^| $m.* | cpu | $r | [0-9]" "$dir/b.md" || fail "b.md: no $m row, $r rank(s)"
    done
  done
else
  fail "train: exit $?: $(tail -20 "$log")"
fi
[ $failures -eq 0 ] || { cat "$dir"/*.md >&2; exit 1; }
echo "gpu_check: all checks passed"
