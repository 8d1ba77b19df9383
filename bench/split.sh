#!/usr/bin/env bash
# The batch split with one slower replica: samples/s of `dptrain train` with --split even and
# --split proportional, replica SLOW slowed FACTORx by the DPT_TEST_SLOW_REPLICA testing knob
# (it sleeps FACTOR - 1 times its measured forward+backward), and the even split without the
# knob for reference. The runs take turns, REPEAT rounds; the table has the medians, and the
# median of each round's proportional / even ratio (the two runs of a round are adjacent, so a
# neighbour's load that comes and goes moves both alike).
# The proportional runs recompute the shares every SPLIT_EVERY steps (default 10), so that a
# short run reaches its settled split.
# Usage: bench/split.sh DPTRAIN [REPEAT] [FACTOR] [extra dptrain train options...]
# e.g.   bench/split.sh build/tools/dptrain 3 2 --replicas 2 --backend cpu
set -uo pipefail
dptrain=$1 repeat=${2:-3} factor=${3:-2}
shift $(($# < 3 ? $# : 3))
extra=("$@")
[ ${#extra[@]} -gt 0 ] || extra=(--replicas 2 --backend cpu)
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1} POCL_MAX_PTHREAD_COUNT=${POCL_MAX_PTHREAD_COUNT:-1}
every=${SPLIT_EVERY:-10}
common=(--epochs 1 --max-steps 200 --global-batch 256 --quiet --json "${extra[@]}")

# samples/s of one run: knob (or "") and options.
rate() {
  local knob=$1
  shift
  DPT_TEST_SLOW_REPLICA=$knob "$dptrain" train "${common[@]}" "$@" 2>/dev/null | tail -n 1 |
    sed -n 's/.*"samples_per_sec": \([0-9.]*\).*/\1/p'
}
shares() {
  DPT_TEST_SLOW_REPLICA=$1 "$dptrain" train "${common[@]}" --split proportional \
    --split-every "$every" 2>/dev/null |
    tail -n 1 | sed -n 's/.*"shares": \[\([0-9, ]*\)\].*/\1/p'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

slow="1:$factor"
: >/tmp/split_bench.$$.base
: >/tmp/split_bench.$$.even
: >/tmp/split_bench.$$.prop
: >/tmp/split_bench.$$.ratio
for ((i = 0; i < repeat; ++i)); do
  rate "" --split even >>/tmp/split_bench.$$.base
  if ((i % 2 == 0)); then # which of the pair goes first alternates, so a trend hits both
    e=$(rate "$slow" --split even)
    p=$(rate "$slow" --split proportional --split-every "$every")
  else
    p=$(rate "$slow" --split proportional --split-every "$every")
    e=$(rate "$slow" --split even)
  fi
  echo "$e" >>/tmp/split_bench.$$.even
  echo "$p" >>/tmp/split_bench.$$.prop
  awk -v e="$e" -v p="$p" 'BEGIN { if (e > 0) printf "%.4f\n", p / e }' >>/tmp/split_bench.$$.ratio
done
base=$(median </tmp/split_bench.$$.base)
even=$(median </tmp/split_bench.$$.even)
prop=$(median </tmp/split_bench.$$.prop)
ratio=$(median </tmp/split_bench.$$.ratio)
ratios=$(tr '\n' ' ' </tmp/split_bench.$$.ratio)
rm -f /tmp/split_bench.$$.*
echo "| options | no slow replica, even | replica 1 ${factor}x slower, even | replica 1 ${factor}x slower, proportional | proportional / even (each round) | final shares |"
echo "| --- | --- | --- | --- | --- | --- |"
awk -v o="${extra[*]}" -v b="$base" -v e="$even" -v p="$prop" -v r="$ratio" -v rs="$ratios" \
  -v s="$(shares "$slow")" \
  'BEGIN { printf "| %s | %.0f | %.0f | %.0f | %.2fx (%s) | %s |\n", o, b, e, p, r, rs, s }'
