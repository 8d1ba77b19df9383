#!/usr/bin/env bash
# The dptrain command as a user meets it: exit codes, one-line errors for bad input on every
# rank, JSON output, weights files written and read back.
# Usage: cli_test.sh <dptrain> <scratch dir> [mpiexec] [st_dataset_gen] [ckpt_gen]
set -uo pipefail
dptrain=$1 scratch=$2 mpiexec=${3:-} gen=${4:-} ckgen=${5:-}
rm -rf "$scratch" && mkdir -p "$scratch"
export OPENBLAS_NUM_THREADS=1 POCL_MAX_PTHREAD_COUNT=1
failures=0
# shellcheck source=cli_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"



good="$scratch/good"
make_idx "$good" train 300
make_idx "$good" t10k 100

# 1. Usage errors exit 2.
"$dptrain" train --no-such-flag >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "unknown flag exited $rc, expected 2"
"$dptrain" train --lr >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "missing value exited $rc, expected 2"
"$dptrain" no-such-command >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "unknown command exited $rc, expected 2"
# Slurm tasks without MPI's process information (srun --mpi=none): refused with exit 2 before
# any training or output, naming both counts and srun --mpi=pmix.
SLURM_STEP_NUM_TASKS=2 SLURM_NTASKS=2 SLURM_PROCID=1 "$dptrain" train --data "$good" \
  --epochs 1 --max-steps 2 --save-weights "$scratch/dup.st" >"$scratch/out" 2>"$scratch/err"
rc=$?
[ $rc -eq 2 ] && grep -q "Slurm started 2 tasks .* MPI sees 1 rank.*srun --mpi=pmix" "$scratch/err" &&
  [ ! -e "$scratch/dup.st" ] && [ ! -s "$scratch/out" ] ||
  fail "2 Slurm tasks without MPI: exit $rc, $(cat "$scratch/err")"
help=$("$dptrain" train --help)
grep -q -- "--global-batch" <<<"$help" || fail "--help does not document --global-batch"
# Every option --help lists is one the parser knows, and takes a value exactly when the help
# shows one: a value option given none exits 2 saying so; a flag leaves the next word to be
# read as an option.
"$dptrain" train --help >"$scratch/help"; rc=$?
[ $rc -eq 0 ] || fail "--help exited $rc"
awk 'length($0) > 100 { exit 1 }' "$scratch/help" || fail "--help has lines over 100 columns"
options=0
while read -r opt value; do
  options=$((options + 1))
  [ "$opt" = --help ] && continue # prints the usage at once, whatever follows
  if [ -n "$value" ]; then
    "$dptrain" train "$opt" >/dev/null 2>"$scratch/err"; rc=$?
    [ $rc -eq 2 ] && grep -q "^dptrain train: $opt needs a value$" "$scratch/err" ||
      fail "$opt without its value exited $rc: $(head -n 1 "$scratch/err")"
  else
    "$dptrain" train "$opt" --no-such-flag >/dev/null 2>"$scratch/err"; rc=$?
    [ $rc -eq 2 ] && grep -q "^dptrain train: unknown option '--no-such-flag'$" "$scratch/err" ||
      fail "flag $opt exited $rc: $(head -n 1 "$scratch/err")"
  fi
done < <(sed -n 's/^  \(--[a-z-]*\)\( [^ ]*\)\{0,1\}  .*/\1\2/p' "$scratch/help")
[ $options -ge 30 ] || fail "--help lists $options options, expected at least 30"
# Bad values exit 2 with one line naming the value and the option, then the usage text.
for args in "--epochs 0" "--device 1025" "--replicas 0" "--lr nan" "--seed -1" "--model rnn" \
  "--channels 8" "--hidden 0" "--schedule exponential" "--optimizer adam" "--warmup x" \
  "--on-nonfinite maybe" "--keep-checkpoints 0" "--checkpoint-every 0" "--max-rollbacks -1" \
  "--split foo" "--split-every 0"; do
  set -- $args
  "$dptrain" train "$@" >/dev/null 2>"$scratch/err"; rc=$?
  [ $rc -eq 2 ] && [ "$(head -n 1 "$scratch/err")" = "dptrain train: bad value '$2' for $1" ] &&
    grep -q "^usage: dptrain train" "$scratch/err" ||
    fail "$args exited $rc: $(head -n 1 "$scratch/err")"
done
for b in "cpu,bogus" "cpu," ""; do
  "$dptrain" train --backend "$b" --data "$good" --epochs 1 >/dev/null 2>&1; rc=$?
  [ $rc -eq 2 ] || fail "--backend '$b' exited $rc, expected 2"
done

# 2. devices lists the CPU backend.
"$dptrain" devices | grep -q "^cpu:0" || fail "devices does not list cpu:0"

# 3. A short run with JSON output: one object per epoch, then the final one.
out=$("$dptrain" train --data "$good" --hidden 16 --global-batch 50 --epochs 2 --backend cpu \
  --json --save-weights "$scratch/w.safetensors" 2>"$scratch/err")
rc=$?
[ $rc -eq 0 ] || fail "short run exited $rc: $(cat "$scratch/err")"
[ "$(echo "$out" | grep -c '"epoch"')" -eq 2 ] || fail "expected 2 epoch objects: $out"
echo "$out" | tail -n 1 | grep -q '"final": true' || fail "no final object: $out"
for key in test_accuracy samples_per_sec steps ranks replicas backend param_hash compute_seconds \
  allreduce_seconds optimizer_seconds imbalance_seconds; do
  echo "$out" | tail -n 1 | grep -q "\"$key\"" || fail "final object lacks $key"
done
echo "$out" | tail -n 1 | grep -q '"steps": 12,' || fail "expected 12 steps (2 epochs x 6): $out"
[ -s "$scratch/w.safetensors" ] || fail "--save-weights wrote nothing"
[ ! -e "$scratch/w.safetensors.tmp" ] || fail "temporary weights file left behind"
echo "$out" | tail -n 1 | grep -q '"test_accuracy": [0-9]' || fail "no test accuracy: $out"
# --test-data none: no evaluation, though the directory has a test split.
out2=$("$dptrain" train --data "$good" --hidden 16 --global-batch 50 --epochs 1 --backend cpu \
  --json --test-data none 2>"$scratch/err")
[ $? -eq 0 ] || fail "--test-data none failed: $(cat "$scratch/err")"
echo "$out2" | tail -n 1 | grep -q '"test_accuracy": null' || fail "--test-data none evaluated: $out2"

# 4. The saved weights load back: zero learning steps reproduce the saved fingerprint.
hash1=$(echo "$out" | tail -n 1 | sed 's/.*"param_hash": "\([0-9a-f]*\)".*/\1/')
out2=$("$dptrain" train --data "$good" --hidden 16 --global-batch 50 --epochs 1 --max-steps 1 \
  --lr 1e-30 --backend cpu --json --init-weights "$scratch/w.safetensors" 2>"$scratch/err")
