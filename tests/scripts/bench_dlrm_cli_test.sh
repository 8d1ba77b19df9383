#!/usr/bin/env bash
# dptrain bench train --model dlrm on a tiny synthetic set: the table's rows and columns and sane
# values (positive samples/s, the sparse exchange's table bytes below the dense one's, a peak RSS
# per rank next to its shards) with 2 thread replicas, --json, 2 MPI ranks (with mpiexec), and
# options that do not apply refused with one line.
# Usage: bench_dlrm_cli_test.sh <dptrain> <scratch dir> [mpiexec]
set -uo pipefail
dptrain=$1 dir=$2 mpiexec=${3:-}
export OPENBLAS_NUM_THREADS=1
rm -rf "$dir" && mkdir -p "$dir" || exit 1
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
tiny=(bench train --model dlrm --rows 1000 --tables 3 --samples 1024 --shards 4
  --embedding-dim 4 --global-batch 64 --steps 3 --repeat 1)

# refused NAME NEEDLE ARGS...: exit 2 and one line on stderr holding NEEDLE.
refused() {
  local name=$1 needle=$2
  shift 2
  local err rc
  err=$("$dptrain" "$@" 2>&1 >/dev/null)
  rc=$?
  if [ $rc -ne 2 ]; then
    fail "$name: exit $rc: $err"
  elif [[ $err != *"$needle"* ]] || [ "$(wc -l <<<"$err")" -ne 1 ]; then
    fail "$name: not one line holding '$needle': $err"
  else
    echo "ok: $name: $err"
  fi
}
refused "--depth with dlrm" "--depth does not apply to --model dlrm" "${tiny[@]}" --depth 20
refused "--rows without dlrm" "--rows is for --model dlrm" bench train --rows 10
refused "--rows with --data" "not --data" "${tiny[@]}" --data "$dir/none-*.bin"
refused "both one-variant options" "exclude each other" "${tiny[@]}" --sparse-tables \
  --dense-tables

# check OUT WHO: the table of a run with both variants.
check() {
  local out=$1 who=$2
  for row in "samples/s" "steps/s, sparse / dense" "table bytes per step per replica" \
    "peak RSS (VmHWM"; do
    grep -qF "$row" <<<"$out" || fail "$who: no row '$row': $out"
  done
  grep -q "dense exchange *--sparse-tables" <<<"$out" || fail "$who: no columns: $out"
  read -r dsps ssps < <(awk '/^samples\/s/ {print $2, $3}' <<<"$out")
  read -r dbytes sbytes < <(awk '/^table bytes per step/ {print $6, $7}' <<<"$out")
  awk -v d="$dsps" -v s="$ssps" 'BEGIN {exit !(d > 0 && s > 0)}' ||
    fail "$who: samples/s not positive ($dsps, $ssps): $out"
  awk -v d="$dbytes" -v s="$sbytes" 'BEGIN {exit !(s > 0 && s < d)}' ||
    fail "$who: sparse table bytes $sbytes not below the dense $dbytes: $out"
  awk '/^  (rank|the process)/ {n++; if (!($(NF-1) > 0 && $NF > 0)) bad=1}
       END {exit !(n > 0 && !bad)}' <<<"$out" || fail "$who: peak RSS not positive: $out"
  grep -q "of 4 shards, .* [kM]B of the data set's .* [kM]B" <<<"$out" ||
    fail "$who: no shard bytes next to the data set's: $out"
}

before=$(ls -d /tmp/dptrain-bench-dlrm-* 2>/dev/null | wc -l)
out=$(timeout 120 "$dptrain" "${tiny[@]}" --replicas 2 2>"$dir/err")
if [ $? -ne 0 ]; then
  fail "2 replicas failed: $(cat "$dir/err")"
else
  check "$out" "2 replicas"
  grep -q "2 replicas (threads" <<<"$out" || fail "2 replicas: not reported: $out"
  grep -q "process, replicas 0 .. 1: 4 of 4 shards" <<<"$out" ||
    fail "2 replicas: the process holds all 4 shards: $out"
  echo "$out"
fi
after=$(ls -d /tmp/dptrain-bench-dlrm-* 2>/dev/null | wc -l)
[ "$after" -le "$before" ] || fail "the temporary shards were left in /tmp"

out=$(timeout 120 "$dptrain" "${tiny[@]}" --replicas 1 --sparse-tables --json 2>"$dir/err")
if [ $? -ne 0 ]; then
  fail "1 replica --sparse-tables --json failed: $(cat "$dir/err")"
else
  for key in sparse_samples_per_sec sparse_table_bytes_per_step dataset_bytes shard_bytes \
    sparse_peak_rss_bytes; do
    grep -q "\"$key\"" <<<"$out" || fail "--json lacks $key: $out"
  done
  grep -q '"dense_samples_per_sec"' <<<"$out" && fail "--sparse-tables ran the dense one: $out"
  grep -q '"sparse_samples_per_sec": [1-9]' <<<"$out" || fail "--json samples/s: $out"
  echo "$out"
fi

if [ -n "$mpiexec" ]; then
  out=$(timeout 120 $mpiexec -n 2 "$dptrain" "${tiny[@]}" 2>"$dir/err")
  if [ $? -ne 0 ]; then
    fail "2 MPI ranks failed: $(cat "$dir/err")"
  else
    check "$out" "2 ranks"
    for r in 0 1; do
      grep -q "^  rank $r " <<<"$out" || fail "2 ranks: no peak RSS of rank $r: $out"
      grep -q "^rank $r: 2 of 4 shards" <<<"$out" || fail "2 ranks: rank $r's shards: $out"
    done
    echo "$out"
  fi
fi

[ $failures -eq 0 ] || exit 1
echo "bench dlrm cli: all passed"
