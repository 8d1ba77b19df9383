#!/usr/bin/env bash
# The resident memory of the ranks of one node: runs `mpiexec --oversubscribe -np N ARGS...`,
# samples every rank's /proc/PID/smaps_rollup five times a second, and prints the peak over the
# run of the sum over the ranks of Rss (a shared page counted in every process that maps it) and
# of Pss (a shared page divided among them), in MiB. The command's output goes to /dev/null.
# Usage: tools/rank_memory.sh N ARGS...   e.g. tools/rank_memory.sh 4 build/tools/dptrain train ...
set -uo pipefail
[ $# -ge 2 ] || { sed -n '6p' "${BASH_SOURCE[0]}" | sed 's/^# //' >&2; exit 2; }
n=$1
shift
mpiexec --oversubscribe -np "$n" "$@" >/dev/null 2>&1 &
mpi=$!
rss_peak=0 pss_peak=0
while kill -0 $mpi 2>/dev/null; do
  rss=0 pss=0
  for p in $(pgrep -P $mpi); do
    read -r r s < <(awk '/^Rss:/ { r = $2 } /^Pss:/ { s = $2 } END { print r + 0, s + 0 }' \
      "/proc/$p/smaps_rollup" 2>/dev/null || echo 0 0)
    rss=$((rss + r)) pss=$((pss + s))
  done
  [ $rss -gt $rss_peak ] && rss_peak=$rss
  [ $pss -gt $pss_peak ] && pss_peak=$pss
  sleep 0.2
done
wait $mpi
rc=$?
echo "exit $rc, $n ranks: sum of Rss $((rss_peak / 1024)) MiB, sum of Pss $((pss_peak / 1024)) MiB"
exit $rc