[ $? -eq 0 ] || fail "--init-weights run failed: $(cat "$scratch/err")"
hash2=$(echo "$out2" | tail -n 1 | sed 's/.*"param_hash": "\([0-9a-f]*\)".*/\1/')
[ -n "$hash1" ] || fail "no param_hash in $out"
[ "$hash1" = "$hash2" ] || fail "weights read back differ: saved $hash1, loaded $hash2"
# A model of another size does not take the file; the message names the tensor.
"$dptrain" train --data "$good" --hidden 17 --epochs 1 --backend cpu \
  --init-weights "$scratch/w.safetensors" >/dev/null 2>"$scratch/err"
rc=$?
[ $rc -ne 0 ] || fail "mismatched weights accepted"
grep -q "1.weight" "$scratch/err" || fail "mismatch message does not name the tensor: $(cat "$scratch/err")"
[ "$(wc -l <"$scratch/err")" -eq 1 ] || fail "mismatch message is not one line: $(cat "$scratch/err")"

# 4a. The sharded step (default) and --full-step end with the same parameters (3 replicas,
# the ring all-reduce, so both sum in the same order).
for mode in "" --full-step; do
  out=$(DPT_ALLREDUCE_ALGO=ring "$dptrain" train --data "$good" --hidden 16 --global-batch 50 \
    --epochs 2 --backend cpu --replicas 3 --json $mode 2>"$scratch/err")
  [ $? -eq 0 ] || fail "3 replicas $mode failed: $(cat "$scratch/err")"
  echo "$out" | tail -n 1 | sed 's/.*"param_hash": "\([0-9a-f]*\)".*/\1/' >"$scratch/hash$mode"
done
[ -s "$scratch/hash" ] && cmp -s "$scratch/hash" "$scratch/hash--full-step" ||
  fail "sharded and full steps differ: $(cat "$scratch/hash") vs $(cat "$scratch/hash--full-step")"

# 4b. Every step skipped (diverging learning rate): the JSON stays JSON (null, never nan).
out=$("$dptrain" train --data "$good" --hidden 16 --global-batch 50 --epochs 1 --backend cpu \
  --lr 1e30 --momentum 0 --skip-nonfinite --json 2>"$scratch/err")
[ $? -eq 0 ] || fail "--skip-nonfinite run failed: $(cat "$scratch/err")"
echo "$out" | grep -qi 'nan' && fail "JSON holds nan: $out"
echo "$out" | head -n 1 | grep -q '"test_loss": null' || fail "non-finite test loss is not null: $out"

# 5. Bad data: one line naming the file and the problem, non-zero exit.
bad="$scratch/bad"
make_idx "$bad" train 300
make_idx "$bad" t10k 100
head -c 1000 "$good/train-images-idx3-ubyte" >"$bad/train-images-idx3-ubyte" # truncated
"$dptrain" train --data "$bad" --epochs 1 --backend cpu >/dev/null 2>"$scratch/err"
rc=$?
[ $rc -ne 0 ] || fail "truncated data accepted"
grep -q "train-images-idx3-ubyte" "$scratch/err" || fail "message does not name the file: $(cat "$scratch/err")"
[ "$(wc -l <"$scratch/err")" -eq 1 ] || fail "not one line: $(cat "$scratch/err")"
"$dptrain" train --data "$scratch/none" --epochs 1 --backend cpu >/dev/null 2>"$scratch/err"
[ $? -ne 0 ] || fail "missing data directory accepted"

# 6. Under MPI: bad data on every rank and on one rank only; never a hang, non-zero everywhere.
if [ -n "$mpiexec" ]; then
  timeout 120 $mpiexec -n 2 "$dptrain" train --data "$bad" --epochs 1 --backend cpu \
    >/dev/null 2>"$scratch/err"
  rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "mpi bad data exited $rc"
  [ "$(grep -c '^dptrain:' "$scratch/err")" -eq 1 ] ||
    fail "mpi bad data: expected one error line: $(cat "$scratch/err")"
  # Rank 1 alone reads a corrupt directory (its own --data through a per-rank wrapper).
  cat >"$scratch/per-rank.sh" <<EOF
#!/usr/bin/env bash
if [ "\${OMPI_COMM_WORLD_RANK:-0}" = 1 ]; then d="$bad"; else d="$good"; fi
exec "$dptrain" train --data "\$d" --hidden 16 --global-batch 50 --epochs 1 --backend cpu
EOF
  chmod +x "$scratch/per-rank.sh"
  timeout 120 $mpiexec -n 2 "$scratch/per-rank.sh" >/dev/null 2>"$scratch/err"
  rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "mpi one bad rank exited $rc"
  grep -q "rank 1" "$scratch/err" || fail "mpi one bad rank: failing rank not named: $(cat "$scratch/err")"
  # A --backend list whose bad entry only rank 1 would draw stops every rank at once.
  timeout 120 $mpiexec -n 2 "$dptrain" train --data "$good" --hidden 16 --global-batch 50 \
    --epochs 1 --backend cpu,bogus >/dev/null 2>"$scratch/err"
  rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "mpi --backend cpu,bogus exited $rc"
  grep -q "bad --backend 'cpu,bogus'" "$scratch/err" ||
    fail "mpi --backend cpu,bogus: no usage message: $(cat "$scratch/err")"
  # And a good run on 2 ranks agrees with the fingerprint printed on both.
  out=$(timeout 120 $mpiexec -n 2 "$dptrain" train --data "$good" --hidden 16 --global-batch 50 \
    --epochs 1 --backend cpu --json 2>"$scratch/err")
  [ $? -eq 0 ] || fail "mpi good run failed: $(cat "$scratch/err")"
  echo "$out" | tail -n 1 | grep -q '"ranks": 2' || fail "mpi run does not report 2 ranks: $out"
  # The proportional split over ranks: every rank computes the same shares from the gathered
  # times (the closing drift check would stop ranks that disagree); rank 1 slowed 3x.
  out=$(DPT_TEST_SLOW_REPLICA=1:3 timeout 120 $mpiexec -n 2 "$dptrain" train --data "$good" \
    --hidden 16 --global-batch 32 --epochs 1 --backend cpu --split proportional \
    --split-every 2 --json 2>"$scratch/err")
  shares=$(tail -n 1 <<<"$out" | sed -n 's/.*"shares": \[\([0-9]*\), \([0-9]*\)\].*/\1 \2/p')
  read -r s0 s1 <<<"$shares"
  [ -n "$s0" ] && [ $((s0 + s1)) -eq 32 ] && [ "$s1" -lt "$s0" ] ||
    fail "mpi --split proportional: shares '$shares': $out $(cat "$scratch/err")"
fi

# 7. bench train: a few steps on random data (no data set there), in threads and under MPI;
# one JSON object from rank 0 with the figures and the time split.
out=$(timeout 300 "$dptrain" bench train --steps 3 --repeat 1 --data "$scratch/none" --json \
  2>"$scratch/err")
[ $? -eq 0 ] || fail "bench train failed: $(cat "$scratch/err")"
for key in bare_samples_per_sec one_replica_samples_per_sec speedup replicas_ms_per_step; do
  echo "$out" | grep -q "\"$key\"" || fail "bench train JSON lacks $key: $out"
