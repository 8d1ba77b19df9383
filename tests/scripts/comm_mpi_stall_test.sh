#!/bin/sh
# A rank stopped during start-up (before MPI_Init_thread, or before the communicator's set-up
# collectives) ends the job: comm_mpi_stall MODE under MPIEXEC -n 2 with DPT_COMM_TIMEOUT=2
# must end with status 69 (EX_UNAVAILABLE) within a few seconds of the deadline, rank 0 printing the watch's
# line for the stalled call.
# Usage: comm_mpi_stall_test.sh MPIEXEC PROGRAM
mpiexec=$1
program=$2
fail() {
  echo "FAIL: $*"
  exit 1
}
for mode in init setup; do
  case $mode in
  init) call="MPI_Init_thread" ;;
  setup) call="the communicator's set-up" ;;
  esac
  start=$(date +%s)
  out=$(DPT_COMM_TIMEOUT=2 timeout 60 "$mpiexec" -x DPT_COMM_TIMEOUT -n 2 "$program" $mode 2>&1)
  rc=$?
  took=$(($(date +%s) - start))
  printf '%s\n' "$out"
  [ "$rc" -eq 69 ] || fail "$mode: exit status $rc, expected 69 (a stalled call)"
  [ "$took" -lt 12 ] || fail "$mode: the job took $took s to end (deadline 2 s)"
  printf '%s\n' "$out" | grep -q "dptrain: rank 0: $call.* did not return within 2 s" ||
    fail "$mode: no line from rank 0 naming $call"
  echo "ok: $mode: rank 0 ended the job with status 69 after $took s"
done
