#!/usr/bin/env bash
# --deterministic: the parameters after 20 steps are the same bits on any number of replicas,
# however they are made and exchanged. Each case's param_hash must equal the 1-replica run's.
# On OpenCL and Vulkan it also prints the largest difference from the CPU's parameters (the
# bound docs/training.md quotes) and requires it below 1e-6.
# Usage: deterministic_test.sh <dptrain> <cpu|opencl|vulkan> [mpiexec]
# Needs Fashion-MNIST in /usr/share/datasets/fashion-mnist (exit 77 = skipped without it, or
# without the backend's device).
set -uo pipefail
dptrain=$1 backend=$2 mpiexec=${3:-}
data=/usr/share/datasets/fashion-mnist
[ -e "$data/train-images-idx3-ubyte" ] || [ -e "$data/train-images-idx3-ubyte.gz" ] ||
  { echo "SKIP: no Fashion-MNIST in $data"; exit 77; }
"$dptrain" devices 2>/dev/null | grep -q "^$backend:" || { echo "SKIP: no $backend device"; exit 77; }
export POCL_MAX_PTHREAD_COUNT=1
# shellcheck source=cli_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

base=(train --backend "$backend" --data "$data" --epochs 1 --seed 3 --json --deterministic
  --global-batch 48 --group-size 8 --warmup 2 --schedule constant)
mlp=(--hidden 64,32 --max-steps 20)
failures=0 runs=0

hash_of() { final_hash /dev/stdin; }

# check NAME EXPECTED COMMAND...: the run's final param_hash (on every rank) is EXPECTED.
check() {
  local name=$1 expected=$2 out got
  shift 2
  runs=$((runs + 1))
  out=$("$@" 2>&1)
  got=$(hash_of <<<"$out")
  if [ -n "$expected" ] && [ "$got" = "$expected" ]; then
    echo "ok: $name $got"
  else
    fail "$name: param_hash '$got', expected '$expected': $(tail -3 <<<"$out")"
  fi
}

# reference NAME ARGS...: the 1-replica hash of a model (OpenBLAS free to use two threads).
reference() {
  local h
  h=$(OPENBLAS_NUM_THREADS=2 "$dptrain" "${base[@]}" "$@" 2>&1 | hash_of)
  [ -n "$h" ] || { echo "FAIL: no reference hash for $*" >&2; exit 1; }
  echo "$h"
}