done
echo "$out" | grep -q '"replicas": 2,' || fail "bench train: expected 2 replicas: $out"
"$dptrain" bench train --steps 0 >/dev/null 2>&1
[ $? -eq 2 ] || fail "bench train --steps 0 accepted"
if [ -n "$mpiexec" ]; then
  out=$(timeout 300 $mpiexec -n 2 "$dptrain" bench train --steps 3 --repeat 1 \
    --data "$scratch/none" --json 2>"$scratch/err")
  [ $? -eq 0 ] || fail "mpi bench train failed: $(cat "$scratch/err")"
  [ "$(echo "$out" | grep -c '"speedup"')" -eq 1 ] || fail "mpi bench train: not one object: $out"
  echo "$out" | grep -q '"replicas": 2,' || fail "mpi bench train: expected 2 ranks: $out"
fi

# 8. Outputs are tried before the run, and a run that cannot be trusted saves nothing.
small=(--data "$good" --hidden 16 --global-batch 50 --epochs 1 --backend cpu)
out=$("$dptrain" train "${small[@]}" --save-weights "$scratch/no/such/dir/w.st" 2>"$scratch/err")
[ $? -ne 0 ] || fail "--save-weights into a missing directory accepted"
grep -q "cannot write there" "$scratch/err" || fail "unwritable output: $(cat "$scratch/err")"
echo "$out" | grep -q "^epoch" && fail "unwritable output found only after training: $out"
"$dptrain" train "${small[@]}" --save-weights "$scratch" >/dev/null 2>"$scratch/err"
grep -q "is a directory" "$scratch/err" || fail "--save-weights DIR: $(cat "$scratch/err")"
echo stale >"$scratch/w.st.tmp"
"$dptrain" train "${small[@]}" --save-weights "$scratch/w.st" >/dev/null 2>"$scratch/err" ||
  fail "save after a stale .tmp failed: $(cat "$scratch/err")"
grep -q "removed .*w.st.tmp" "$scratch/err" || fail "stale .tmp not reported: $(cat "$scratch/err")"
[ -s "$scratch/w.st" ] && [ ! -e "$scratch/w.st.tmp" ] || fail "stale .tmp: weights not saved"
"$dptrain" train "${small[@]}" --init-weights "$scratch" >/dev/null 2>"$scratch/err"
grep -q "not a file (a directory)" "$scratch/err" || fail "--init-weights DIR: $(cat "$scratch/err")"
"$dptrain" train "${small[@]}" --lr 1e-50 >/dev/null 2>&1
[ $? -eq 2 ] || fail "--lr 1e-50 (0 as a float) accepted"
"$dptrain" train "${small[@]}" --warmup 4611686018427387904 >/dev/null 2>"$scratch/err"
grep -q "longer than the run's 6 steps" "$scratch/err" || fail "--warmup: $(cat "$scratch/err")"
"$dptrain" train "${small[@]}" --global-batch 4611686018427387904 >/dev/null 2>"$scratch/err"
grep -q "larger than the 300 training samples" "$scratch/err" ||
  fail "huge --global-batch: $(cat "$scratch/err")"
# Diverging with --skip-nonfinite: past --max-skipped it fails, and the good file stays.
cp "$scratch/w.st" "$scratch/w.keep"
"$dptrain" train "${small[@]}" --epochs 3 --lr 1e30 --momentum 0 --skip-nonfinite \
  --max-skipped 2 --save-weights "$scratch/w.st" >/dev/null 2>"$scratch/err"
[ $? -ne 0 ] || fail "diverging run past --max-skipped exited 0"
grep -q "in a row were skipped" "$scratch/err" || fail "max-skipped: $(cat "$scratch/err")"
cmp -s "$scratch/w.st" "$scratch/w.keep" || fail "a failed run overwrote the weights file"

# 9. Ranks started with different settings stop before the first step, naming the field.
if [ -n "$mpiexec" ]; then
  timeout 120 $mpiexec -n 1 "$dptrain" train "${small[@]}" --optimizer sgd : \
    -n 1 "$dptrain" train "${small[@]}" --optimizer adamw >"$scratch/out" 2>"$scratch/err"
  rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "mpi different --optimizer exited $rc"
  grep -q "disagree on the optimizer" "$scratch/err" || fail "mpi optimizer: $(cat "$scratch/err")"
  grep -q "^epoch" "$scratch/out" && fail "mpi different --optimizer trained: $(cat "$scratch/out")"
  timeout 120 $mpiexec -n 1 "$dptrain" train "${small[@]}" --max-steps 5 : \
    -n 1 "$dptrain" train "${small[@]}" --max-steps 4 >/dev/null 2>"$scratch/err"
  rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "mpi different --max-steps exited $rc"
  grep -q "disagree on the step limit" "$scratch/err" || fail "mpi max-steps: $(cat "$scratch/err")"
fi

# 10. A stalled rank ends the job within the deadline: the rank that sees the timeout prints one
# line naming the other and ends every process (no MPI_Finalize waiting on a stopped rank).
if [ -n "$mpiexec" ]; then
  cat >"$scratch/stall.sh" <<EOF
#!/usr/bin/env bash
echo \$\$ >"$scratch/pid.\${OMPI_COMM_WORLD_RANK:-0}"
exec "$dptrain" train --data "$good" --hidden 16 --global-batch 50 --epochs 100000 \\
  --backend cpu --quiet
EOF
  chmod +x "$scratch/stall.sh"
  rm -f "$scratch"/pid.*
  DPT_COMM_TIMEOUT=3 timeout 60 $mpiexec -n 2 "$scratch/stall.sh" >"$scratch/out" 2>"$scratch/err" &
  job=$!
  # Stop rank 1 once training runs (rank 0's first epoch line): communicator creation uses
  # blocking MPI calls that no deadline covers.
  for _ in $(seq 300); do
    grep -q "^epoch" "$scratch/out" && [ -s "$scratch/pid.1" ] && break
    sleep 0.1
  done
  kill -STOP "$(cat "$scratch/pid.1")"
  stopped=$(date +%s)
  wait $job
  rc=$?
  took=$(($(date +%s) - stopped))
  kill -KILL "$(cat "$scratch/pid.1")" 2>/dev/null
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "stalled rank: job exited $rc"
  [ $took -le 8 ] || fail "stalled rank: the job took $took s to end (deadline 3 s)"
  grep -q "timeout: .*rank 1" "$scratch/err" || fail "stalled rank: $(cat "$scratch/err")"
fi

