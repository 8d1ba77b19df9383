#!/usr/bin/env bash
# Runs the OpenCL op conformance suite under Oclgrind (API checks, data races, uninitialized
# values) and fails if Oclgrind reports anything. gemm and gemm_batched are left out (their
# cases are tagged "clblast"): they run CLBlast's kernels, not ours, and take minutes in the
# simulator.
# Usage: oclgrind_test.sh <oclgrind> <conformance executable> <log file>
set -uo pipefail
oclgrind=$1 conformance=$2 log=$3
rm -f "$log"
CK_EXCLUDE_TAGS=clblast "$oclgrind" --check-api --data-races --uninitialized \
  --build-options -cl-opt-disable --log "$log" "$conformance" opencl
rc=$?
if [ -s "$log" ]; then
  echo "Oclgrind reported problems:" >&2
  cat "$log" >&2
  exit 1
fi
exit $rc
