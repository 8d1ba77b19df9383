#!/usr/bin/env bash
# The Python module (python/tests/test_module.py) against the dptrain command, and 2 MPI ranks
# of it against the command's 2-rank run: the same param_hash.
# Usage: python_test.sh <python3> <module dir> <dptrain> <scratch> [mpiexec] [sanitizer runtime]
# The sanitizer runtime (a library built with -fsanitize=address) is preloaded into python3.
# Exit 77 (skipped) without NumPy or cffi in that python3 (python3-numpy python3-cffi).
set -uo pipefail
python=$1 moddir=$2 dptrain=$3 scratch=$4 mpiexec=${5:-} asan=${6:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=("$python")
[ -z "$asan" ] || py=(env "LD_PRELOAD=$asan" ASAN_OPTIONS=detect_leaks=0 "$python")
"$python" -c 'import numpy, cffi' 2>/dev/null ||
  { echo "SKIP: $python lacks numpy or cffi (python3-numpy python3-cffi)"; exit 77; }
export PYTHONPATH=$moddir OPENBLAS_NUM_THREADS=1 # one thread: the tool's sums, bit for bit
rm -rf "$scratch" && mkdir -p "$scratch/data" || exit 1
"$python" "$here/make_idx.py" "$scratch/data" || exit 1
"${py[@]}" "$here/test_module.py" "$scratch/data" "$dptrain" "$scratch" || exit 1
[ -n "$mpiexec" ] || { echo "no MPI: the 2-rank comparison is skipped"; exit 0; }

expected=$($mpiexec -np 2 "$dptrain" train --backend cpu --data "$scratch/data" --seed 3 \
  --hidden 64,32 --global-batch 64 --epochs 2 --json | grep '"final": true' |
  grep -o '"param_hash": "[0-9a-f]*"' | sort -u | sed 's/.*"\([0-9a-f]*\)"$/\1/')
$mpiexec -np 2 "${py[@]}" "$here/mpi_train.py" "$scratch/data" "$scratch" ||
  { echo "FAIL: mpirun -np 2 $python mpi_train.py" >&2; exit 1; }
out=$(cat "$scratch"/rank-*.txt)
echo "$out"
want=$(printf 'rank 0 of 2: param_hash %s state %s\nrank 1 of 2: param_hash %s state -' \
  "$expected" "$expected" "$expected")
if [ -n "$expected" ] && [ "$out" = "$want" ]; then
  echo "ok: 2 ranks: param_hash $expected, the tool's"
else
  echo "FAIL: 2 ranks: expected param_hash '$expected' on both ranks (the state on rank 0)" >&2
  exit 1
fi