# 11. Bring your own data: a safetensors tensor data set (3 channels of 6x6, 4 classes) written
# by the library's writer; normalization, augmentation, no test set, bad input.
if [ -n "$gen" ]; then
  st="$scratch/st"
  mkdir -p "$st"
  "$gen" "$st/train.safetensors" 400 3 6 6 4 1 && "$gen" "$st/test.safetensors" 100 3 6 6 4 2 &&
    "$gen" "$st/five.safetensors" 100 3 6 6 5 3 || fail "st_dataset_gen failed"
  stargs=(--data "$st/train.safetensors" --hidden 32 --global-batch 50 --backend cpu --json)
  out=$("$dptrain" train "${stargs[@]}" --test-data "$st/test.safetensors" --epochs 3 \
    --mean 0.5,0.5,0.5 --std 0.25,0.25,0.25 2>"$scratch/err")
  [ $? -eq 0 ] || fail "safetensors run failed: $(cat "$scratch/err")"
  [ "$(echo "$out" | grep -c '"epoch"')" -eq 3 ] || fail "safetensors run: expected 3 epochs: $out"
  acc=$(echo "$out" | tail -n 1 | sed 's/.*"test_accuracy": \([0-9.]*\),.*/\1/')
  awk -v a="$acc" 'BEGIN { exit !(a > 0.6) }' || fail "safetensors run: test accuracy '$acc': $out"
  # Augmented runs: the same settings give the same parameters, and another seed others.
  crop=("${stargs[@]}" --test-data "$st/test.safetensors" --epochs 2 --mean 0.5 --std 0.25
    --random-crop 1)
  aug=("${crop[@]}" --hflip)
  h1=$("$dptrain" train "${aug[@]}" 2>&1 | tail -n 1 | grep -o '"param_hash": "[0-9a-f]*"')
  h2=$("$dptrain" train "${aug[@]}" 2>&1 | tail -n 1 | grep -o '"param_hash": "[0-9a-f]*"')
  h3=$("$dptrain" train "${crop[@]}" 2>&1 | tail -n 1 | grep -o '"param_hash": "[0-9a-f]*"')
  [ -n "$h1" ] && [ "$h1" = "$h2" ] || fail "augmented runs differ: '$h1' vs '$h2'"
  [ -n "$h3" ] && [ "$h1" != "$h3" ] || fail "--hflip changed nothing: '$h1' vs '$h3'"
  # Augmentation is keyed by the sample, not by who gathers it: sharded and full steps agree
  # on 3 replicas.
  for mode in "" --full-step; do
    DPT_ALLREDUCE_ALGO=ring "$dptrain" train "${aug[@]}" --replicas 3 $mode 2>"$scratch/err" |
      tail -n 1 | grep -o '"param_hash": "[0-9a-f]*"' >"$scratch/sthash$mode"
  done
  [ -s "$scratch/sthash" ] && cmp -s "$scratch/sthash" "$scratch/sthash--full-step" ||
    fail "augmented sharded and full steps differ: $(cat "$scratch/sthash"{,--full-step})"
  # No test set: trained, and the report says so.
  out=$("$dptrain" train --data "$st/train.safetensors" --hidden 16 --global-batch 50 --epochs 1 \
    --backend cpu 2>"$scratch/err")
  [ $? -eq 0 ] || fail "run without a test set failed: $(cat "$scratch/err")"
  echo "$out" | grep -q "^epoch .*(no test set)" || fail "no test set not reported: $out"
  echo "$out" | grep -q "^done: .*no test set" || fail "final line: no test set not said: $out"
  # Bad settings and data: one line naming the problem.
  "$dptrain" train "${stargs[@]}" --epochs 1 --mean 0.5,0.5 --std 1,1 >/dev/null 2>"$scratch/err"
  [ $? -ne 0 ] && grep -q "2 mean/std values for data of 3 channels" "$scratch/err" ||
    fail "--mean of 2 values on 3 channels: $(cat "$scratch/err")"
  "$dptrain" train "${stargs[@]}" --epochs 1 --mean 0.5 >/dev/null 2>"$scratch/err"
  [ $? -eq 2 ] && grep -q "mean and --std go together" "$scratch/err" ||
    fail "--mean without --std: $(cat "$scratch/err")"
  "$dptrain" train "${stargs[@]}" --epochs 1 --std 0 >/dev/null 2>&1
  [ $? -eq 2 ] || fail "--std 0 accepted"
  "$dptrain" train "${stargs[@]}" --epochs 1 --test-data "$st/five.safetensors" >/dev/null \
    2>"$scratch/err"
  [ $? -ne 0 ] && grep -q "five.safetensors: tensor 'y': label 4 at index 4 is outside \[0, 4)" \
    "$scratch/err" && [ "$(wc -l <"$scratch/err")" -eq 1 ] ||
    fail "test labels beyond the training classes: $(cat "$scratch/err")"
  head -c 100 "$st/train.safetensors" >"$st/cut.safetensors"
  "$dptrain" train --data "$st/cut.safetensors" --epochs 1 --backend cpu >/dev/null 2>"$scratch/err"
  [ $? -ne 0 ] && grep -q "cut.safetensors" "$scratch/err" && [ "$(wc -l <"$scratch/err")" -eq 1 ] ||
    fail "truncated safetensors data: $(cat "$scratch/err")"
  # The normalization travels with the weights: eval gives the accuracy training printed.
  out=$("$dptrain" train "${stargs[@]}" --test-data "$st/test.safetensors" --epochs 1 \
    --mean 0.5 --std 0.25 --save-weights "$st/norm.safetensors" 2>"$scratch/err" | tail -n 1)
  want=$(sed 's/.*"test_accuracy": \([0-9.]*\),.*/\1/' <<<"$out")
  got=$("$dptrain" eval --weights "$st/norm.safetensors" --data "$st/test.safetensors" \
    --backend cpu --json 2>"$scratch/err" | sed 's/.*"accuracy": \([0-9.]*\).*/\1/')
  awk -v a="$want" -v b="$got" 'BEGIN { exit !(a != "" && a + 0 == b + 0) }' ||
    fail "eval with the stored normalization: '$got', training printed '$want'"
  # A ResNet on 3-channel 6x6 images with 4 classes: the shapes come from the data.
  out=$("$dptrain" train --data "$st/train.safetensors" --model resnet --depth 8 --global-batch 50 \
    --epochs 1 --max-steps 2 --backend cpu --json 2>"$scratch/err")
  [ $? -eq 0 ] && grep -q '"num_params": 77652' <<<"$out" ||
    fail "resnet on 3x6x6 data, 4 classes: $(cat "$scratch/err") $out"
fi

# 12. Layer graphs: a tiny ResNet and a model file train (batch norm buffers saved and loaded
# back), and bad model files and depths get one line naming the problem.
resnet=(--data "$good" --model resnet --depth 8 --global-batch 16 --epochs 1 --max-steps 2
  --backend cpu --json)
out=$("$dptrain" train "${resnet[@]}" --save-weights "$scratch/resnet.safetensors" 2>"$scratch/err")
[ $? -eq 0 ] || fail "resnet run failed: $(cat "$scratch/err")"
grep -q '"activation_bytes": [1-9]' <<<"$out" || fail "no activation memory reported: $out"
grep -q '"num_params": 77754' <<<"$out" || fail "resnet-8 parameter count: $out"
# --accumulate: 4 micro-batches of the 16 hold a quarter of the activations; with sync-bn refused.
act1=$(grep -o '"activation_bytes": [0-9]*' <<<"$out" | head -n 1 | cut -d' ' -f2)
out=$("$dptrain" train "${resnet[@]}" --accumulate 4 2>"$scratch/err")
act4=$(grep -o '"activation_bytes": [0-9]*' <<<"$out" | head -n 1 | cut -d' ' -f2)
[ -n "$act4" ] && [ $((act4 * 3)) -lt "$act1" ] ||
  fail "--accumulate 4: activations $act4 against $act1: $(cat "$scratch/err")"
