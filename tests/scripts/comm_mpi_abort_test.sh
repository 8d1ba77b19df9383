#!/bin/sh
# dpt_comm_abort ends a job with a stuck rank: comm_mpi_abort under MPIEXEC -n 2 must end with
# status 3 (the code it passes) well before rank 1 wakes up (60 s), and rank 0 must have
# destroyed a timed-out communicator without waiting for rank 1.
# Usage: comm_mpi_abort_test.sh MPIEXEC PROGRAM
mpiexec=$1
program=$2
start=$(date +%s)
out=$("$mpiexec" -n 2 "$program" 2>&1)
rc=$?
took=$(($(date +%s) - start))
printf '%s\n' "$out"
fail() {
  echo "FAIL: $*"
  exit 1
}
[ "$rc" -eq 3 ] || fail "exit status $rc, expected 3 (the code given to dpt_comm_abort)"
[ "$took" -lt 20 ] || fail "the job took $took s to end"
printf '%s\n' "$out" | grep -q "destroy after the timeout returned in 0\." ||
  fail "destroying the timed-out communicator did not return within a second"
echo "ok: the job ended with status 3 after $took s"