ref=$(reference "${mlp[@]}")
echo "mlp reference $ref"
export OPENBLAS_NUM_THREADS=1
if [ "$backend" = cpu ]; then
  for r in 2 3 4 5 8; do
    check "mlp --replicas $r" "$ref" "$dptrain" "${base[@]}" "${mlp[@]}" --replicas "$r"
  done
  check "mlp --accumulate 3" "$ref" "$dptrain" "${base[@]}" "${mlp[@]}" --replicas 2 --accumulate 3
  check "mlp --bucket-mb 0.01" "$ref" "$dptrain" "${base[@]}" "${mlp[@]}" --replicas 2 \
    --bucket-mb 0.01
  check "mlp --full-step" "$ref" "$dptrain" "${base[@]}" "${mlp[@]}" --replicas 3 --full-step
  check "mlp --split proportional" "$ref" env DPT_TEST_SLOW_REPLICA=1:3 "$dptrain" "${base[@]}" \
    "${mlp[@]}" --replicas 3 --split proportional --split-every 1
  # The groups' fixed-point sum with agreed exponents is what makes it hold: summing a
  # replica's groups in float first changes the bits, scaling by each replica's own exponents
  # makes the replicas drift apart (the drift check stops the run).
  for m in order exponent; do
    runs=$((runs + 1))
    out=$(DPT_TEST_EXACT_MUTATE=$m "$dptrain" "${base[@]}" "${mlp[@]}" --replicas 3 2>&1)
    got=$(hash_of <<<"$out")
    if { [ -n "$got" ] && [ "$got" != "$ref" ]; } || grep -q "replica drift" <<<"$out"; then
      echo "ok: DPT_TEST_EXACT_MUTATE=$m breaks it (${got:-replica drift})"
    else
      fail "DPT_TEST_EXACT_MUTATE=$m still gives '$got'"
    fi
  done
  # Ghost batch norm (each group's statistics), the CNN, BERT with dropout.
  resnet=(--model resnet --depth 8 --max-steps 20)
  rref=$(reference "${resnet[@]}")
  check "resnet-8 --replicas 3" "$rref" "$dptrain" "${base[@]}" "${resnet[@]}" --replicas 3
  cnn=(--model cnn --channels 8,16 --max-steps 20)
  cref=$(reference "${cnn[@]}")
  check "cnn --replicas 4" "$cref" "$dptrain" "${base[@]}" "${cnn[@]}" --replicas 4
  printf 'the quick brown fox jumps over the lazy dog %s\n%%\n' $(seq 1 400) >"$scratch/text"
  bert=(train --backend cpu --model bert --text "$scratch/text" --vocab-size 300 --seq-len 32
    --layers 1 --hidden-size 32 --heads 2 --ffn 64 --epochs 1 --json --deterministic
    --global-batch 16 --group-size 2 --max-steps 20)
  bref=$(OPENBLAS_NUM_THREADS=2 "$dptrain" "${bert[@]}" 2>&1 | hash_of)
  check "bert --replicas 3" "$bref" "$dptrain" "${bert[@]}" --replicas 3
  if [ -n "$mpiexec" ]; then
    mpi=($mpiexec --oversubscribe)
    for n in 2 3 4; do
      check "mlp $n ranks" "$ref" "${mpi[@]}" -np "$n" "$dptrain" "${base[@]}" "${mlp[@]}"
    done
    for a in ring rd direct hier mpi; do
      check "mlp 3 ranks DPT_ALLREDUCE_ALGO=$a" "$ref" env DPT_ALLREDUCE_ALGO=$a \
        "${mpi[@]}" -np 3 -x DPT_ALLREDUCE_ALGO "$dptrain" "${base[@]}" "${mlp[@]}"
    done
    check "resnet-8 2 ranks" "$rref" "${mpi[@]}" -np 2 "$dptrain" "${base[@]}" "${resnet[@]}"
    check "bert 2 ranks" "$bref" "${mpi[@]}" -np 2 "$dptrain" "${bert[@]}"
    # Resume at another world size: 2 ranks to step 10, then 3 ranks to step 20.
    "${mpi[@]}" -np 2 "$dptrain" "${base[@]}" "${resnet[@]}" --max-steps 10 \
      --checkpoint-dir "$scratch/ck" --checkpoint-every 10 >/dev/null 2>&1
    check "resnet-8 2 ranks, resumed on 3" "$rref" "${mpi[@]}" -np 3 "$dptrain" "${base[@]}" \
      "${resnet[@]}" --checkpoint-dir "$scratch/ck" --resume
  fi
else
  check "mlp --replicas 3" "$ref" "$dptrain" "${base[@]}" "${mlp[@]}" --replicas 3
  check "mlp --replicas 2 --accumulate 3" "$ref" "$dptrain" "${base[@]}" "${mlp[@]}" \
    --replicas 2 --accumulate 3
  # Across backend kinds the kernels differ: the bound, against the CPU's parameters.
  runs=$((runs + 1))
  "$dptrain" "${base[@]}" "${mlp[@]}" --save-weights "$scratch/mine.st" >/dev/null 2>&1
  "$dptrain" "${base[@]}" "${mlp[@]}" --backend cpu --save-weights "$scratch/cpu.st" >/dev/null 2>&1
  d=$(max_diff "$scratch/mine.st" "$scratch/cpu.st")
  if awk -v d="${d%% *}" 'BEGIN { exit !(d != "none" && d + 0 < 1e-6) }'; then
    echo "ok: largest difference from the CPU backend's parameters: $d"
  else
    fail "largest difference from the CPU backend's parameters: $d"
  fi
fi

# Bad input: one line naming what and why, before step 1.
bad() {
  local name=$1 want=$2 out rc
  shift 2
  runs=$((runs + 1))
  out=$("$dptrain" "$@" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && grep -q -- "$want" <<<"$out" && ! grep -q '"epoch"' <<<"$out"; then
    echo "ok: $name refused"
  else
    fail "$name: exit $rc, output: $(head -3 <<<"$out")"
  fi
}
bad "a group that does not divide the batch" "group size 7 does not divide the global batch 48" \
  "${base[@]}" "${mlp[@]}" --group-size 7
bad "--sync-bn" "sync_bn sums the batch statistics" "${base[@]}" --model resnet --depth 8 \
  --sync-bn --max-steps 2
bad "--group-size alone" "group_size needs deterministic" train --backend "$backend" \
  --data "$data" --max-steps 2 --group-size 8
bad "--grad-dtype bf16" "a 16-bit exchange rounds" "${base[@]}" "${mlp[@]}" --grad-dtype bf16

echo "$((runs - failures)) passed, $failures failed"
[ $failures -eq 0 ]