# --bucket-mb: buckets during backward give the same parameters (the sharded step), the report
# says how much of the exchange was exposed; --trace writes the timeline; bad values are refused.
mlp2=(--data "$good" --global-batch 32 --epochs 1 --max-steps 3 --backend cpu --replicas 2 --json)
h0=$("$dptrain" train "${mlp2[@]}" 2>/dev/null | tail -n 1 | grep -o '"param_hash": "[0-9a-f]*"')
out=$("$dptrain" train "${mlp2[@]}" --bucket-mb auto --trace "$scratch/trace.json" 2>"$scratch/err")
h1=$(tail -n 1 <<<"$out" | grep -o '"param_hash": "[0-9a-f]*"')
[ -n "$h0" ] && [ "$h0" = "$h1" ] && grep -q '"exposed_seconds": [0-9.]*' <<<"$out" &&
  grep -q "gradient buckets of [0-9]* KiB" "$scratch/err" && grep -q '"traceEvents"' "$scratch/trace.json" ||
  fail "--bucket-mb auto --trace: '$h1' against '$h0': $(cat "$scratch/err")"
# each bucket's shard updated once it is reduced, or with --bucket-whole-update after the last
grep -q "each bucket's shard of the update runs once its reduce-scatter is done" "$scratch/err" ||
  fail "--bucket-mb auto: no line on the update: $(cat "$scratch/err")"
out=$("$dptrain" train "${mlp2[@]}" --bucket-mb auto --bucket-whole-update 2>"$scratch/err")
h2=$(tail -n 1 <<<"$out" | grep -o '"param_hash": "[0-9a-f]*"')
[ "$h0" = "$h2" ] && grep -q "the update waits for the last bucket: asked for" "$scratch/err" ||
  fail "--bucket-whole-update: '$h2' against '$h0': $(cat "$scratch/err")"
"$dptrain" train "${mlp2[@]}" --bucket-whole-update >/dev/null 2>"$scratch/err" &&
  fail "--bucket-whole-update without --bucket-mb ran"
grep -q "bucket_whole_update needs gradient buckets" "$scratch/err" ||
  fail "--bucket-whole-update without --bucket-mb: $(cat "$scratch/err")"
for bad in "--bucket-mb -1" "--bucket-mb lots"; do
  set -- $bad
  "$dptrain" train "${mlp2[@]}" "$@" >/dev/null 2>"$scratch/err"
  [ $? -eq 2 ] && grep -q "bad value '$2' for --bucket-mb" "$scratch/err" ||
    fail "$bad: $(cat "$scratch/err")"
done
# --grad-dtype bf16: the rounding moves the parameters off float32's, error feedback moves them
# again; with --bucket-mb (64 KiB ring blocks: 6 of the 16-bit gradient, buckets of 2, or auto)
# the same parameters as one bfloat16 exchange; unknown types are refused.
hb=$("$dptrain" train "${mlp2[@]}" --grad-dtype bf16 2>"$scratch/err" | tail -n 1 |
  grep -o '"param_hash": "[0-9a-f]*"')
he=$("$dptrain" train "${mlp2[@]}" --grad-dtype bf16 --error-feedback 2>>"$scratch/err" |
  tail -n 1 | grep -o '"param_hash": "[0-9a-f]*"')
[ -n "$hb" ] && [ -n "$he" ] && [ "$hb" != "$h0" ] && [ "$he" != "$hb" ] ||
  fail "--grad-dtype bf16: '$hb', with feedback '$he', f32 '$h0': $(cat "$scratch/err")"
bf16=("${mlp2[@]}" --grad-dtype bf16 --error-feedback)
h1=$(DPT_COMM_BLOCK=65536 DPT_COMM_PIECE=16384 "$dptrain" train "${bf16[@]}" 2>"$scratch/err" |
  tail -n 1 | grep -o '"param_hash": "[0-9a-f]*"')
hbk=$(DPT_COMM_BLOCK=65536 DPT_COMM_PIECE=16384 "$dptrain" train "${bf16[@]}" --bucket-mb 0.125 \
  2>>"$scratch/err" | tail -n 1 | grep -o '"param_hash": "[0-9a-f]*"')
[ -n "$h1" ] && [ "$h1" = "$hbk" ] ||
  fail "--grad-dtype bf16 --bucket-mb 0.125: '$hbk' against '$h1': $(cat "$scratch/err")"
out=$(DPT_COMM_BLOCK=65536 DPT_COMM_PIECE=16384 "$dptrain" train "${bf16[@]}" --bucket-mb auto \
  2>"$scratch/err")
[ "$(tail -n 1 <<<"$out" | grep -o '"param_hash": "[0-9a-f]*"')" = "$h1" ] &&
  grep -q "gradient buckets of [0-9]* KiB" "$scratch/err" ||
  fail "--grad-dtype bf16 --bucket-mb auto: $out: $(cat "$scratch/err")"
"$dptrain" train "${mlp2[@]}" --grad-dtype f64 >/dev/null 2>"$scratch/err"
[ $? -eq 2 ] && grep -q "bad value 'f64' for --grad-dtype" "$scratch/err" ||
  fail "--grad-dtype f64: $(cat "$scratch/err")"
# --split proportional: replica 1 slowed 3x (the testing knob) gets the smaller share, printed
# when it changes (not with --quiet) and in the JSON objects; the options it needs, refused.
out=$(DPT_TEST_SLOW_REPLICA=1:3 "$dptrain" train "${mlp2[@]}" --max-steps 9 --split proportional \
  --split-every 2 2>"$scratch/err")
shares=$(tail -n 1 <<<"$out" | sed -n 's/.*"shares": \[\([0-9]*\), \([0-9]*\)\].*/\1 \2/p')
read -r s0 s1 <<<"$shares"
[ -n "$s0" ] && [ $((s0 + s1)) -eq 32 ] && [ "$s1" -lt "$s0" ] &&
  grep -q "^dptrain: split after step [0-9]*: shares [0-9]* [0-9]* (ms/sample: " "$scratch/err" ||
  fail "--split proportional: shares '$shares': $(cat "$scratch/err")"
DPT_TEST_SLOW_REPLICA=1:3 "$dptrain" train "${mlp2[@]}" --max-steps 9 --split proportional \
  --split-every 2 --quiet >/dev/null 2>"$scratch/err"
[ $? -eq 0 ] && ! grep -q "split after" "$scratch/err" ||
  fail "--split proportional --quiet: $(cat "$scratch/err")"
