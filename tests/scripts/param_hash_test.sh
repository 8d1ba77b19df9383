#!/usr/bin/env bash
# Fixed runs whose final param_hash must not move: training results stay put unless a change
# asks for new numerics (and then updates these values and says why in its commit).
# Usage: param_hash_test.sh <dptrain> [mpiexec]
# Needs Fashion-MNIST in /usr/share/datasets/fashion-mnist (exit 77 = skipped without it).
# OpenBLAS splits a gemm's work by thread count, which changes the sums: one thread pins them.
set -uo pipefail
dptrain=$1 mpiexec=${2:-}
export OPENBLAS_NUM_THREADS=1
data=/usr/share/datasets/fashion-mnist
[ -e "$data/train-images-idx3-ubyte" ] || [ -e "$data/train-images-idx3-ubyte.gz" ] ||
  { echo "SKIP: no Fashion-MNIST in $data"; exit 77; }

base=(train --backend cpu --data "$data" --epochs 1 --seed 3 --max-steps 50 --json)
failures=0 runs=0

# check NAME EXPECTED COMMAND...: the run's final param_hash (the same on every rank) is EXPECTED.
check() {
  local name=$1 expected=$2
  shift 2
  local out got
  runs=$((runs + 1))
  out=$("$@" 2>&1)
  got=$(grep '"final": true' <<<"$out" | grep -o '"param_hash": "[0-9a-f]*"' | sort -u |
    sed 's/.*"\([0-9a-f]*\)"$/\1/' | tr '\n' ' ')
  got=${got% }
  if [ "$got" = "$expected" ]; then
    echo "ok: $name $got"
  else
    echo "FAIL: $name: param_hash '$got', expected $expected" >&2
    tail -5 <<<"$out" >&2
    failures=$((failures + 1))
  fi
}

check "1 replica" 664ee7778c93e4d9 "$dptrain" "${base[@]}"
check "--replicas 2" 0599575d2299602a "$dptrain" "${base[@]}" --replicas 2
if [ -n "$mpiexec" ]; then
  mpi=($mpiexec -np 2)
  check "2 ranks" 0599575d2299602a "${mpi[@]}" "$dptrain" "${base[@]}"
  check "2 ranks --full-step" 0599575d2299602a "${mpi[@]}" "$dptrain" "${base[@]}" --full-step
  # The CNN's convolutions: oneDNN's where the CPU backend has it, else im2col + gemm.
  cnn=a9ea16131ed7bad4
  "$dptrain" devices 2>/dev/null | grep -q "^cpu:0 .*oneDNN" && cnn=68a2b0284984e415
  check "2 ranks cnn" "$cnn" "${mpi[@]}" "$dptrain" "${base[@]}" --model cnn --max-steps 10
  check "2 ranks cnn im2col" a9ea16131ed7bad4 env DPT_CPU_CONV=im2col "${mpi[@]}" "$dptrain" \
    "${base[@]}" --model cnn --max-steps 10
  check "2 ranks adamw clip warmup" bef4a40df51a7a0c "${mpi[@]}" "$dptrain" "${base[@]}" \
    --optimizer adamw --clip-norm 1 --warmup 5 --max-steps 30
fi
echo "$((runs - failures)) passed, $failures failed"
[ $failures -eq 0 ]