# --replicas with a --backend list: one process drives a replica on each backend.
if "$dptrain" devices 2>/dev/null | grep -q "^opencl:0"; then
  # (Sanitizer builds: AddressSanitizer fails to unmap a PoCL thread's alternate signal stack as
  # the thread ends, an error at exit; without those stacks the run is clean.)
  out=$(ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}use_sigaltstack=0" \
    "$dptrain" train "${mlp2[@]}" --backend cpu,opencl 2>"$scratch/err")
  [ $? -eq 0 ] && tail -n 1 <<<"$out" | grep -q '"replicas": 2, "backend": "cpu,opencl"' ||
    fail "--replicas 2 --backend cpu,opencl: $out $(cat "$scratch/err")"
fi
"$dptrain" train "${mlp2[@]}" --split-every 5 >/dev/null 2>"$scratch/err"
[ $? -eq 2 ] &&
  [ "$(head -n 1 "$scratch/err")" = "dptrain train: --split-every needs --split proportional" ] ||
  fail "--split-every without --split proportional: $(head -n 1 "$scratch/err")"
"$dptrain" train --model dlrm --split proportional >/dev/null 2>"$scratch/err"
[ $? -eq 2 ] && head -n 1 "$scratch/err" |
  grep -q "^dptrain train: --split proportional does not apply to --model dlrm" ||
  fail "--split proportional with dlrm: $(head -n 1 "$scratch/err")"
"$dptrain" train "${resnet[@]}" --accumulate 2 --sync-bn --replicas 2 >/dev/null 2>"$scratch/err"
[ $? -eq 1 ] && grep -q "does not combine with sync_bn" "$scratch/err" ||
  fail "--accumulate with --sync-bn: $(cat "$scratch/err")"
"$dptrain" train "${resnet[@]}" --init-weights "$scratch/resnet.safetensors" --max-steps 1 \
  --lr 1e-30 >/dev/null 2>"$scratch/err" ||
  fail "resnet weights did not load back: $(cat "$scratch/err")"
cat >"$scratch/block.json" <<'JSON'
{"layers": [
  {"name": "conv", "kind": "conv2d", "out": 4, "kernel": 3, "padding": 1, "bias": false},
  {"name": "bn", "kind": "batchnorm2d"},
  {"name": "sum", "kind": "add", "inputs": ["bn", "input"]},
  {"name": "relu", "kind": "relu"},
  {"name": "pool", "kind": "global_avgpool"},
  {"name": "flat", "kind": "flatten"},
  {"name": "fc", "kind": "linear", "out": "classes"}]}
JSON
"$dptrain" train --data "$good" --model "$scratch/block.json" --global-batch 16 --epochs 1 \
  --max-steps 1 --backend cpu >/dev/null 2>"$scratch/err"
[ $? -ne 0 ] && grep -q "'sum' (add) adds inputs of shapes 4 x 8 x 8 and 1 x 8 x 8" \
  "$scratch/err" && [ "$(wc -l <"$scratch/err")" -eq 1 ] ||
  fail "model file with mismatched add: $(cat "$scratch/err")"
sed -i 's/"out": 4,/"out": 1,/' "$scratch/block.json"
"$dptrain" train --data "$good" --model "$scratch/block.json" --global-batch 16 --epochs 1 \
  --max-steps 1 --backend cpu --quiet >/dev/null 2>"$scratch/err" ||
  fail "model file run failed: $(cat "$scratch/err")"
printf '{"layers": [{"kind": "relu"},]}' >"$scratch/bad.json"
"$dptrain" train --data "$good" --model "$scratch/bad.json" --epochs 1 >/dev/null 2>"$scratch/err"
[ $? -eq 1 ] && grep -q "bad.json: line 1, column" "$scratch/err" ||
  fail "invalid JSON model file: $(cat "$scratch/err")"
"$dptrain" train --data "$good" --model resnet --depth 21 --epochs 1 >/dev/null 2>"$scratch/err"
[ $? -eq 1 ] && grep -q "depth 21 is not 6n+2" "$scratch/err" || fail "--depth 21: $(cat "$scratch/err")"

# 13. eval and predict: the model comes from the weights file; eval's accuracy is the one train
# printed for the same weights (2 replicas, and a tiny ResNet with batch norm buffers).
field() { sed -n "s/.*\"$1\": \([-0-9.a-z]*\).*/\1/p" | tail -n 1; }
ev=(--backend cpu --json)
for model in "--hidden 16 --replicas 2" "--model resnet --depth 8 --global-batch 16 --max-steps 2"; do
  out=$("$dptrain" train --data "$good" --global-batch 50 --epochs 1 --backend cpu --json $model \
    --save-weights "$scratch/e.st" 2>"$scratch/err")
  [ $? -eq 0 ] || fail "train $model for eval failed: $(cat "$scratch/err")"
  want=$(echo "$out" | field test_accuracy)
  got=$("$dptrain" eval --weights "$scratch/e.st" --data "$good" "${ev[@]}" 2>"$scratch/err")
  [ $? -eq 0 ] || fail "eval after $model failed: $(cat "$scratch/err")"
  [ -n "$want" ] && [ "$(printf %.4f "$(echo "$got" | field accuracy)")" = "$want" ] ||
    fail "eval after $model: accuracy $(echo "$got" | field accuracy), train printed $want"
  awk -v a="$(echo "$got" | field loss)" -v b="$(echo "$out" | field test_loss)" \
    'BEGIN { exit !(a - b < 1e-5 && b - a < 1e-5) }' || fail "eval after $model: loss $got vs $out"
done
echo "$got" | grep -q '"samples": 100, "correct": [0-9]*, "loss"' || fail "eval JSON: $got"
echo "$got" | grep -q '"per_class": \[[0-9.]*\(, [0-9.]*\)\{9\}\], "confusion": \[\[' ||
  fail "eval JSON per_class/confusion: $got"
# The confusion matrix's rows hold each class's samples (10 each), its diagonal the correct ones.
echo "$got" | sed 's/.*"confusion": \[\[\(.*\)\]\]}/\1/; s/\], \[/\n/g' |
  awk -F', ' -v c="$(echo "$got" | field correct)" '{ for (j = 1; j <= NF; ++j) { s += $j;
    if (j == NR) d += $j } if (s != 10 * NR) bad = 1 } END { exit !(NR == 10 && !bad && d == c) }' ||
  fail "confusion matrix does not add up: $got"
"$dptrain" eval --weights "$scratch/e.st" --data "$good" --backend cpu >"$scratch/out" 2>&1 &&
  grep -q "accuracy" "$scratch/out" && [ "$(grep -c '^    [0-9]  ' "$scratch/out")" -eq 10 ] ||
  fail "eval text output: $(cat "$scratch/out")"
# On Fashion-MNIST itself when it is there: 10000 test images, MLP on 2 replicas.
fm=/usr/share/datasets/fashion-mnist
if [ -e "$fm/t10k-labels-idx1-ubyte.gz" ] || [ -e "$fm/t10k-labels-idx1-ubyte" ]; then
  out=$("$dptrain" train --data "$fm" --hidden 32 --max-steps 5 --replicas 2 --backend cpu --json \
    --save-weights "$scratch/fm.st" 2>"$scratch/err")
  got=$("$dptrain" eval --weights "$scratch/fm.st" --data "$fm" "${ev[@]}" 2>>"$scratch/err")
  [ "$(printf %.4f "$(echo "$got" | field accuracy)")" = "$(echo "$out" | field test_accuracy)" ] ||
    fail "fashion-mnist eval: $got, train: $out, $(cat "$scratch/err")"
fi

# predict: one CSV row per input with probabilities summing to 1, or the top K; safetensors.
"$dptrain" predict --weights "$scratch/e.st" --data "$good" --backend cpu >"$scratch/p.csv" \
  2>"$scratch/err" || fail "predict failed: $(cat "$scratch/err")"
[ "$(wc -l <"$scratch/p.csv")" -eq 101 ] && head -n 1 "$scratch/p.csv" | grep -q '^index,p0,.*,p9$' ||
  fail "predict CSV: $(head -n 3 "$scratch/p.csv")"
awk -F, 'NR > 1 { s = 0; for (j = 2; j <= NF; ++j) s += $j; if (NF != 11 || s < 0.9999 ||
  s > 1.0001 || $1 != NR - 2) exit 1 }' "$scratch/p.csv" || fail "predict rows: $(sed -n 2p "$scratch/p.csv")"
"$dptrain" predict --weights "$scratch/e.st" --data "$good" --backend cpu --top 3 --limit 5 \
  --output "$scratch/t.csv" 2>"$scratch/err" || fail "predict --top failed: $(cat "$scratch/err")"
[ "$(head -n 1 "$scratch/t.csv")" = "index,class1,prob1,class2,prob2,class3,prob3" ] &&
  [ "$(wc -l <"$scratch/t.csv")" -eq 6 ] &&
  awk -F, 'NR > 1 && !($3 >= $5 && $5 >= $7 && $2 != $4) { exit 1 }' "$scratch/t.csv" ||
  fail "predict --top 3: $(cat "$scratch/t.csv")"
for top in "" "--top 2"; do
  "$dptrain" predict --weights "$scratch/e.st" --data "$good" --backend cpu $top \
    --output "$scratch/p.safetensors" 2>"$scratch/err" && [ -s "$scratch/p.safetensors" ] ||
    fail "predict $top to safetensors: $(cat "$scratch/err")"
  want='"probs"' && [ -n "$top" ] && want='"topk_prob"'
  head -c 300 "$scratch/p.safetensors" | grep -q "$want" || fail "predict $top: no $want tensor"
done

# Weights without the model's description: the model options describe it (as train takes them).
LC_ALL=C sed 's/"dptrain\.model"/"dptrain.modex"/' "$scratch/w.safetensors" >"$scratch/bare.st"
got=$("$dptrain" eval --weights "$scratch/bare.st" --data "$good" --hidden 16 "${ev[@]}" 2>"$scratch/err")
[ $? -eq 0 ] || fail "eval --hidden 16 of a bare file failed: $(cat "$scratch/err")"
# Bad input: one line, exit 1 (2 for usage errors), naming the file, the tensor, the shapes.
badrun() { # badrun WHAT EXPECTED-RC PATTERN -- ARGS...
  local what=$1 want=$2 pat=$3
  shift 4
  "$dptrain" "$@" >/dev/null 2>"$scratch/err"
  local rc=$?
  [ $rc -eq "$want" ] || fail "$what: exited $rc, expected $want: $(cat "$scratch/err")"
  grep -q -- "$pat" "$scratch/err" || fail "$what: message lacks '$pat': $(cat "$scratch/err")"
  [ "$want" -eq 2 ] || [ "$(wc -l <"$scratch/err")" -eq 1 ] || fail "$what: not one line: $(cat "$scratch/err")"
}
badrun "bare file, other model" 1 "'1.weight' has shape \[16, 64\], the model needs \[17, 64\]" -- \
  eval --weights "$scratch/bare.st" --data "$good" --hidden 17 --backend cpu
LC_ALL=C sed 's/\\"out\\":16}/\\"out\\":15}/' "$scratch/w.safetensors" \
  >"$scratch/other.st"
badrun "described model not the tensors" 1 "'1.weight' has shape \[16, 64\], the model needs \[15, 64\]" -- \
  predict --weights "$scratch/other.st" --data "$good" --backend cpu
badrun "missing weights" 1 "$scratch/none.st" -- eval --weights "$scratch/none.st" --data "$good"
badrun "weights a directory" 1 "$scratch" -- predict --weights "$scratch" --data "$good"
head -c 100 "$scratch/w.safetensors" >"$scratch/trunc.st"
badrun "truncated weights" 1 "trunc.st" -- eval --weights "$scratch/trunc.st" --data "$good"
make_idx "$scratch/big" t10k 20 12
badrun "data of another shape" 1 "1x12x12, the model takes 1x8x8" -- \
  eval --weights "$scratch/w.safetensors" --data "$scratch/big" --backend cpu
badrun "missing data" 1 "t10k-images" -- predict --weights "$scratch/w.safetensors" --data "$scratch/none"
badrun "--model with a described file" 1 "describes its model" -- \
  eval --weights "$scratch/w.safetensors" --data "$good" --model cnn
badrun "unwritable output" 1 "$scratch/no/dir/p.csv" -- \
  predict --weights "$scratch/w.safetensors" --data "$good" --output "$scratch/no/dir/p.csv"
badrun "eval without --weights" 2 "^dptrain eval: --weights is required$" -- eval --data "$good"
badrun "predict without --data" 2 "^dptrain predict: --data is required$" -- \
  predict --weights "$scratch/w.safetensors"
badrun "eval --batch 0" 2 "bad value '0' for --batch" -- eval --weights x --batch 0
badrun "predict --top x" 2 "bad value 'x' for --top" -- predict --weights x --top x
badrun "eval --top" 2 "unknown option '--top'" -- eval --weights x --top 2
badrun "eval --backend" 2 "bad value 'gpu' for --backend" -- eval --weights x --backend gpu
badrun "predict --limit" 2 "needs a value" -- predict --weights x --limit
"$dptrain" eval --help | grep -q -- "--weights FILE" && "$dptrain" predict --help | grep -q -- "--top K" ||
  fail "eval/predict --help"
"$dptrain" help | grep -q "^  eval " || fail "dptrain help does not list eval"

# 14. Checkpoints: info and export on checkpoints the library writes (tests/fixtures/ckpt_gen.c, from the
# weights of section 3, an SGD momentum buffer per tensor, keep 2), a corrupt newest one passed
# over; then `dptrain run` restarting a failing job.
if [ -n "$ckgen" ]; then
  ck="$scratch/ck"
  for step in 5 10 15; do
    "$ckgen" "$scratch/w.safetensors" "$ck" $step 2 >/dev/null 2>"$scratch/err" ||
      fail "ckpt_gen $step: $(cat "$scratch/err")"
  done
  [ "$(ls -A "$ck")" = "$(printf 'ckpt-000000000010.safetensors\nckpt-000000000015.safetensors')" ] ||
    fail "keep 2 left: $(ls -A "$ck")"
  "$dptrain" checkpoint info "$ck" >"$scratch/out" 2>"$scratch/err" || fail "info: $(cat "$scratch/err")"
  for want in "^file: *$ck/ckpt-000000000015.safetensors$" "^valid: *yes (CRC32 of 8 tensors checked" \
    "^step: *15 (0 updates)$" "^epoch: *2 (1-based; 2 batches of it done)$" "^world size: *2$" "^lr scale: *0.5$" \
    "^seed: *3$" "^state hash: *fedcba9876543210$" "^optimizer: *momentum_buffer (4 tensors)$" \
    "^model: *4 layers, input 1x8x8, 10 classes$" "^  lr: 0.05$" "^  optimizer: sgd$"; do
    grep -q "$want" "$scratch/out" || fail "info lacks '$want': $(cat "$scratch/out")"
  done
  out=$("$dptrain" checkpoint info "$ck/ckpt-000000000015.safetensors" --json)
  grep -q '"valid":true,"tensors":8,.*"progress":{"step":15,"optimizer_steps":0,"epoch":1,"batch":2,' <<<"$out" &&
    grep -q '"seed":"0000000000000003"' <<<"$out" || fail "info --json: $out"
  # One bit flipped near the end of the newest file: passed over, the one before it reported.
  f="$ck/ckpt-000000000015.safetensors" off=$(($(stat -c %s "$ck/ckpt-000000000015.safetensors") - 5))
  b=$(od -An -tu1 -j $off -N1 "$f" | tr -d ' ')
  printf "\\x$(printf %02x $((b ^ 1)))" | dd of="$f" bs=1 seek=$off conv=notrunc 2>/dev/null
  "$dptrain" checkpoint info "$ck" >"$scratch/out" 2>"$scratch/err" || fail "info after corruption: $(cat "$scratch/err")"
  grep -q "^skipped: *$f: tensor '[^']*' fails its CRC32 check" "$scratch/out" &&
    grep -q "^file: *$ck/ckpt-000000000010.safetensors$" "$scratch/out" ||
    fail "info does not fall back: $(cat "$scratch/out")"
  badrun "corrupt checkpoint" 1 "fails its CRC32 check (stored [0-9a-f]\{8\}, computed" -- checkpoint info "$f"
  badrun "missing checkpoint" 1 "$scratch/none.st" -- checkpoint info "$scratch/none.st"
  mkdir -p "$scratch/empty"
  badrun "empty checkpoint dir" 1 "empty: holds no checkpoint" -- checkpoint info "$scratch/empty"
  badrun "checkpoint, no subcommand" 2 "usage: dptrain checkpoint" -- checkpoint
  badrun "checkpoint info, no path" 2 "PATH is required" -- checkpoint info
  badrun "checkpoint frob" 2 "unknown subcommand 'frob'" -- checkpoint frob "$ck"
  badrun "export without --weights" 2 "--weights is required" -- checkpoint export "$ck"
  # Export: the model's weights only, which eval reads as the weights they came from.
  "$dptrain" checkpoint export "$ck" --weights "$scratch/ex.st" >/dev/null 2>"$scratch/err" ||
    fail "export: $(cat "$scratch/err")"
  ! head -c 2000 "$scratch/ex.st" | grep -a -q 'optimizer\.\|dptrain\.checkpoint\|dptrain\.crc32' ||
    fail "export kept checkpoint-only tensors or metadata"
  a=$("$dptrain" eval --weights "$scratch/ex.st" --data "$good" "${ev[@]}" 2>"$scratch/err") &&
    b=$("$dptrain" eval --weights "$scratch/w.safetensors" --data "$good" "${ev[@]}") && [ "$a" = "$b" ] ||
    fail "eval of the export: $a vs $b $(cat "$scratch/err")"
fi

# run: a job that fails twice then succeeds is restarted twice; one that always fails is given
# up on after N restarts with its status; a usage error (2) and a job ended by a signal sent to
# run are not restarted.
cnt="$scratch/count"
job='n=$(cat "$0" 2>/dev/null || echo 0); echo $((n + 1)) >"$0"; [ $n -ge 2 ] || exit ${1:-1}'
runjob() { rm -f "$cnt"; "$dptrain" run --max-restarts 2 --restart-delay 0 -- sh -c "$job" "$cnt" "$@" 2>"$scratch/err"; }
runjob 1 --resume; rc=$?
[ $rc -eq 0 ] && [ "$(cat "$cnt")" = 3 ] && [ "$(grep -c '^dptrain run: attempt [12]: exited with status 1; restart [12] of 2$' "$scratch/err")" = 2 ] &&
  ! grep -q "no --resume" "$scratch/err" || fail "run, fails twice: rc $rc, $(cat "$scratch/err")"
job='n=$(cat "$0" 2>/dev/null || echo 0); echo $((n + 1)) >"$0"; exit $1'
runjob 3; rc=$?
[ $rc -eq 3 ] && [ "$(cat "$cnt")" = 3 ] && grep -q "^dptrain run: warning: the command has no --resume" "$scratch/err" &&
  grep -q "^dptrain run: attempt 3: exited with status 3; giving up after 2 restarts$" "$scratch/err" ||
  fail "run, always fails: rc $rc, $(cat "$scratch/err")"
runjob 2 --resume; rc=$?
[ $rc -eq 2 ] && [ "$(cat "$cnt")" = 1 ] && grep -q "(a usage error); not restarting" "$scratch/err" ||
  fail "run, usage error: rc $rc, $(cat "$scratch/err")"
badrun "run, no command" 2 "no command given" -- run --max-restarts 1
badrun "run, bad --max-restarts" 2 "bad value '-1' for --max-restarts" -- run --max-restarts -1 -- true
badrun "run, command not found" 127 "cannot run '$scratch/none'" -- run -- "$scratch/none" --resume
rm -f "$scratch/up" "$scratch/sig"
"$dptrain" run --restart-delay 0 -- sh -c 'trap "echo USR1 >>$0" USR1; trap "echo TERM >>$0; exit 143" TERM;
  : >$0.up; while :; do sleep 0.1; done' "$scratch/sig" --resume 2>"$scratch/err" &
pid=$!
for _ in $(seq 100); do [ -e "$scratch/sig.up" ] && break; sleep 0.1; done
kill -USR1 $pid; sleep 0.5; kill -TERM $pid; wait $pid; rc=$?
[ $rc -eq 143 ] && [ "$(cat "$scratch/sig" 2>/dev/null | tr '\n' ' ')" = "USR1 TERM " ] &&
  grep -q "after signal 15; not restarting" "$scratch/err" ||
  fail "run forwarding signals: rc $rc, job saw '$(cat "$scratch/sig" 2>/dev/null)', $(cat "$scratch/err")"
"$dptrain" help | grep -q "^  checkpoint info " && "$dptrain" help | grep -q "^  run " ||
  fail "dptrain help does not list checkpoint and run"

echo "cli test: $failures failure(s)"
[ $failures -eq 0 ]
